"""The command line is made from the settings dataclasses: one declaration per setting.

Each flag's help shows the default its dataclass field declares, a changed default changes
both the help and the parsed value, each rule between settings answers in one line from the
command line and from Python alike, and every command reaches its run function with the
settings its flags describe.
"""
import dataclasses
import os
import re

import pytest

import nlp_tutorials.cli.runs as runs
from nlp_tutorials.cli import main
from nlp_tutorials.cli.commands import FAMILIES
from nlp_tutorials.cli.settings import (
    AfterTraining,
    BaselineSettings,
    EvaluateSettings,
    ExploreSettings,
    ExportModelSettings,
    ExportSettings,
    GenerateSettings,
    HeadsSettings,
    PlotSettings,
    PredictSettings,
    PrepareSettings,
    SplitSquadSettings,
    PretrainOptions,
    TranslateSettings,
)
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.settings import FLAG, flag_help, positive_int, probability, setting
from nlp_tutorials.training.config import DateTrainConfig, FinetuneConfig, TrainConfig

COMMANDS = [(model, command.name) for model, family in FAMILIES.items()
            for command in family.commands]


def run_main(capsys, model, argv):
    """(exit status, stdout, stderr) of ``main``; argparse's exits included."""
    try:
        status = main(model, argv)
    except SystemExit as exit:
        status = exit.code
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture
def calls(monkeypatch):
    """Every command's run replaced by a recorder: {(model, command): (settings, keywords)}."""
    recorded = {}

    def recorder(model, name):
        def run(*settings, **keywords):
            recorded[model, name] = (settings, keywords)
        return run

    for model, family in FAMILIES.items():
        commands = tuple(dataclasses.replace(command, run=recorder(model, command.name))
                         for command in family.commands)
        monkeypatch.setitem(FAMILIES, model, dataclasses.replace(family, commands=commands))
    return recorded


def help_of(capsys, monkeypatch, model, command) -> dict:
    """{flag or positional name: its help text} from ``<command> --help``, read as printed."""
    monkeypatch.setenv("COLUMNS", "1000")  # one line per help text
    status, out, _ = run_main(capsys, model, [command, "--help"] if command else ["--help"])
    assert status == 0
    lines = out.splitlines()
    helps = {}
    for number, line in enumerate(lines):
        # "  --data DIR, --data-dir DIR  help": a flag with its other spellings
        found = re.match(r"^  ([-\w]+)(?: \S+)?(?:, --[-\w]+(?: \S+)?)*(?:  +(.*))?$", line)
        if found and found.group(1) not in ("-h",):
            helps[found.group(1)] = found.group(2) or lines[number + 1].strip()
    return helps


def expected_flags(model, command):
    """{name in the help: (field, default for this command)} read from the dataclasses."""
    command = next(c for c in FAMILIES[model].commands if c.name == command)
    flags = {}
    for settings_class in command.settings:
        for field in dataclasses.fields(settings_class):
            flag = field.metadata.get(FLAG)
            if flag is None or (flag.models and model not in flag.models):
                continue
            name = field.name if flag.positional else (
                flag.spelling or "--" + field.name.replace("_", "-"))
            flags[name] = (field, command.defaults.get(field.name, field.default))
    return flags


@pytest.mark.parametrize("model, command", COMMANDS)
def test_every_flag_is_in_the_help_with_the_default_its_field_declares(
        capsys, monkeypatch, model, command):
    helps = help_of(capsys, monkeypatch, model, command)
    flags = expected_flags(model, command)
    # --verbose, no setting, comes with every command that starts TensorFlow.
    starts = next(c for c in FAMILIES[model].commands if c.name == command).starts_tensorflow
    assert set(helps) == set(flags) | ({"--verbose"} if starts else set())
    words = FAMILIES[model].words
    for name, (field, default) in flags.items():
        flag = field.metadata[FLAG]
        if flag.default_help is not None:
            assert helps[name].endswith(f"(default: {flag.default_help.format_map(words)})")
        elif isinstance(default, bool) or default in (dataclasses.MISSING, None, ""):
            assert "(default" not in helps[name].replace(flag_help(flag), ""), name
        else:
            assert helps[name].endswith(f"(default {default})"), (name, helps[name])


