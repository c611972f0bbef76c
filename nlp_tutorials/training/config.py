"""The settings of each kind of run, each declared once: :class:`TrainConfig` (``bert|gpt
train``), :class:`FinetuneConfig` (``bert finetune``), :class:`DateTrainConfig` (``transformer
train``). A field declared with :func:`~nlp_tutorials.system.settings.setting` is also a flag
whose default, help and kind of value are written once, here (the machinery:
:mod:`nlp_tutorials.system.settings`). Rules between fields live in each class's ``check()``,
run whenever a config is made, from flags or in Python. No TensorFlow (nor argparse) here.
"""
import dataclasses
from pathlib import Path

from nlp_tutorials.models.config import POOLINGS, ModelConfig
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import require_folder
from nlp_tutorials.system.settings import (Settings, checked, default_of, non_negative_float,
                                           non_negative_int, positive_float, positive_int,
                                           probability, setting)
from nlp_tutorials.system.values import check_integer, refuse
from nlp_tutorials.tasks import TASKS, dates, get_task, named_tasks, task_flag_help
from nlp_tutorials.tasks.base import DEFAULT_STRIDE, DEV_SIZE_HELP
from nlp_tutorials.tasks.squad_files import squad_version
from nlp_tutorials.text.nsp import NSP_MODES
from nlp_tutorials.training.distribute import (
    check_flags,
    cpu_replicas_setting,
    deterministic_setting,
    parse_tf_config,
    precision_setting,
    strategy_setting,
)
from nlp_tutorials.training.search import check_search_flags, search_settings

MODELS_DIR = "visual/models"  # where each command puts and looks for models by default
TOKENIZERS = ("word", "wordpiece")  # the kinds of tokenizer a run or `prepare` learns


def trained_dir(model_name: str) -> str:
    """Where ``train`` puts a model family's model, and where the other commands look."""
    return f"{MODELS_DIR}/{model_name}"


EXTENSION_RECORD = '{"at_step": step, "from_steps": steps, "to_steps": steps}'


def check_schedule_records(records, path) -> None:
    """``schedule_extensions`` as ``train --resume --steps`` writes it: a list of records, each
    the step the run was extended at and its steps before and after. Whether they make one
    schedule ending at ``steps`` is checked when it is built (training.pretraining)."""
    if not isinstance(records, list):
        raise refuse(path, "schedule_extensions", records, f"a list of {EXTENSION_RECORD}")
    for index, record in enumerate(records):
        field = f"schedule_extensions[{index}]"
        if not isinstance(record, dict) or not {"at_step", "from_steps", "to_steps"} <= set(
                record):
            raise refuse(path, field, record, EXTENSION_RECORD)
        check_integer(record["at_step"], f"{field}.at_step", path, minimum=0)
        for name in ("from_steps", "to_steps"):
            check_integer(record[name], f"{field}.{name}", path, minimum=1)


# BERT's optimizer settings, which pre-training and fine-tuning share (no flags).
WARMUP_FRACTION = 0.1  # of the steps, the rate rising linearly to its peak
WEIGHT_DECAY = 0.01
# A pruned model fine-tuned again (`heads --prune --recover-epochs`): the lowest rate of BERT's
# grid and its smaller batch, so the remaining heads adjust without forgetting the task.
RECOVERY_LEARNING_RATE = 2e-5
RECOVERY_BATCH_SIZE = 16


