"""Every configuration: the model's, and the settings of each kind of run.

:class:`ModelConfig` (and :class:`BertConfig`) round-trip to JSON. Field names follow
HuggingFace's BERT ``config.json`` so a real checkpoint's config reads directly; Google's
original ``bert_config.json`` uses the same names minus a few optional ones.

One run of each command: :class:`TrainConfig` (``bert|gpt train``), :class:`FinetuneConfig`
(``bert finetune``) and :class:`DateTrainConfig` (``transformer train``). The command line
builds each with :func:`config_from_args`. This module imports no TensorFlow.
"""
import dataclasses
import json
from pathlib import Path

from nlp_tutorials.errors import UserError
from nlp_tutorials.files import read_json_object, write_text_atomic

CONFIG_NAME = "config.json"
GOOGLE_CONFIG_NAME = "bert_config.json"


@dataclasses.dataclass
class ModelConfig:
    """Sizes and hyper-parameters of a Transformer, GPT or BERT model.

    Attributes:
        model_type: "transformer", "gpt" or "bert".
        vocab_size: number of token ids (source side for the seq2seq Transformer).
        hidden_size: model width, the size of every token vector.
        num_hidden_layers: layers in each stack.
        num_attention_heads: heads per attention layer; must divide ``hidden_size``.
        intermediate_size: inner width of the position-wise feed-forward network.
        hidden_act: "gelu" (exact, erf-based, as BERT) or "relu".
        hidden_dropout_prob: dropout on embeddings and every sub-layer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: longest sequence the learned positions cover, in tokens.
        type_vocab_size: number of segment ids (2: first and second sentence).
        initializer_range: std of the truncated-normal weight initialiser.
        layer_norm_eps: LayerNorm epsilon (1e-12 as BERT).
        pad_token_id: id of ``[PAD]``; keys with this id are masked out of attention.
        target_vocab_size: the seq2seq Transformer's target vocabulary (0: same as source).
        chunk_size_feed_forward: positions the feed-forward computes at a time (0: all at
            once); smaller chunks hold a smaller [batch, chunk, intermediate] activation.
        pruned_heads: ``{layer: [head, ...]}``, the attention heads removed from each layer
            (numbered as in the unpruned model); see ``GPT.prune_heads``.
    """

    model_type: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    target_vocab_size: int = 0
    chunk_size_feed_forward: int = 0
    pruned_heads: dict = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        self.pruned_heads = _pruned_heads(self.pruned_heads, self.num_hidden_layers,
                                          self.num_attention_heads)
        self.validate()

    def validate(self) -> None:
        """Raise :class:`UserError` naming the first field that makes no sense."""
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                     "intermediate_size", "max_position_embeddings", "type_vocab_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise UserError(f"config {name}={value!r}: expected a positive integer")
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"config hidden_size={self.hidden_size} is not divisible by "
                f"num_attention_heads={self.num_attention_heads}")
        if self.hidden_act not in ("gelu", "relu"):
            raise UserError(f"config hidden_act={self.hidden_act!r}: expected 'gelu' or 'relu'")
        if self.model_type not in ("transformer", "gpt", "bert"):
            raise UserError(
                f"config model_type={self.model_type!r}: expected transformer, gpt or bert")
        if not isinstance(self.chunk_size_feed_forward, int) or self.chunk_size_feed_forward < 0:
            raise UserError(f"config chunk_size_feed_forward={self.chunk_size_feed_forward!r}: "
                            f"expected 0 (off) or a positive integer")
        if self.pruned_heads and self.model_type == "transformer":
            raise UserError("config pruned_heads: only GPT and BERT can prune heads")

    @property
    def head_size(self) -> int:
        """Width of one attention head: hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    def kept_heads(self, layer: int) -> list[int]:
        """The heads layer ``layer`` still has after pruning, numbered as unpruned."""
        pruned = self.pruned_heads.get(layer, [])
        return [head for head in range(self.num_attention_heads) if head not in pruned]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> "ModelConfig":
        """Build from a dict, ignoring keys this project does not use (HF adds many)."""
        known = {f.name for f in dataclasses.fields(cls)}
        _check_supported(values, source)
        kept = {k: v for k, v in values.items() if k in known}
        try:
            return cls(**kept)
        except UserError as err:
            raise UserError(f"{source}: {err}") from None

    def save(self, directory) -> Path:
        """Write ``config.json`` into ``directory`` atomically; return its path."""
        path = Path(directory) / CONFIG_NAME
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory) -> "ModelConfig":
        """Read ``config.json`` (HuggingFace) or ``bert_config.json`` (Google) from a folder."""
        directory = Path(directory)
        for name in (CONFIG_NAME, GOOGLE_CONFIG_NAME):
            path = directory / name
            if path.is_file():
                return cls.from_json_file(path)
        raise UserError(f"{directory}: no {CONFIG_NAME} or {GOOGLE_CONFIG_NAME} found")

    @classmethod
    def from_json_file(cls, path) -> "ModelConfig":
        """Read one config file; without ``model_type`` (Google's has none) it is a BERT."""
        values = read_json_object(path)
        values.setdefault("model_type", "bert")
        return cls.from_dict(values, source=str(path))


def _pruned_heads(value, layers: int, heads: int) -> dict:
    """``{layer: sorted heads}`` from a dict whose keys may be strings (as JSON writes them).

    Refuses a layer or head that does not exist, and pruning every head of a layer (the layer's
    attention would have no output: remove the layer instead).
    """
    if not isinstance(value, dict):
        raise UserError(f"config pruned_heads={value!r}: expected {{layer: [head, ...]}}")
    pruned = {}
    for key, chosen in value.items():
        try:
            layer, chosen = int(key), sorted({int(head) for head in chosen})
        except (TypeError, ValueError):
            raise UserError(f"config pruned_heads {key!r}: {chosen!r}: expected a layer number "
                            f"and a list of head numbers") from None
        if not 0 <= layer < layers:
            raise UserError(f"config pruned_heads: layer {layer} does not exist; expected 0 to "
                            f"{layers - 1}")
        if any(not 0 <= head < heads for head in chosen):
            raise UserError(f"config pruned_heads: layer {layer} heads {chosen}: expected head "
                            f"numbers 0 to {heads - 1}")
        if len(chosen) == heads:
            raise UserError(f"config pruned_heads: layer {layer} would lose all {heads} heads; "
                            f"keep at least one")
        if chosen:
            pruned[layer] = chosen
    return dict(sorted(pruned.items()))


# Values real checkpoints may hold that this project's layers do not implement, with the ones
# they do: refusing them beats loading weights into a model that computes something else.
SUPPORTED_VALUES = {"hidden_act": ("gelu", "relu"), "position_embedding_type": ("absolute",)}


def _check_supported(values: dict, source: str) -> None:
    for key, supported in SUPPORTED_VALUES.items():
        if key in values and values[key] not in supported:
            raise UserError(f"{source}: {key} {values[key]!r} is not supported; expected "
                            f"{' or '.join(repr(v) for v in supported)}")


# HuggingFace's BertConfig fields this project reads and writes (Google's bert_config.json has
# the same names, without layer_norm_eps and pad_token_id).
HF_BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_act", "hidden_dropout_prob",
                  "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                  "initializer_range", "layer_norm_eps", "pad_token_id",
                  "chunk_size_feed_forward", "pruned_heads")