@pytest.mark.parametrize("model, shown, fine_tuned", [
    ("bert", "MRPC test pairs, or a fine-tuned model's test (else dev) examples, to include",
     True),
    ("gpt", "MRPC test pairs to include", False),
    ("transformer", "held-out dates to include", False),
])
def test_explore_s_help_speaks_of_the_family_s_own_models_and_examples(
        capsys, monkeypatch, model, shown, fine_tuned):
    helps = help_of(capsys, monkeypatch, model, "explore")
    assert helps["--n"].startswith(shown)
    # Only BERT is fine-tuned: its task's files and `bert heads`' importances are BERT's flags.
    assert ("fine-tuned" in helps["--model-dir"]) == fine_tuned
    assert ({"--data", "--importance"} <= set(helps)) == fine_tuned
    if model == "transformer":
        assert not any("MRPC" in text for text in helps.values())


def test_predict_s_help_names_the_inputs_of_every_task(capsys, monkeypatch):
    """A sentence task reads plain lines, a pair task two texts a line separated by a tab."""
    text = help_of(capsys, monkeypatch, "bert", "predict")["input"]
    assert "TSV" not in text and text.startswith("the inputs, one a line as the model's task "
                                                 "reads them (a sentence, or two separated by "
                                                 "a tab;")


@pytest.mark.parametrize("user_level, verbose, level", [
    (None, False, None), (None, True, "0"), ("3", True, "3"), ("1", False, "1")])
def test_verbose_shows_tensorflow_s_log_unless_the_user_set_its_level(
        calls, capsys, monkeypatch, user_level, verbose, level):
    """--verbose sets TF_CPP_MIN_LOG_LEVEL=0 before TensorFlow starts; without it the level
    is left for start_tensorflow's default (2); a level the user set is never changed."""
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    if user_level is not None:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", user_level)
    argv = ["translate", "98-02-26", *(["--verbose"] if verbose else [])]
    assert run_main(capsys, "transformer", argv)[0] == 0
    assert calls["transformer", "translate"]  # the run was reached, after the level was set
    assert os.environ.get("TF_CPP_MIN_LOG_LEVEL") == level


def test_a_command_that_never_starts_tensorflow_has_no_verbose(capsys):
    status, _, err = run_main(capsys, "bert", ["plot", "--verbose"])
    assert status == 2 and "unrecognized arguments: --verbose" in err


def test_a_field_without_flag_metadata_is_no_flag(calls, capsys, monkeypatch):
    @dataclasses.dataclass
    class TaskFinetune(FinetuneConfig):
        task: str = "mrpc"

    swap_settings(monkeypatch, "bert", "finetune", (TaskFinetune,))
    assert "--task" not in help_of(capsys, monkeypatch, "bert", "finetune")
    status, _, err = run_main(capsys, "bert", ["finetune", "--task", "sst2"])
    assert status == 2 and "unrecognized arguments: --task sst2" in err
    assert run_main(capsys, "bert", ["finetune"])[0] == 0
    assert calls["bert", "finetune"][0] == (TaskFinetune(task="mrpc"),)


def swap_settings(monkeypatch, model, name, settings):
    """Give command ``name`` of ``model`` other settings classes (for this test only)."""
    family = FAMILIES[model]
    commands = tuple(dataclasses.replace(c, settings=settings) if c.name == name else c
                     for c in family.commands)
    monkeypatch.setitem(FAMILIES, model, dataclasses.replace(family, commands=commands))


@dataclasses.dataclass
class QuickTrain(TrainConfig):
    steps: int = setting(7, "optimisation steps", kind=positive_int)


@dataclasses.dataclass(kw_only=True)
class ShortGenerate(GenerateSettings):
    max_new_tokens: int = setting(3, "new tokens at most", kind=positive_int)


