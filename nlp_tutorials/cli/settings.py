"""The settings of the commands that are not a training run, one dataclass each.

Declared as :mod:`nlp_tutorials.training.config` declares a run's: each field made with
:func:`~nlp_tutorials.system.settings.setting` is a flag whose default and help are written
once, here; ``check()`` holds the rules between fields. Defaults that depend on the model
family (``model_dir``, the pickle's name) are set per family by :mod:`nlp_tutorials.cli.commands`.
"""
import dataclasses
from pathlib import Path

from nlp_tutorials.sources.corpus import DEFAULT_MAX_LEN as CORPUS_MAX_LEN
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import require_folder
from nlp_tutorials.system.model_files import (
    INT8_MAX_DROP,
    SERVED_PRECISIONS,
    SERVED_QUANTIZATIONS,
    SERVED_VERSION,
)
from nlp_tutorials.system.settings import (
    Settings,
    default_of,
    flag_of,
    half_open_share,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
    setting,
)
from nlp_tutorials.tasks import named_tasks, task_flag_help
from nlp_tutorials.tasks.base import DEV_SIZE_HELP
from nlp_tutorials.training.config import (
    FINETUNED_DIR,
    RANDOM_ORDERS,
    RECOVERY_BATCH_SIZE,
    RECOVERY_LEARNING_RATE,
    TOKENIZERS,
    FinetuneConfig,
    TrainConfig,
    trained_dir,
)

EXPORT_EXAMPLES = 32  # examples exported after training, and by `export`
RESULTS_DIR = "visual/results"  # where pictures and pages go by default


def default_pickle(model_name: str) -> str:
    return f"visual/tmp/{model_name}_attention_matrix.pkl"


def explorer_page(model_name: str) -> str:
    return f"{RESULTS_DIR}/{model_name}_explorer.html"


@dataclasses.dataclass(kw_only=True)
class AfterTraining(Settings):
    """``transformer train``'s flag besides its run's config."""

    no_plots: bool = setting(False, "skip the attention export and pictures at the end")


@dataclasses.dataclass(kw_only=True)
class PretrainOptions(AfterTraining):
    """``train``'s flags besides its run's config: what to do after (as ``transformer
    train``), and resume."""

    resume: bool = setting(False, "continue from the newest intact checkpoint in --model-dir; "
                                  "a larger --steps than the saved run's trains on to that step")


@dataclasses.dataclass(kw_only=True)
class ExportSettings(Settings):
    """``export``: the attention of a trained model on some examples, pickled."""

    model_type: str = "bert"
    model_dir: str = setting(trained_dir("bert"), "trained model")
    n: int = setting(EXPORT_EXAMPLES, "{examples} to run", kind=positive_int)
    output: str = setting(default_pickle("bert"), "pickle to write")


@dataclasses.dataclass(kw_only=True)
class PlotSettings(Settings):
    """``plot``: heatmaps and a line view from an exported pickle."""

    model_type: str = "bert"
    input: str = setting(default_pickle("bert"), "pickle written by export")
    output_dir: str = setting(RESULTS_DIR, "where PNGs go")
    case: int = setting(0, "which example to draw", kind=non_negative_int)
    layer: int | None = setting(None, "layer of the line view", kind=non_negative_int,
                         default_help="the last")
    head: int | None = setting(None, "head of the line view", kind=non_negative_int, default_help="0")


@dataclasses.dataclass(kw_only=True)
class ExploreSettings(Settings):
    """``explore``: one self-contained HTML page of the attention (nlp_tutorials.analysis.explorer)."""

    model_type: str = "bert"
    model_dir: str = setting("", "model to run: {explored_models}", default_help="{model_dir}")
    input: str = setting("", "an attention pickle written by export, instead of running a "
                             "model", metavar="PICKLE")
    n: int | None = setting(None, "{shown_examples} to include", kind=positive_int,
                     default_help="8 when running a model, every one in --input")
    output: str = setting(explorer_page("bert"), "page to write")
    example: int = setting(0, "example shown first", kind=non_negative_int)
    layer: int = setting(0, "layer shown first", kind=non_negative_int)
    head: int = setting(0, "head shown first", kind=non_negative_int)
    view: str = setting("head", "view shown first", choices=("head", "model", "neuron"))
    data: str | None = setting(None, "with a fine-tuned --model-dir: the folder holding its "
                                     "task's files, whose examples are shown", metavar="DIR",
                               default_help="MRPC's shipped copy for an MRPC model",
                               models=("bert",))
    importance: str | None = setting(None, "head_importance.json (from `bert heads`) to show in the "
                                    "model view", metavar="JSON",
                              default_help="the one beside the model or pickle, if there is one",
                              models=("bert",))

    def check(self, given: frozenset = frozenset()) -> None:
        """One source of attention: a pickle or a model, not both."""
        if self.input and self.model_dir:
            raise UserError(f"--input {self.input} and --model-dir {self.model_dir}: expected "
                            f"one source of attention, not both")


