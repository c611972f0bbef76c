"""The settings of each kind of run.

One run of each command: :class:`TrainConfig` (``bert|gpt train``), :class:`FinetuneConfig`
(``bert finetune``) and :class:`DateTrainConfig` (``transformer train``). The command line
builds each with :func:`config_from_args`. This module imports no TensorFlow.
"""
import dataclasses
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.models.config import ModelConfig


@dataclasses.dataclass
class TrainConfig:
    """One pre-training run. Sizes default to the tutorial's (256 / 4 layers / 4 heads).

    ``steps`` counts optimisation steps of ``batch_size`` sequences; the learning rate warms
    up linearly over the first ``warmup_fraction`` of them and then decays linearly to 0.
    ``tokenizer`` is "word" (whole words) or "wordpiece" (a ``vocab_size`` sub-word vocabulary
    learned from MRPC train); ``whole_word_mask`` masks all pieces of a word together.
    ``strategy``, ``cpu_replicas`` and ``precision`` say where and how the step runs (see
    :mod:`nlp_tutorials.distribute`); ``batch_size`` is the global batch, split across replicas.
    ``steps`` of a run extended on resume is its new total; ``schedule_extensions`` says where
    it was extended.
    """

    model_type: str = "bert"
    model_dir: str = "visual/models/bert"
    steps: int = 1000
    batch_size: int = 16
    learning_rate: float = 5e-4
    warmup_fraction: float = 0.1
    weight_decay: float = 0.01
    dim: int = 256
    layers: int = 4
    heads: int = 4
    dropout: float = 0.1
    max_len: int = 0
    nsp_mode: str = "random"
    tokenizer: str = "word"
    vocab_size: int = 8000
    whole_word_mask: bool = False
    seed: int = 1
    log_every: int = 50
    sample_every: int = 250
    checkpoint_every: int = 250
    keep_checkpoints: int = 3
    jit: bool = False
    strategy: str = "default"
    cpu_replicas: int = 0  # 0: not given (mirrored uses the GPUs, or the CPU as one replica)
    precision: str = "float32"
    # No flag sets it: ``train --resume --steps N`` past the planned steps appends one
    # {"at_step", "from_steps", "to_steps", "rate_at_step"} record; the schedule of an extended
    # run is rebuilt from the first record's from_steps and every at_step and to_steps (see
    # nlp_tutorials.optimization.WarmupLinearDecay); rate_at_step is for the reader of the file.
    schedule_extensions: tuple = ()
    # Pre-train on your own text instead of MRPC (docs/corpus.md): a corpus read as a stream
    # (its tokenizer learned from its first ``tokenizer_sample_mb`` MB), or the TFRecord
    # shards ``prepare`` wrote. Empty: MRPC.
    corpus: str = ""
    data: str = ""
    tokenizer_sample_mb: int = 8
    # Continued pre-training (nlp_tutorials.continued): a pretrained BERT folder to start from,
    # and the first steps that train only the pre-training heads.
    init_from: str = ""
    head_warmup_steps: int = 0
    head_learning_rate: float = 1e-3

    # Fields that fix the model's shape or data: a resumed run must keep them. The strategy is
    # not one of them (a checkpoint resumes under any), but the precision is: float16's loss
    # scale is optimizer state the checkpoint holds.
    FROZEN = ("model_type", "dim", "layers", "heads", "max_len", "nsp_mode", "seed",
              "batch_size", "steps", "learning_rate", "warmup_fraction", "weight_decay",
              "tokenizer", "vocab_size", "whole_word_mask", "precision", "corpus", "data",
              "tokenizer_sample_mb", "init_from", "head_warmup_steps", "head_learning_rate")

    def model_config(self, vocab_size: int, max_len: int) -> ModelConfig:
        """The model this run trains, for a vocabulary of ``vocab_size`` and ``max_len`` tokens."""
        return ModelConfig(model_type=self.model_type, vocab_size=vocab_size,
                           hidden_size=self.dim, num_hidden_layers=self.layers,
                           num_attention_heads=self.heads, intermediate_size=4 * self.dim,
                           hidden_dropout_prob=self.dropout,
                           attention_probs_dropout_prob=self.dropout,
                           max_position_embeddings=max_len)

    def check(self) -> None:
        """Refuse settings that cannot work together, in the words of the command's flags."""
        _check_heads(self.dim, self.heads)
        _check_placement(self.strategy, self.cpu_replicas)
        _check_text_source(self)
        _check_init_from(self.init_from, self.head_warmup_steps)


def _check_text_source(config: TrainConfig) -> None:
    """--corpus and --data exclude each other, and their pairs are BERT's random ones."""
    if config.corpus and config.data:
        raise UserError("--corpus and --data exclude each other: --corpus reads text as it "
                        "trains, --data the shards `prepare` made from it; pass one")
    if (config.corpus or config.data) and config.nsp_mode != "random":
        raise UserError(f"--nsp-mode {config.nsp_mode}: a corpus has no paraphrase labels; "
                        f"with --corpus or --data only 'random' (IsNext/NotNext) applies")
    # Checked here, before TensorFlow loads, so a mistyped path answers at once.
    if config.corpus:
        from nlp_tutorials.sources.corpus import corpus_files

        corpus_files(config.corpus)
    if config.data:
        from nlp_tutorials.sources.shards import read_description

        read_description(config.data)


