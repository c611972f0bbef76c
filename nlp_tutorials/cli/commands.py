"""The commands of each model family: a table, not a chain of ifs.

A :class:`Command` names its settings dataclasses (their fields are its flags) and the function
that runs it; a :class:`Family` is the commands of ``python -m nlp_tutorials.<name>`` with the
defaults and words that differ between families (its model folder, its examples).
"""
import dataclasses
from typing import Callable

import nlp_tutorials.cli.runs as runs
from nlp_tutorials.cli.flags import add_settings_flags
from nlp_tutorials.cli.settings import (
    AfterTraining,
    BaselineSettings,
    ExploreSettings,
    ExportModelSettings,
    ExportSettings,
    GenerateSettings,
    HeadsSettings,
    PlotSettings,
    EvaluateSettings,
    PredictSettings,
    PrepareSettings,
    SplitSquadSettings,
    PretrainOptions,
    TranslateSettings,
    default_pickle,
    explorer_page,
)
from nlp_tutorials.system.settings import config_from_args
from nlp_tutorials.training.config import (
    DateTrainConfig,
    FinetuneConfig,
    TrainConfig,
    trained_dir,
)


@dataclasses.dataclass(frozen=True)
class Command:
    """One command: ``run(*settings)`` with one instance of each of its ``settings`` classes,
    built from the flags (plus ``given=`` the flags set, when ``needs_given``).

    ``defaults`` replaces field defaults for this family's command (``model_dir``: its own).
    """

    name: str
    help: str
    settings: tuple
    run: Callable
    defaults: dict = dataclasses.field(default_factory=dict)
    needs_given: bool = False  # train --resume compares the flags given with the saved run
    starts_tensorflow: bool = True  # and so has --verbose, to show TensorFlow's log

    def start(self, settings: tuple, given: set):
        """Run the command with its built ``settings``; returns the run's exit status."""
        return self.run(*settings, given=given) if self.needs_given else self.run(*settings)


@dataclasses.dataclass(frozen=True)
class Family:
    """The commands of ``python -m nlp_tutorials.<name>``; ``words`` fill the braces in their
    help texts ("{examples} to run"). A family of one command named "" (``baseline``) takes
    that command's flags with no command word."""

    name: str
    description: str
    commands: tuple
    words: dict

    @property
    def single(self) -> bool:
        return len(self.commands) == 1 and not self.commands[0].name

    def command(self, name: str) -> Command:
        return next(command for command in self.commands if command.name == name)

    def add_flags(self, parser, command: Command) -> None:
        for settings_class in command.settings:
            add_settings_flags(parser, settings_class, self.name, command.defaults, self.words)

    def settings_from(self, command: Command, args) -> tuple:
        """(one checked instance per settings class of ``command``, names of fields given)."""
        built, given = [], set()
        for settings_class in command.settings:
            names = {field.name for field in dataclasses.fields(settings_class)}
            values = {name: value for name, value in command.defaults.items() if name in names}
            instance, given_here = config_from_args(settings_class, args, **values)
            built.append(instance)
            given |= given_here
        return tuple(built), given


def export_command(model_name: str, examples: str, run) -> Command:
    """``export``: the trained model's attention on the first examples, pickled."""
    return Command("export", f"write attention matrices of {examples} to a pickle",
                   (ExportSettings,), run,
                   {"model_type": model_name, "model_dir": trained_dir(model_name),
                    "output": default_pickle(model_name)})


def attention_commands(model_name: str) -> tuple:
    """``plot`` and ``explore``: look at the attention of a family's model."""
    return (Command("plot", "draw attention heatmaps from an exported pickle", (PlotSettings,),
                    runs.run_plot, {"model_type": model_name, "input": default_pickle(model_name)},
                    starts_tensorflow=False),
            Command("explore", "write one HTML page to browse the attention: head, model and "
                               "neuron views", (ExploreSettings,), runs.run_explore,
                    {"model_type": model_name, "output": explorer_page(model_name)}))


def train_defaults(model_name: str) -> dict:
    """The TrainConfig fields ``python -m nlp_tutorials.<model_name> train`` sets itself."""
    return {"model_type": model_name, "model_dir": trained_dir(model_name)}