@dataclasses.dataclass(kw_only=True)
class PrepareSettings(Settings):
    """``prepare``: a corpus tokenized once into TFRecord shards for ``train --data``."""

    corpus: str = setting(help="one sentence a line, a blank line between documents; a file "
                               "of that name is read as it is, else the name is a glob (quote "
                               "it)", metavar="PATH_OR_GLOB")
    output: str = setting(help="new folder for the shards", metavar="DIR")
    shards: int = setting(1, "number of shard files; at least the number of workers that will "
                             "train", kind=positive_int)
    max_len: int = setting(CORPUS_MAX_LEN, "tokens per sequence", kind=positive_int)
    tokenizer: str = setting(TrainConfig.tokenizer, "tokenizer learned from the corpus",
                             choices=TOKENIZERS)
    vocab_size: int = setting(TrainConfig.vocab_size, "most tokens in the learned vocabulary",
                              kind=positive_int)
    tokenizer_sample_mb: int = setting(TrainConfig.tokenizer_sample_mb, "learn the vocabulary "
                                       "from the corpus' first this many MB", kind=positive_int)
    tokenizer_from: str = setting("", "use this model's tokenizer (vocab.txt) instead of "
                                      "learning one", metavar="MODEL_DIR")
    seed: int = setting(1, "pairing seed", kind=non_negative_int)

    def check(self, given: frozenset = frozenset()) -> None:
        """A corpus pair must fit --max-len (the corpus itself is read by the command)."""
        from nlp_tutorials.sources.corpus import check_max_len

        check_max_len(self.max_len)


@dataclasses.dataclass(kw_only=True)
class PredictSettings(Settings):
    """``predict``: label sentence pairs with a fine-tuned model."""

    input: str = setting("-", "the inputs, one a line as the model's task reads them (a "
                              "sentence, or two separated by a tab; docs/tasks.md has each "
                              "task's), or - for standard input", positional=True)
    model_dir: str = setting(FINETUNED_DIR, "fine-tuned model")


@dataclasses.dataclass(kw_only=True)
class EvaluateSettings(Settings):
    """``evaluate``: score a fine-tuned model on its task's dev or test split."""

    model_dir: str = setting(FINETUNED_DIR, "fine-tuned model from `finetune` (its task is "
                                            "saved with it)")
    data: str = setting("", "folder holding the task's files under their usual names",
                        metavar="DIR", default_help="MRPC's shipped copy for an MRPC model")
    file: str = setting("", "the split's file, instead of the one in --data", metavar="FILE")
    split: str = setting("dev", "the split to score", choices=("dev", "test"))
    output_dir: str = setting("", "where metrics_SPLIT.json and predictions_SPLIT.* go",
                              default_help="the model folder")

    def check_inputs(self) -> None:
        """The data folder and the file are there (before TensorFlow loads)."""
        require_folder(self.data, "--data", "the model's task files")
        if self.file and not Path(self.file).is_file():
            raise UserError(f"--file {self.file}: no such file")


@dataclasses.dataclass(kw_only=True)
class HeadsSettings(Settings):
    """``heads``: which attention heads a fine-tuned BERT needs (nlp_tutorials.analysis.bertology)."""

    model_dir: str = setting(FINETUNED_DIR, "fine-tuned model from `finetune`; "
                                                        "head_importance.json is written "
                                                        "beside it")
    output_dir: str = setting(RESULTS_DIR, "pictures")
    data: str | None = setting(None, "folder holding the task's files (its dev file is scored; "
                                     "the data is not saved with a model)", metavar="DIR",
                               default_help="MRPC's shipped copy for an MRPC model")
    dev_size: int | None = setting(FinetuneConfig.dev_size, "for a task without a dev file "
                                                            "(the shipped MRPC): last train "
                                                            "examples the importance is "
                                                            "measured on, as finetune's dev",
                                   kind=positive_int, default_help=DEV_SIZE_HELP)
    study: bool = setting(False, "also mask 0%, 10%, ..., 90% of the heads, least important "
                                 "first and in random orders, scoring the task's test split "
                                 "(its dev split without one) each time")
    random_orders: int = setting(RANDOM_ORDERS, "random orders the study averages as its control",
                                 kind=positive_int)
    prune: float | None = setting(None, "write a copy without this share of the heads, least "
                                 "important first, each layer keeping one (e.g. 0.4)",
                           kind=half_open_share, metavar="SHARE")
    pruned_dir: str | None = setting(None, "where the pruned model goes",
                              default_help="<model-dir>_pruned<percent>")
    recover_epochs: int = setting(0, "with --prune: fine-tune the pruned model again for this "
                                     "many passes over the task's train examples",
                                  kind=non_negative_int)
    recover_learning_rate: float = setting(RECOVERY_LEARNING_RATE, "with --recover-epochs: "
                                           "peak AdamW rate, 10% warm-up then linear decay",
                                           kind=positive_float)
    recover_batch_size: int = setting(RECOVERY_BATCH_SIZE, "with --recover-epochs: examples "
                                                           "per step", kind=positive_int)

    def check(self, given: frozenset = frozenset()) -> None:
        """Recovery epochs fine-tune the pruned copy, so they need --prune; their rate and
        batch size need them."""
        if self.recover_epochs and self.prune is None:
            raise UserError(f"--recover-epochs {self.recover_epochs}: only with --prune; "
                            f"expected --prune SHARE as well")
        recipe = sorted(given & {"recover_learning_rate", "recover_batch_size"})
        if recipe and not self.recover_epochs:
            raise UserError(f"{flag_of(self, recipe[0])}: only with --recover-epochs; expected "
                            f"--recover-epochs N as well")