@dataclasses.dataclass
class FinetuneConfig:
    """One fine-tuning run on MRPC (defaults documented in the README).

    The backbone comes from ``init_from`` (a real pretrained BERT folder, HuggingFace or Google
    format) when set, else from the ``train`` checkpoint in ``model_dir``, else (``from_scratch``)
    it is freshly initialised. Pairs longer than ``max_len`` tokens (also capped by the model's
    ``max_position_embeddings``) are truncated longest-sentence-first. ``strategy``,
    ``cpu_replicas`` and ``precision`` are as in :class:`TrainConfig`. ``task`` names the task
    in ``nlp_tutorials.tasks.TASKS`` (saved with the model, so ``predict`` knows it).
    """

    task: str = "mrpc"
    model_dir: str = "visual/models/bert"
    output_dir: str = "visual/models/bert_mrpc"
    from_scratch: bool = False
    init_from: str = ""
    max_len: int = 128
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 1e-4
    seed: int = 1
    seeds: int = 1
    dev_size: int = 408
    swap_augment: bool = True
    pooling: str = "cls"
    strategy: str = "default"
    cpu_replicas: int = 0
    precision: str = "float32"

    def check(self) -> None:
        """Refuse settings that cannot work together (a missing --init-from folder included)."""
        if self.init_from and self.from_scratch:
            raise UserError("--init-from and --from-scratch exclude each other; pass one")
        if self.init_from and not Path(self.init_from).is_dir():
            raise UserError(f"--init-from {self.init_from}: no such folder; expected a "
                            f"pretrained BERT folder (config.json or bert_config.json, "
                            f"vocab.txt, weights)")
        _check_placement(self.strategy, self.cpu_replicas)


@dataclasses.dataclass
class DateTrainConfig:
    """One training run on the date task (defaults reach >= 99% held-out exact match).

    See :mod:`nlp_tutorials.dates` for the task and :mod:`nlp_tutorials.seq2seq` for the run.
    """

    model_dir: str = "visual/models/transformer"
    steps: int = 600
    batch_size: int = 64
    learning_rate: float = 2e-3
    dim: int = 64
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    seed: int = 1
    log_every: int = 100

    def model_config(self) -> ModelConfig:
        """The encoder-decoder Transformer this run trains (its vocabulary: the date task's)."""
        from nlp_tutorials.tasks import dates

        return ModelConfig(model_type="transformer", vocab_size=len(dates.VOCAB),
                           hidden_size=self.dim, num_hidden_layers=self.layers,
                           num_attention_heads=self.heads, intermediate_size=4 * self.dim,
                           hidden_act="relu", hidden_dropout_prob=self.dropout,
                           attention_probs_dropout_prob=self.dropout,
                           max_position_embeddings=dates.TARGET_LEN,
                           pad_token_id=dates.IDS[dates.PAD])

    def check(self) -> None:
        """Refuse settings that cannot work together, in the words of the command's flags."""
        _check_heads(self.dim, self.heads)


def config_from_args(config_class, args, **values) -> tuple:
    """A run's config from parsed command-line ``args``: (config, names of the fields given).

    Each field of ``config_class`` whose flag was given (an attribute of ``args`` that is not
    None: the parsers leave every flag's default None) takes the flag's value; ``values`` set
    fields that come from elsewhere (``model_type``, a default ``model_dir``); the rest keep
    the class defaults. The config's ``check()`` then refuses settings that cannot work
    together. ``given``, the fields set by flags, lets ``train --resume`` check them against
    the saved run.
    """
    given = {field.name for field in dataclasses.fields(config_class)
             if getattr(args, field.name, None) is not None}
    config = config_class(**{**values, **{name: getattr(args, name) for name in given}})
    config.check()
    return config, given


def _check_heads(dim: int, heads: int) -> None:
    if dim % heads:
        raise UserError(f"--dim {dim} is not divisible by --heads {heads}")


def _check_init_from(init_from: str, head_warmup_steps: int) -> None:
    if init_from and not Path(init_from).is_dir():
        raise UserError(f"--init-from {init_from}: no such folder; expected a pretrained BERT "
                        f"folder (config.json or bert_config.json, vocab.txt, weights)")
    if head_warmup_steps and not init_from:
        raise UserError(f"--head-warmup-steps {head_warmup_steps}: only with --init-from "
                        f"(a model from scratch has no trained encoder to protect)")


def _check_placement(strategy: str, cpu_replicas: int) -> None:
    from nlp_tutorials.training.distribute import check_flags

    check_flags(strategy, cpu_replicas)