@dataclasses.dataclass
class TrainConfig(Settings):
    """One pre-training run. Sizes default to the tutorial's (256 / 4 layers / 4 heads).

    ``steps`` counts optimisation steps of ``batch_size`` sequences; the learning rate warms
    up linearly over the first ``warmup_fraction`` of them and then decays linearly to 0.
    ``tokenizer`` is "word" (whole words) or "wordpiece" (a ``vocab_size`` sub-word vocabulary
    learned from MRPC train); ``whole_word_mask`` masks all pieces of a word together.
    ``strategy``, ``cpu_replicas``, ``precision`` and ``deterministic`` say where and how the
    step runs (:mod:`nlp_tutorials.training.distribute`); ``batch_size`` is the global batch,
    split across replicas. ``steps`` of a run extended on resume is its new total;
    ``schedule_extensions`` says where it was extended. Fields without a flag are set in Python
    (``model_type`` by the command)."""

    model_type: str = checked("bert", choices=("bert", "gpt"))
    model_dir: str = setting(trained_dir("bert"), "where checkpoints, vocab and config go")
    steps: int = setting(1000, "optimisation steps", kind=positive_int)
    batch_size: int = setting(16, "sequences per step", kind=positive_int)
    learning_rate: float = setting(5e-4, "peak AdamW learning rate, reached after 10% warm-up, "
                                         "then decayed linearly to 0", kind=positive_float)
    warmup_fraction: float = checked(WARMUP_FRACTION, kind=probability)
    weight_decay: float = checked(WEIGHT_DECAY, kind=non_negative_float)
    dim: int = setting(256, "model width", kind=positive_int)
    layers: int = setting(4, "Transformer layers", kind=positive_int)
    heads: int = setting(4, "attention heads; must divide --dim", kind=positive_int)
    dropout: float = setting(0.1, "dropout rate", kind=probability)
    # 0: the longest MRPC train pair (128 for a corpus; the shards' own with --data).
    max_len: int = setting(0, "tokens per sequence", kind=positive_int,
                           default_help="the longest MRPC train pair; 128 with --corpus; the "
                                        "shards' with --data")
    nsp_mode: str = setting(NSP_MODES[0], "next-sentence task: 'random' (BERT's IsNext/NotNext) or "
                                      "'paraphrase' (the MRPC label)",
                            choices=NSP_MODES)
    tokenizer: str = setting("word", "'word' (whole words) or 'wordpiece' (BERT's sub-words, a "
                                     "vocabulary learned from the text)", choices=TOKENIZERS)
    vocab_size: int = setting(8000, "WordPiece vocabulary size, special tokens and characters "
                                    "included", kind=positive_int)
    whole_word_mask: bool = setting(False, "mask all pieces of a chosen word together (BERT's "
                                           "whole-word masking)", models=("bert",))
    seed: int = setting(1, "random seed", kind=non_negative_int)
    log_every: int = checked(50, kind=positive_int)
    sample_every: int = setting(250, "steps between printed examples: BERT's masked-word "
                                     "guesses, GPT's continuations", kind=positive_int)
    checkpoint_every: int = setting(250, "steps between checkpoints", kind=positive_int)
    keep_checkpoints: int = checked(3, kind=positive_int)
    jit: bool = setting(False, "XLA-compile the training step")
    strategy: str = strategy_setting()
    cpu_replicas: int = cpu_replicas_setting()
    precision: str = precision_setting()
    deterministic: bool = deterministic_setting()
    # No flag: ``train --resume --steps N`` past the planned steps appends a record {"at_step",
    # "from_steps", "to_steps", "rate_at_step"}; optimization.WarmupLinearDecay rebuilds the
    # schedule from the first from_steps and every at_step and to_steps (rate_at_step: for readers).
    schedule_extensions: tuple = checked((), check=check_schedule_records)
    # Pre-train on your own text instead of MRPC (docs/corpus.md): a corpus read as a stream
    # (its tokenizer learned from its first ``tokenizer_sample_mb`` MB), or the TFRecord
    # shards ``prepare`` wrote. Empty: MRPC.
    corpus: str = setting("", "pre-train on this text instead of MRPC: one sentence a line, a "
                              "blank line between documents (google-research/bert's format), "
                              "read as a stream; a file of that name is read as it is, else "
                              "the name is a glob (quote it), e.g. 'books/*.txt'",
                          metavar="PATH_OR_GLOB", exclusive="text")
    data: str = setting("", "pre-train on the TFRecord shards `prepare` wrote into DIR "
                            "(tokenizer and max_len come from there)",
                        metavar="DIR", exclusive="text")
    tokenizer_sample_mb: int = setting(8, "with --corpus: learn the vocabulary from the "
                                          "corpus' first this many MB", kind=positive_int)
    # Continued pre-training (nlp_tutorials.training.continued): a pretrained BERT folder to start from,
    # and the first steps that train only the pre-training heads.
    init_from: str = setting("", "continue pre-training a real BERT: a folder with "
                                 "config.json, vocab.txt and model.safetensors (HuggingFace) "
                                 "or bert_config.json, vocab.txt and bert_model.ckpt.* "
                                 "(Google); the model's size and vocabulary come from it, and "
                                 "the result is also written to <model-dir>/pretrained/ for "
                                 "finetune --init-from",
                             metavar="DIR", models=("bert",))
    head_warmup_steps: int = setting(0, "with --init-from: the first N steps train only the "
                                        "masked-LM and next-sentence heads, the encoder "
                                        "frozen; BERT's schedule then starts over for the rest",
                                     kind=non_negative_int, metavar="N", models=("bert",),
                                     default_help="10% of --steps when the checkpoint has no "
                                                  "pre-training heads, else 0")
    head_learning_rate: float = setting(1e-3, "constant AdamW rate of the heads-only steps",
                                        kind=positive_float, models=("bert",))

    # Fields that fix the model's shape or data: a resumed run must keep them. The strategy is
    # not one of them (a checkpoint resumes under any), but the precision is: float16's loss
    # scale is optimizer state the checkpoint holds. "auto" is resolved before it is compared
    # or saved (training.pretraining.settled_run): a run records what it computed in.
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

    def check(self, given: frozenset = frozenset()) -> None:
        """Refuse settings that cannot work together, in the words of the command's flags.

        Rules that need the checkpoint or a file are checked where those are read:
        ``--vocab-size`` only with wordpiece, the tokenizer flags and ``--max-len`` against
        ``--data``'s shards (training.pretraining); the model flags, ``--max-len`` and the
        settled ``--head-warmup-steps`` against ``--init-from``'s checkpoint
        (training.continued); no ``--steps`` extension of a run with a heads-only warm-up
        (training.pretraining.extend_run)."""
        _check_heads(self.dim, self.heads)
        check_flags(self.strategy, self.cpu_replicas)
        if self.corpus and self.data:
            raise UserError("--corpus and --data exclude each other: --corpus reads text as it "
                            "trains, --data the shards `prepare` made from it; pass one")
        if (self.corpus or self.data) and self.nsp_mode != "random":
            raise UserError(f"--nsp-mode {self.nsp_mode}: a corpus has no paraphrase labels; "
                            f"with --corpus or --data only 'random' (IsNext/NotNext) applies")
        self._check_continued(given)

    def _check_continued(self, given: frozenset) -> None:
        """The continued pre-training flags need --init-from, and --init-from needs BERT."""
        if self.init_from and self.model_type != "bert":
            raise UserError(f"--init-from {self.init_from}: only BERT starts from a pretrained "
                            f"checkpoint")
        if self.init_from:
            return
        if self.head_warmup_steps:
            raise UserError(f"--head-warmup-steps {self.head_warmup_steps}: only with "
                            f"--init-from (a model from scratch has no trained encoder to "
                            f"protect)")
        if "head_learning_rate" in given or self.head_learning_rate != default_of(
                self, "head_learning_rate"):
            raise UserError(f"--head-learning-rate {self.head_learning_rate}: only with "
                            f"--init-from (it is the rate of the heads-only warm-up steps)")

    def check_inputs(self) -> None:
        """The corpus, the shards' folder, the pretrained folder and TF_CONFIG are usable."""
        if self.corpus:
            from nlp_tutorials.sources.corpus import corpus_files

            corpus_files(self.corpus)
        if self.data:
            from nlp_tutorials.sources.shards import read_description

            read_description(self.data)
        _check_pretrained_folder(self.init_from)
        _check_cluster(self.strategy)