def pretraining_family(model_name: str, extra_commands: tuple) -> Family:
    """``bert`` or ``gpt``: pre-train on MRPC (or a corpus), look at the attention, and more."""
    commands = (
        Command("train", f"pre-train {model_name.upper()} on MRPC train, or on your own text "
                         f"(--corpus, --data)",
                (TrainConfig, PretrainOptions), runs.run_train, train_defaults(model_name),
                needs_given=True),
        export_command(model_name, "MRPC test pairs", runs.run_export),
        *attention_commands(model_name),
        Command("prepare", "tokenize a text corpus once into TFRecord shards for `train --data`",
                (PrepareSettings,), runs.run_prepare),
        *extra_commands,
    )
    return Family(model_name, DESCRIPTIONS[model_name], commands,
                  {"examples": "MRPC test pairs", "model_dir": trained_dir(model_name),
                   **EXPLORED[model_name]})


DESCRIPTIONS = {
    "bert": "Pre-train BERT (on MRPC or your own text), fine-tune it on a task, look at its "
            "attention and serve it.",
    "gpt": "Pre-train GPT (on MRPC or your own text), continue prompts with it and look at its "
           "attention.",
}
# What `explore` runs and shows, in each family's words.
EXPLORED = {
    "bert": {"explored_models": "a pre-trained one (`train`) or a fine-tuned one (`finetune`)",
             "shown_examples": "MRPC test pairs, or a fine-tuned model's test (else dev) "
                               "examples,"},
    "gpt": {"explored_models": "a trained one (`train`)", "shown_examples": "MRPC test pairs"},
    "transformer": {"explored_models": "a trained one (`train`)",
                    "shown_examples": "held-out dates"},
}

BERT_COMMANDS = (
    Command("finetune", "fine-tune BERT on a task: GLUE, CoNLL-2003, SQuAD, SWAG, "
                        "CommonsenseQA or your own data (MRPC by default)",
            (FinetuneConfig,), runs.run_finetune),
    Command("evaluate", "score a fine-tuned model on its task's dev or test split and write "
                        "its predictions", (EvaluateSettings,), runs.run_evaluate),
    Command("predict", "answer with the fine-tuned model, one input a line (MRPC: "
                       "s1<TAB>s2; docs/tasks.md has each task's)", (PredictSettings,),
            runs.run_predict),
    Command("heads", "score each attention head of a fine-tuned model (importance, entropy); "
                     "mask or prune the least important", (HeadsSettings,), runs.run_heads),
    Command("export-model", "write the fine-tuned model as a SavedModel (TensorFlow Serving) "
                            "or an ONNX model (ONNX Runtime)", (ExportModelSettings,),
            runs.run_export_model),
    Command("split-squad", "split a SQuAD file by article (sorted by title) into a train file "
                           "and a scored one", (SplitSquadSettings,), runs.run_split_squad,
            starts_tensorflow=False),
)
GPT_COMMANDS = (
    Command("generate", "continue a prompt with the trained GPT", (GenerateSettings,),
            runs.run_generate),
)
TRANSFORMER = Family(
    "transformer", "Train the encoder-decoder Transformer to rewrite dates (98-02-26 -> "
                   "26/Feb/1998), translate, export, plot.",
    (Command("train", "learn the date task; report held-out exact match",
             (DateTrainConfig, AfterTraining), runs.run_train_dates),
     Command("translate", "rewrite YY-MM-DD dates as DD/Mon/YYYY", (TranslateSettings,),
             runs.run_translate),
     export_command("transformer", "held-out dates", runs.run_export_dates),
     *attention_commands("transformer")),
    {"examples": "held-out dates", "model_dir": trained_dir("transformer"),
     **EXPLORED["transformer"]})

BASELINE = Family(
    "baseline", "Simple baselines of a task, fitted on its train split and scored by the "
                "task's own metrics on the splits a fine-tuned model is scored on: a line per "
                "baseline and split.",
    (Command("", "", (BaselineSettings,), runs.run_baseline, starts_tensorflow=False),), {})

FAMILIES = {"bert": pretraining_family("bert", BERT_COMMANDS),
            "gpt": pretraining_family("gpt", GPT_COMMANDS),
            "transformer": TRANSFORMER, "baseline": BASELINE}