@dataclasses.dataclass
class BertConfig(ModelConfig):
    """A BERT's :class:`ModelConfig` as HuggingFace's ``config.json`` spells it.

    Reads HuggingFace's ``config.json`` or Google's ``bert_config.json``
    (:meth:`from_json_file`, or :meth:`load` on a folder) and writes HuggingFace's
    (:meth:`to_json_file`), with ``"architectures": ["BertForPreTraining"]`` so transformers
    knows which class the weights fit.
    """

    def validate(self) -> None:
        super().validate()
        if self.model_type != "bert":
            raise UserError(f"config model_type={self.model_type!r}: expected 'bert'")

    def to_hf_dict(self) -> dict:
        return {"architectures": ["BertForPreTraining"], "model_type": "bert",
                **{name: getattr(self, name) for name in HF_BERT_FIELDS}}

    def to_json_file(self, path) -> Path:
        """Write HuggingFace's ``config.json`` fields to ``path`` atomically; return it."""
        write_text_atomic(path, json.dumps(self.to_hf_dict(), indent=2, sort_keys=True) + "\n")
        return Path(path)


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
        from nlp_tutorials.corpus import corpus_files

        corpus_files(config.corpus)
    if config.data:
        from nlp_tutorials.shards import read_description

        read_description(config.data)


@dataclasses.dataclass
class FinetuneConfig:
    """One fine-tuning run on MRPC (defaults documented in the README).

    The backbone comes from ``init_from`` (a real pretrained BERT folder, HuggingFace or Google
    format) when set, else from the ``train`` checkpoint in ``model_dir``, else (``from_scratch``)
    it is freshly initialised. Pairs longer than ``max_len`` tokens (also capped by the model's
    ``max_position_embeddings``) are truncated longest-sentence-first. ``strategy``,
    ``cpu_replicas`` and ``precision`` are as in :class:`TrainConfig`.
    """

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
        from nlp_tutorials import dates

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
    from nlp_tutorials.distribute import check_flags

    check_flags(strategy, cpu_replicas)