OWN_DATA_TASK = "custom"  # --train FILE --text-columns ...: a user's own table
FILE_FORMATS = ("csv", "tsv", "jsonl", "conll", "squad")


def finetuned_dir(task: str) -> str:
    """Where ``finetune`` puts a model of ``task`` by default."""
    return trained_dir(f"bert_{task}")


FINETUNED_DIR = finetuned_dir("mrpc")  # the default --model-dir of the commands that read one
RANDOM_ORDERS = 3  # `bert heads --study`'s control: random orders of masking, averaged
SEARCH_SETTINGS = search_settings()
RECIPE_SETTINGS = ("epochs", "batch_size", "learning_rate")  # left None: the task's recipe


@dataclasses.dataclass
class FinetuneConfig(Settings):
    """One fine-tuning run of a task (MRPC by default; defaults in docs/tasks.md).

    The task is ``task`` (one of :func:`~nlp_tutorials.tasks.named_tasks`), its files found in
    ``data`` under their usual names or given outright (``train``, ``dev``, ``test``); or a
    user's own table (``text_columns``, ``label_column``, ``regression``), tagging or SQuAD
    files (``file_format`` "conll" or "squad"). ``epochs``, ``batch_size``, ``learning_rate``
    and ``max_len`` left None take the task's recipe (``Task.recipe``, ``default_max_len``).

    The backbone comes from ``init_from`` (a real pretrained BERT folder, HuggingFace or Google
    format) when set, else from the ``train`` checkpoint in ``model_dir``, else (``from_scratch``)
    it is freshly initialised. Inputs longer than ``max_len`` tokens (also capped by the
    model's ``max_position_embeddings``) are truncated longest-sentence-first, or cut into
    windows ``stride`` tokens apart (tagging, answer spans). ``strategy``, ``cpu_replicas``,
    ``precision`` and ``deterministic`` are as in :class:`TrainConfig`."""

    task: str = setting("mrpc", task_flag_help, choices=named_tasks, metavar="TASK")
    data: str = setting("", "folder holding the task's files under their usual names "
                            "(docs/tasks.md)", metavar="DIR",
                        default_help="MRPC's shipped copy for mrpc; needed for the others")
    train: str = setting("", "the train file, instead of the one in --data", metavar="FILE")
    dev: str = setting("", "the dev file (picks the best epoch), instead of the one in --data",
                       metavar="FILE")
    test: str = setting("", "a labelled test file, scored once with the kept model",
                        metavar="FILE")
    text_columns: str = setting("", "your own data: the column(s) holding the text, one name "
                                    "or two for a pair (A or A,B)", metavar="A[,B]")
    label_column: str = setting("", "your own data: the column holding the label (or score)",
                                metavar="Y")
    regression: bool = setting(False, "your own data: the label is a number to predict "
                                      "(squared error), not a class")
    file_format: str = setting("", "your own files' format: csv, tsv, jsonl (with a header; "
                                   "default: from the file's suffix), conll (tagging) or "
                                   "squad (question answering)", choices=FILE_FORMATS,
                               spelling="--format")
    model_dir: str = setting(trained_dir("bert"), "pre-trained model from `train`")
    from_scratch: bool = setting(False, "start from random weights instead")
    init_from: str = setting("", "start from a real pretrained BERT instead (a HuggingFace or "
                                 "Google folder, with vocab.txt), or from a model finetune "
                                 "wrote (its head too where alike)", metavar="DIR")
    max_len: int | None = setting(None, "tokens per example, at most the model's positions; "
                                        "a longer input is truncated (a pair's longer sentence "
                                        "first) or, tagging and SQuAD, cut into windows",
                                  kind=positive_int, default_help="the task's: 128, 384 for SQuAD")
    stride: int = setting(DEFAULT_STRIDE, "tagging and SQuAD: tokens between the starts of two windows "
                               "of one long input", kind=positive_int)
    output_dir: str = setting("", "where the fine-tuned model goes",
                              default_help=f"{finetuned_dir('TASK')}")
    epochs: int | None = setting(None, "passes over the train examples", kind=positive_int,
                                 default_help="the task's recipe, 3 for most")
    batch_size: int | None = setting(None, "examples per step", kind=positive_int,
                                     default_help="the task's recipe, 32 for most")
    learning_rate: float | None = setting(None, "peak AdamW rate, 10% warm-up then linear "
                                                "decay", kind=positive_float,
                                          default_help="the task's recipe: 1e-4 for MRPC, "
                                                       "5e-5 for most")
    seed: int = setting(1, "first seed", kind=non_negative_int)
    seeds: int = setting(1, "number of seeds to run; the result is reported as mean ± std",
                         kind=positive_int)
    dev_size: int | None = setting(None, "with no dev file: last train examples held out to "
                                         "pick the best epoch; 0 trains on every example and "
                                         "keeps the last epoch", kind=non_negative_int,
                                   default_help=DEV_SIZE_HELP)
    swap_augment: bool = setting(True, "MRPC: do not add each train pair in the other sentence "
                                       "order", spelling="--no-swap")
    pooling: str = setting(POOLINGS[0], "what a sentence classifier reads: 'cls' (BERT's pooled "
                                  "[CLS] vector) or 'mean' (the average of the final token "
                                  "vectors, as sentence-embedding models such as "
                                  "all-MiniLM-L6-v2 were trained)", choices=POOLINGS)
    # No flags: BERT's, set by a recipe search (--search-space) or from Python.
    warmup_fraction: float = checked(WARMUP_FRACTION, kind=probability)
    weight_decay: float = checked(WEIGHT_DECAY, kind=non_negative_float)
    # The recipe search's (training/search.py).
    search: int = SEARCH_SETTINGS["search"]
    search_space: str = SEARCH_SETTINGS["search_space"]
    search_held_out: float = SEARCH_SETTINGS["search_held_out"]
    search_stop_from: int = SEARCH_SETTINGS["search_stop_from"]
    strategy: str = strategy_setting()
    cpu_replicas: int = cpu_replicas_setting()
    precision: str = precision_setting()
    deterministic: bool = deterministic_setting()
    # No flag: the RECIPE_SETTINGS given (flags or Python), not the recipe's; a search fixes them.
    recipe_given: tuple = None

    def __post_init__(self):
        """Fill what was left to the task: its name for own data, its recipe, its folder."""
        if self.text_columns or self.file_format in ("csv", "tsv", "jsonl"):
            self.task = OWN_DATA_TASK
        elif self.file_format == "conll":
            self.task = "conll2003"
        task_class = TASKS.get(self.task)
        recipe = task_class.recipe if task_class else {}
        if self.recipe_given is None:  # first made, not a copy
            self.recipe_given = tuple(n for n in RECIPE_SETTINGS if getattr(self, n) is not None)
        for name in RECIPE_SETTINGS:
            if getattr(self, name) is None:
                setattr(self, name, recipe.get(name))
        if not self.output_dir:
            self.output_dir = finetuned_dir(self.task)
        super().__post_init__()

    def check(self, given: frozenset = frozenset()) -> None:
        """Refuse settings that cannot work together, in the words of the command's flags."""
        if self.init_from and self.from_scratch:
            raise UserError("--init-from and --from-scratch exclude each other; pass one")
        own = self.task == OWN_DATA_TASK
        if "task" in given and (self.text_columns or self.file_format):
            raise UserError("--task reads a task's own files; --text-columns and --format are "
                            "for your own data: pass one or the other")
        if own and not (self.text_columns and self.label_column):
            raise UserError("your own data needs --text-columns A[,B] and --label-column Y")
        if (self.label_column or self.regression) and not self.text_columns:
            raise UserError("--label-column and --regression describe your own table; "
                            "expected --text-columns as well")
        if (own or self.file_format) and not self.train:
            raise UserError("your own data needs --train FILE (and --dev FILE to pick the "
                            "best epoch)")
        if self.task != "mrpc" and not (self.data or self.train):
            raise UserError(f"--task {self.task} needs its files: --data DIR (docs/tasks.md "
                            f"lists the names) or --train FILE --dev FILE")
        if self.text_columns and not 1 <= len(self.text_columns.split(",")) <= 2:
            raise UserError(f"--text-columns {self.text_columns}: expected one column name, "
                            f"or two separated by a comma")
        check_search_flags(self)
        check_flags(self.strategy, self.cpu_replicas)

    def make_task(self, printer=print):
        """The task these settings name, reading from ``data`` or the files given outright;
        for a user's own files, the task their flags describe (docs/tasks.md, "Your own
        data"). Nothing is read yet."""
        name, options = self.task, {}
        if self.file_format == "squad":
            name = squad_version(self.train)
        if self.file_format == "conll":
            options = {"columns": None}  # any number of columns: the word first, its tag last
        if name == OWN_DATA_TASK:
            options = {"text_columns": self.text_columns.split(","),
                       "label_column": self.label_column, "regression": self.regression,
                       "file_format": self.file_format or None}
        return get_task(name, data_dir=self.data or None, dev_size=self.dev_size,
                        paths={"train": self.train, "dev": self.dev, "test": self.test},
                        max_len=self.max_len, stride=self.stride, printer=printer, **options)

    def check_inputs(self) -> None:
        """The data folder, the files given, the pretrained folder and TF_CONFIG are usable."""
        require_folder(self.data, "--data", f"the {TASKS[self.task].title} files")
        for flag in ("train", "dev", "test"):
            path = getattr(self, flag)
            if path and not Path(path).is_file():
                raise UserError(f"--{flag} {path}: no such file")
        if self.search:
            from nlp_tutorials.training.search import import_optuna, search_space

            import_optuna()
            search_space(self)
        require_folder(self.init_from, "--init-from", "a pretrained BERT (config.json or "
                       "bert_config.json, vocab.txt, weights) or a fine-tuned model (model.keras)")
        _check_cluster(self.strategy)