@pytest.mark.parametrize("model, command, settings, argv, flag, field, declared", [
    ("gpt", "train", (QuickTrain, PretrainOptions), [], "--steps", "steps", 7),
    ("gpt", "generate", (ShortGenerate,), ["--prompt", "the"], "--max-new-tokens",
     "max_new_tokens", 3),
])
def test_a_changed_default_changes_the_help_and_the_parsed_value(
        calls, capsys, monkeypatch, model, command, settings, argv, flag, field, declared):
    swap_settings(monkeypatch, model, command, settings)
    assert help_of(capsys, monkeypatch, model, command)[flag].endswith(f"(default {declared})")
    assert run_main(capsys, model, [command, *argv])[0] == 0
    parsed = calls[model, command][0][0]
    assert type(parsed) is settings[0] and getattr(parsed, field) == declared


# (model, argv, settings class, keywords making the same settings in Python, the one line)
RULES = [
    ("bert", ["train", "--dim", "30"], TrainConfig, {"dim": 30},
     "--dim 30 is not divisible by --heads 4"),
    ("bert", ["train", "--cpu-replicas", "2", "--strategy", "tpu"], TrainConfig,
     {"cpu_replicas": 2, "strategy": "tpu"},
     "--cpu-replicas 2: only --strategy mirrored runs on logical CPU devices (got --strategy "
     "tpu); add --strategy mirrored or drop --cpu-replicas"),
    ("bert", ["train", "--corpus", "c.txt", "--nsp-mode", "paraphrase"], TrainConfig,
     {"corpus": "c.txt", "nsp_mode": "paraphrase"},
     "--nsp-mode paraphrase: a corpus has no paraphrase labels; with --corpus or --data only "
     "'random' (IsNext/NotNext) applies"),
    ("bert", ["train", "--head-warmup-steps", "5"], TrainConfig, {"head_warmup_steps": 5},
     "--head-warmup-steps 5: only with --init-from (a model from scratch has no trained "
     "encoder to protect)"),
    ("bert", ["train", "--head-learning-rate", "0.01"], TrainConfig,
     {"head_learning_rate": 0.01},
     "--head-learning-rate 0.01: only with --init-from (it is the rate of the heads-only "
     "warm-up steps)"),
    ("bert", ["finetune", "--init-from", "x", "--from-scratch"], FinetuneConfig,
     {"init_from": "x", "from_scratch": True},
     "--init-from and --from-scratch exclude each other; pass one"),
    ("bert", ["finetune", "--cpu-replicas", "3"], FinetuneConfig, {"cpu_replicas": 3},
     "--cpu-replicas 3: only --strategy mirrored runs on logical CPU devices (got --strategy "
     "default); add --strategy mirrored or drop --cpu-replicas"),
    ("transformer", ["train", "--heads", "3"], DateTrainConfig, {"heads": 3},
     "--dim 64 is not divisible by --heads 3"),
    ("bert", ["explore", "--input", "a.pkl", "--model-dir", "m"], ExploreSettings,
     {"input": "a.pkl", "model_dir": "m"},
     "--input a.pkl and --model-dir m: expected one source of attention, not both"),
    ("bert", ["heads", "--recover-epochs", "2"], HeadsSettings, {"recover_epochs": 2},
     "--recover-epochs 2: only with --prune; expected --prune SHARE as well"),
    ("bert", ["export-model", "--output", "o", "--format", "onnx", "--ids-only"],
     ExportModelSettings, {"output": "o", "format": "onnx", "ids_only": True},
     "--ids-only: only with --format savedmodel; an ONNX model always takes ids"),
    ("bert", ["export-model", "--output", "o", "--format", "onnx", "--xla"],
     ExportModelSettings, {"output": "o", "format": "onnx", "xla": True},
     "--xla: only with --format savedmodel; ONNX Runtime compiles the ONNX model its own way"),
    ("bert", ["export-model", "--output", "o", "--format", "onnx", "--precision", "bfloat16"],
     ExportModelSettings, {"output": "o", "format": "onnx", "precision": "bfloat16"},
     "--precision bfloat16: only with --format savedmodel; the ONNX model is float32"),
    ("bert", ["export-model", "--output", "o", "--quantize", "int8"],
     ExportModelSettings, {"output": "o", "quantize": "int8"},
     "--quantize int8: only with --format onnx or tflite"),
    ("bert", ["export-model", "--output", "o", "--format", "onnx", "--max-drop", "2"],
     ExportModelSettings, {"output": "o", "format": "onnx", "max_drop": 2.0},
     "--max-drop: only with --quantize int8, whose check it sets"),
    ("bert", ["export-model", "--output", "o", "--format", "onnx", "--quantize", "int8",
              "--data", "d", "--calibration", "f"],
     ExportModelSettings, {"output": "o", "format": "onnx", "quantize": "int8", "data": "d",
                           "calibration": "f"},
     "--calibration: the int8 model is scored on it in place of --data's dev split; give one "
     "of them"),
    ("bert", ["export-model", "--output", "o", "--format", "tflite", "--ids-only"],
     ExportModelSettings, {"output": "o", "format": "tflite", "ids_only": True},
     "--ids-only: only with --format savedmodel; a LiteRT model always takes ids"),
    ("bert", ["export-model", "--output", "o", "--format", "tflite", "--xla"],
     ExportModelSettings, {"output": "o", "format": "tflite", "xla": True},
     "--xla: only with --format savedmodel; LiteRT compiles the LiteRT model its own way"),
    ("bert", ["export-model", "--output", "o", "--format", "tflite", "--precision", "bfloat16"],
     ExportModelSettings, {"output": "o", "format": "tflite", "precision": "bfloat16"},
     "--precision bfloat16: only with --format savedmodel; the LiteRT model is float32"),
    ("gpt", ["generate", "--prompt", "x", "--top-k", "3"], GenerateSettings,
     {"prompt": "x", "top_k": 3},
     "--top-k needs --sample (greedy decoding always takes the most likely token)"),
    ("gpt", ["generate", "--prompt", "x", "--temperature", "2"], GenerateSettings,
     {"prompt": "x", "temperature": 2.0},
     "--temperature needs --sample (greedy decoding always takes the most likely token)"),
    ("gpt", ["generate", "--prompt", " "], GenerateSettings, {"prompt": " "},
     "--prompt is empty; expected some text, e.g. --prompt \"the company said\""),
    ("gpt", ["prepare", "--corpus", "c.txt", "--output", "o", "--max-len", "7"],
     PrepareSettings, {"corpus": "c.txt", "output": "o", "max_len": 7},
     "--max-len 7: a corpus pair needs room for two segments and three special tokens; "
     "expected at least 8"),
    ("transformer", ["translate", "03-11-29", "99-99-99"], TranslateSettings,
     {"dates": ["03-11-29", "99-99-99"]},
     "'99-99-99': no such date (month must be in 1..12); expected a date as YY-MM-DD, e.g. "
     "98-02-26 (years 50-99 are 1950-1999, 00-49 are 2000-2049)"),
]