@dataclasses.dataclass(kw_only=True)
class ExportModelSettings(Settings):
    """``export-model``: the fine-tuned model as a SavedModel (nlp_tutorials.serving.savedmodel)."""

    model_dir: str = setting(FINETUNED_DIR, "fine-tuned model from `finetune`")
    output: str = setting(help="model base folder; the model goes into OUTPUT/VERSION")
    version: int = setting(SERVED_VERSION, "version folder to write", kind=positive_int)
    overwrite: bool = setting(False, "replace an existing version folder")
    ids_only: bool = setting(False, "export predict_ids only, without tensorflow-text's ops "
                                    "(for servers without them, e.g. the stock "
                                    "tensorflow/serving image)")
    format: str = setting("savedmodel", "savedmodel: TensorFlow's, answering raw text; onnx: "
                                        "OUTPUT/VERSION/model.onnx for ONNX Runtime, ids in "
                                        "(needs pip install 'nlp_tutorials[onnx]'); tflite: "
                                        "OUTPUT/VERSION/model.tflite for LiteRT, ids in (needs "
                                        "pip install 'nlp_tutorials[litert]')",
                          choices=("savedmodel", "onnx", "tflite"))
    xla: bool = setting(False, "compile the model's call with XLA, inputs padded to a multiple "
                               "of 32 positions: faster answers after one compile (seconds) "
                               "per new input shape; sequence and multiple-choice models")
    precision: str = setting(SERVED_PRECISIONS[0], "the weights' and products' precision; bfloat16 halves "
                                        "the model and pays on CPUs with AVX512_BF16 or AMX "
                                        "(slower on others)",
                             choices=SERVED_PRECISIONS)
    quantize: str = setting(SERVED_QUANTIZATIONS[0], "int8: the matmuls' weights in int8 "
                                                     "(dynamic quantization: ONNX Runtime's, "
                                                     "the better of 7- and 8-bit weights, or "
                                                     "TensorFlow Lite's dynamic range), written "
                                                     "only after the int8 model is scored "
                                                     "against float32 on the task's dev split; "
                                                     "with --format onnx or tflite",
                            choices=SERVED_QUANTIZATIONS)
    data: str | None = setting(None, "with --quantize int8: the folder holding the task's "
                                     "files, whose dev split the int8 model is scored on",
                               metavar="DIR", default_help="MRPC's shipped copy for an MRPC "
                                                           "model")
    calibration: str = setting("", "with --quantize int8: a file of the task's examples, in "
                                    "its own format, to score the int8 model on instead of "
                                    "the dev split", metavar="FILE")
    max_drop: float = setting(INT8_MAX_DROP, "with --quantize int8: refuse, writing nothing, "
                                             "an int8 model that loses more than POINTS of "
                                             "the task's first metric", metavar="POINTS",
                              kind=non_negative_float)

    def check(self, given: frozenset = frozenset()) -> None:
        """An ONNX or LiteRT model always takes ids, is float32 unless quantized, and XLA
        compiles TensorFlow's graphs only; the int8 check's flags need --quantize int8."""
        if self.quantize != "none" and self.format not in ("onnx", "tflite"):
            raise UserError(f"--quantize {self.quantize}: only with --format onnx or tflite")
        for name in ("data", "calibration", "max_drop"):
            set_here = name in given or getattr(self, name) != default_of(self, name)
            if set_here and self.quantize == "none":
                raise UserError(f"{flag_of(self, name)}: only with --quantize int8, whose "
                                f"check it sets")
        if self.data and self.calibration:
            raise UserError("--calibration: the int8 model is scored on it in place of --data's "
                            "dev split; give one of them")
        self.check_format()

    def check_format(self) -> None:
        """An ONNX or LiteRT model always takes ids, is float32 unless quantized, and runs in
        its own runtime (no XLA)."""
        model, runtime = {"onnx": ("ONNX", "ONNX Runtime"),
                          "tflite": ("LiteRT", "LiteRT")}.get(self.format, (None, None))
        article = "an" if model == "ONNX" else "a"
        if model is None:
            return
        if self.ids_only:
            raise UserError(f"--ids-only: only with --format savedmodel; {article} {model} model "
                            f"always takes ids")
        if self.xla:
            raise UserError(f"--xla: only with --format savedmodel; {runtime} compiles the "
                            f"{model} model its own way")
        if self.precision != "float32":
            raise UserError(f"--precision {self.precision}: only with --format savedmodel; "
                            f"the {model} model is float32")

    def check_inputs(self) -> None:
        """The int8 check's folder and file are there (before TensorFlow loads)."""
        if self.data:
            require_folder(self.data, "--data", "the model's task files")
        if self.calibration and not Path(self.calibration).is_file():
            raise UserError(f"--calibration {self.calibration}: no such file")