@dataclasses.dataclass
class DateTrainConfig(Settings):
    """One training run on the date task (:mod:`nlp_tutorials.tasks.dates`), run by
    :mod:`nlp_tutorials.training.seq2seq`; the defaults reach >= 99% held-out exact match."""

    model_dir: str = setting(trained_dir("transformer"), "where config.json and the weights go")
    steps: int = setting(600, "optimisation steps", kind=positive_int)
    batch_size: int = setting(64, "dates per step", kind=positive_int)
    learning_rate: float = setting(2e-3, "peak AdamW rate, 10% warm-up then linear decay",
                                   kind=positive_float)
    dim: int = setting(64, "model width", kind=positive_int)
    layers: int = setting(2, "layers in each stack", kind=positive_int)
    heads: int = setting(4, "attention heads; must divide --dim", kind=positive_int)
    dropout: float = setting(0.0, "dropout rate", kind=probability)
    seed: int = setting(1, "weights and batch order (the held-out dates are fixed)",
                        kind=non_negative_int)
    log_every: int = 100

    def model_config(self) -> ModelConfig:
        """The encoder-decoder Transformer this run trains (its vocabulary: the date task's)."""
        return ModelConfig(model_type="transformer", vocab_size=len(dates.VOCAB),
                           hidden_size=self.dim, num_hidden_layers=self.layers,
                           num_attention_heads=self.heads, intermediate_size=4 * self.dim,
                           hidden_act="relu", hidden_dropout_prob=self.dropout,
                           attention_probs_dropout_prob=self.dropout,
                           max_position_embeddings=dates.TARGET_LEN,
                           pad_token_id=dates.IDS[dates.PAD])

    def check(self, given: frozenset = frozenset()) -> None:
        """Refuse settings that cannot work together, in the words of the command's flags."""
        _check_heads(self.dim, self.heads)


def _check_heads(dim: int, heads: int) -> None:
    if dim % heads:
        raise UserError(f"--dim {dim} is not divisible by --heads {heads}")


def _check_cluster(strategy: str) -> None:
    """--strategy multiworker needs a usable TF_CONFIG (read before TensorFlow starts)."""
    if strategy == "multiworker":
        parse_tf_config()


def _check_pretrained_folder(init_from: str) -> None:
    if init_from and not Path(init_from).is_dir():
        raise UserError(f"--init-from {init_from}: no such folder; expected a pretrained BERT "
                        f"folder (config.json or bert_config.json, vocab.txt, weights)")