@pytest.mark.parametrize("model, argv, settings_class, keywords, message", RULES)
def test_each_rule_is_one_line_from_the_command_line(calls, capsys, model, argv,
                                                     settings_class, keywords, message):
    status, out, err = run_main(capsys, model, argv)
    assert (status, out) == (2, "")
    assert err == f"python -m nlp_tutorials.{model} {argv[0]}: error: {message}\n"
    assert not calls, "a refused command ran"


@pytest.mark.parametrize("model, argv, settings_class, keywords, message", RULES)
def test_each_rule_is_the_same_line_from_python(model, argv, settings_class, keywords,
                                                message):
    with pytest.raises(UserError) as refused:
        settings_class(**keywords)
    assert str(refused.value) == message


def test_a_flag_given_at_its_default_still_needs_its_partner(calls, capsys):
    # --head-learning-rate 0.001 is the default, but giving it without --init-from is a
    # mistake all the same; in Python only a changed rate can be told from the default.
    status, _, err = run_main(capsys, "bert", ["train", "--head-learning-rate", "0.001"])
    assert status == 2 and "--head-learning-rate 0.001: only with --init-from" in err
    assert TrainConfig(head_learning_rate=0.001).head_learning_rate == 0.001


def test_rules_only_python_reaches():
    # The command line has no such flags (argparse refuses them): gpt has no --init-from,
    # and --corpus with --data is argparse's mutually exclusive group.
    with pytest.raises(UserError, match=r"^--init-from x: only BERT starts from a pretrained "
                                        r"checkpoint$"):
        TrainConfig(model_type="gpt", init_from="x")
    with pytest.raises(UserError, match=r"^--corpus and --data exclude each other"):
        TrainConfig(corpus="c.txt", data="shards")
    # A config made in Python may name a folder still to be made: only the command line's
    # check_inputs() looks at the disk.
    assert TrainConfig(init_from="not/yet", head_warmup_steps=2).init_from == "not/yet"