@dataclasses.dataclass(kw_only=True)
class SplitSquadSettings(Settings):
    """``split-squad``: a SQuAD file's articles split in two (nlp_tutorials.tasks.squad_split)."""

    input: str = setting(help="a SQuAD JSON file (v1.1 or v2.0), e.g. dev-v1.1.json",
                         metavar="FILE")
    train_articles: int = setting(help="articles, first by title, that go to the train file; "
                                       "the others go to the scored file", kind=positive_int,
                                  metavar="N")
    output: str = setting(help="folder to write train-vX.json and scored-vX.json into",
                          metavar="DIR")
    without: str = setting("", "leave out, before splitting, every article whose title this "
                               "other SQuAD file holds (a v1.1 model for v2.0 to start from "
                               "must not read v2.0's scored articles)", metavar="FILE")


@dataclasses.dataclass(kw_only=True)
class GenerateSettings(Settings):
    """``gpt generate``: continue a prompt with the pre-trained GPT."""

    prompt: str = setting(help='the start of a sentence, e.g. "the company said"')
    max_new_tokens: int = setting(20, "stop after this many new tokens if [SEP] has not come "
                                      "first", kind=positive_int)
    sample: bool = setting(False, "draw each token at random from the model's distribution "
                                  "instead of taking the most likely one (greedy, the default)")
    top_k: int | None = setting(None, "with --sample: draw only from the k most likely tokens",
                         kind=positive_int, default_help="all")
    temperature: float | None = setting(None, "with --sample: divide the logits by this; < 1 is more "
                                       "conservative, > 1 more adventurous",
                                 kind=positive_float, default_help="1.0")
    seed: int = setting(0, "seed of --sample", kind=non_negative_int)
    model_dir: str = setting(trained_dir("gpt"), "trained GPT")

    def check(self, given: frozenset = frozenset()) -> None:
        """Some text to continue; --top-k and --temperature shape sampling only."""
        if not self.prompt.strip():
            raise UserError("--prompt is empty; expected some text, e.g. --prompt \"the "
                            "company said\"")
        for flag, value in (("--top-k", self.top_k), ("--temperature", self.temperature)):
            if value is not None and not self.sample:
                raise UserError(f"{flag} needs --sample (greedy decoding always takes the most "
                                f"likely token)")


@dataclasses.dataclass(kw_only=True)
class TranslateSettings(Settings):
    """``transformer translate``: dates rewritten by the trained date model."""

    dates: list = setting(help="dates such as 03-11-29", positional=True, many=True)
    model_dir: str = setting(trained_dir("transformer"), "trained model")

    def check(self, given: frozenset = frozenset()) -> None:
        """Each date is well formed (so a typo answers before TensorFlow loads)."""
        from nlp_tutorials.tasks.dates import parse_source

        for text in self.dates:
            parse_source(text)


@dataclasses.dataclass(kw_only=True)
class BaselineSettings(Settings):
    """``python -m nlp_tutorials.baseline``: a task's simple baselines
    (nlp_tutorials.analysis.task_baselines)."""

    task: str = setting(FinetuneConfig.task, task_flag_help, choices=named_tasks, metavar="TASK")
    data: str = setting("", "folder holding the task's files", metavar="DIR",
                        aliases=("--data-dir",),
                       default_help="MRPC's shipped copy for mrpc; needed for the others")
    train: str = setting("", "the train file, given outright instead of found in --data",
                         metavar="FILE")
    dev: str = setting("", "the dev file, given outright instead of found in --data",
                       metavar="FILE")
    test: str = setting("", "the test file, given outright instead of found in --data",
                        metavar="FILE")
    train_articles: int | None = setting(None, "SQuAD from its dev file alone: articles sorted "
                                               "by title, the first N train, the others are "
                                               "scored (38 of v1.1's 48, 28 of v2.0's 35)",
                                         kind=positive_int, metavar="N")