@pytest.mark.parametrize("kind, text, expected", [
    (positive_int, "3", 3), (positive_int, "0", "expected a positive integer, got 0"),
    (positive_int, "2.5", "expected a positive integer, got '2.5'"),
    (probability, "0", 0.0), (probability, "1", "expected a probability in [0, 1), got 1"),
    (probability, "-0.1", "expected a probability in [0, 1), got -0.1"),
])
def test_kinds_of_value_parse_or_say_what_they_expected(kind, text, expected):
    if isinstance(expected, str):
        with pytest.raises(ValueError, match=re.escape(expected) + "$"):
            kind(text)
    else:
        assert kind(text) == expected


# (model, argv, the settings the run function must receive, the flags given to train)
DISPATCH = [
    ("bert", ["train", "--steps", "5", "--resume"],
     (TrainConfig(steps=5), PretrainOptions(resume=True)), {"given": {"steps", "resume"}}),
    ("gpt", ["train", "--no-plots", "--jit"],
     (TrainConfig(model_type="gpt", model_dir="visual/models/gpt", jit=True),
      PretrainOptions(no_plots=True)), {"given": {"jit", "no_plots"}}),
    ("transformer", ["train", "--steps", "5", "--no-plots"],
     (DateTrainConfig(steps=5), AfterTraining(no_plots=True)), {}),
    ("bert", ["export", "--n", "3"], (ExportSettings(n=3),), {}),
    ("gpt", ["export"], (ExportSettings(model_type="gpt", model_dir="visual/models/gpt",
                                       output="visual/tmp/gpt_attention_matrix.pkl"),), {}),
    ("transformer", ["export", "--n", "2"],
     (ExportSettings(model_type="transformer", model_dir="visual/models/transformer", n=2,
                     output="visual/tmp/transformer_attention_matrix.pkl"),), {}),
    ("bert", ["plot", "--case", "2"], (PlotSettings(case=2),), {}),
    ("gpt", ["plot", "--layer", "1"],
     (PlotSettings(model_type="gpt", input="visual/tmp/gpt_attention_matrix.pkl", layer=1),),
     {}),
    ("transformer", ["plot"],
     (PlotSettings(model_type="transformer",
                   input="visual/tmp/transformer_attention_matrix.pkl"),), {}),
    ("bert", ["explore", "--view", "model"], (ExploreSettings(view="model"),), {}),
    ("gpt", ["explore", "--input", "a.pkl"],
     (ExploreSettings(model_type="gpt", input="a.pkl",
                      output="visual/results/gpt_explorer.html"),), {}),
    ("transformer", ["explore", "--n", "4"],
     (ExploreSettings(model_type="transformer", n=4,
                      output="visual/results/transformer_explorer.html"),), {}),
    ("bert", ["prepare", "--corpus", "c.txt", "--output", "out"],
     (PrepareSettings(corpus="c.txt", output="out"),), {}),
    ("gpt", ["prepare", "--corpus", "c.txt", "--output", "out", "--shards", "2"],
     (PrepareSettings(corpus="c.txt", output="out", shards=2),), {}),
    ("bert", ["finetune", "--no-swap", "--pooling", "mean"],
     (FinetuneConfig(swap_augment=False, pooling="mean"),), {}),
    ("bert", ["finetune", "--task", "rte", "--data", "."],
     (FinetuneConfig(task="rte", data="."),), {}),
    ("bert", ["evaluate", "--split", "test"], (EvaluateSettings(split="test"),), {}),
    ("bert", ["predict", "pairs.tsv"], (PredictSettings(input="pairs.tsv"),), {}),
    ("bert", ["predict"], (PredictSettings(input="-"),), {}),
    ("bert", ["heads", "--prune", "0.5", "--recover-epochs", "1"],
     (HeadsSettings(prune=0.5, recover_epochs=1),), {}),
    ("bert", ["export-model", "--output", "served", "--ids-only"],
     (ExportModelSettings(output="served", ids_only=True),), {}),
    ("bert", ["export-model", "--output", "served", "--format", "onnx"],
     (ExportModelSettings(output="served", format="onnx"),), {}),
    ("bert", ["export-model", "--output", "served", "--xla"],
     (ExportModelSettings(output="served", xla=True),), {}),
    ("bert", ["export-model", "--output", "served", "--precision", "bfloat16"],
     (ExportModelSettings(output="served", precision="bfloat16"),), {}),
    ("bert", ["export-model", "--output", "served", "--format", "onnx", "--quantize", "int8",
              "--max-drop", "0.5"],
     (ExportModelSettings(output="served", format="onnx", quantize="int8", max_drop=0.5),), {}),
    ("bert", ["split-squad", "--input", "dev-v1.1.json", "--train-articles", "38", "--output",
              "split"],
     (SplitSquadSettings(input="dev-v1.1.json", train_articles=38, output="split"),), {}),
    ("gpt", ["generate", "--prompt", "the", "--sample", "--top-k", "3"],
     (GenerateSettings(prompt="the", sample=True, top_k=3),), {}),
    ("transformer", ["translate", "03-11-29", "98-02-26"],
     (TranslateSettings(dates=["03-11-29", "98-02-26"]),), {}),
    ("baseline", ["--task", "rte", "--data-dir", "glue/RTE", "--train-articles", "3"],
     (BaselineSettings(task="rte", data="glue/RTE", train_articles=3),), {}),
]


def command_of(model, argv) -> str:
    """The command ``argv`` names: its first word, or "" in a family of one command."""
    return "" if FAMILIES[model].single else argv[0]


def test_dispatch_covers_every_command():
    assert sorted({(model, command_of(model, argv)) for model, argv, _, _ in DISPATCH}) == sorted(
        COMMANDS)


@pytest.mark.parametrize("model, argv, settings, keywords", DISPATCH)
def test_each_command_runs_its_function_with_the_parsed_settings(calls, capsys, model, argv,
                                                                 settings, keywords):
    assert run_main(capsys, model, argv) == (0, "", "")
    assert calls == {(model, command_of(model, argv)): (settings, keywords)}


def test_the_table_names_each_commands_run_function():
    table = {model: {command.name: command.run for command in family.commands}
             for model, family in FAMILIES.items()}
    shared = {"export": runs.run_export, "plot": runs.run_plot, "explore": runs.run_explore,
              "prepare": runs.run_prepare}
    assert table == {
        "bert": {"train": runs.run_train, **shared, "finetune": runs.run_finetune,
                 "evaluate": runs.run_evaluate, "predict": runs.run_predict,
                 "heads": runs.run_heads, "export-model": runs.run_export_model,
                 "split-squad": runs.run_split_squad},
        "gpt": {"train": runs.run_train, **shared, "generate": runs.run_generate},
        "transformer": {"train": runs.run_train_dates, "translate": runs.run_translate,
                        "export": runs.run_export_dates, "plot": runs.run_plot,
                        "explore": runs.run_explore},
        "baseline": {"": runs.run_baseline},
    }


def test_a_run_functions_status_is_the_exit_status(monkeypatch, capsys):
    # A run function may return an exit status of its own; main hands it on.
    family = FAMILIES["bert"]
    commands = tuple(dataclasses.replace(c, run=lambda *settings, given: 130)
                     if c.name == "train" else c for c in family.commands)
    monkeypatch.setitem(FAMILIES, "bert", dataclasses.replace(family, commands=commands))
    assert run_main(capsys, "bert", ["train"])[0] == 130


def test_export_models_precisions_are_the_serving_packages():
    """The flag writes its choices out (the serving package starts TensorFlow on import)."""
    import dataclasses

    from nlp_tutorials.cli.settings import ExportModelSettings
    from nlp_tutorials.serving.precision import PRECISIONS

    fields = {field.name: field for field in dataclasses.fields(ExportModelSettings)}
    assert fields["precision"].metadata[FLAG].choices == PRECISIONS
