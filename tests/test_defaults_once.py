"""Each default is declared once: a flag's default is written where its settings field is, and
nowhere else with the same value by hand.

Read from the source with ``ast``, as tests/test_layout.py reads the imports. A flag is a field
made with ``setting(default, ...)`` (:mod:`nlp_tutorials.system.settings`). Two things restate
one, so that changing it in one place would leave the other behind:

- the same flag, with the same literal default, in two settings classes (``no_plots`` in
  ``train``'s and ``transformer train``'s options, where one class can inherit the other's);
- a function parameter of the flag's name whose literal default is the flag's
  (``Task(stride=128)`` beside ``--stride``'s 128).

A shared constant (``stride=DEFAULT_STRIDE``) is not a literal, and so declares nothing again.
"Not given" (None, "", ()) is no default to keep in step, and is not compared; nor is a
parameter that is off unless asked (False), which says no more than a switch's absence.
"""
import ast
import textwrap
from pathlib import Path
from typing import NamedTuple

PACKAGE = Path(__file__).resolve().parent.parent / "nlp_tutorials"
NOT_GIVEN = (None, "", ())
OFF = (*NOT_GIVEN, False)

# Settings that share a name and, by chance, a value, but are not one setting: each says why.
DIFFERENT_SETTINGS = {
    ("heads", 4): "BERT's and GPT's attention heads (TrainConfig) and the date Transformer's "
                  "(DateTrainConfig): two models whose sizes agree by chance",
    ("seed", 1): "each run's own first seed: pre-training, fine-tuning, the date model and "
                 "prepare's pairing",
    ("seed", 0): "generate's sampling seed, and the seeds of other draws (a baseline's folds, "
                 "the masking study's random orders, a corpus' pairing) named alike",
    ("batch_size", 64): "the date model's dates per step, and the examples per forward pass "
                        "when a fine-tuned model answers",
}
# One setting restated by a module that loads TensorFlow, below the settings that declare its
# flag (and so unable to import from them): each is to be shared through a module both can
# import, as system/model_files.py shares the model folder's file names.
RESTATED_BELOW = {
    ("version", 1): "serving/savedmodel.py, serving/onnx_export.py",
    ("precision", "float32"): "serving/savedmodel.py",
    ("nsp_mode", "random"): "sources/mrpc.py",
    ("pooling", "cls"): "models/task_heads.py",
}


class Declared(NamedTuple):
    name: str
    value: object
    where: str  # path:line


def literal(node):
    """The value of a literal expression, or Ellipsis for anything else (a name, a call)."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return ...


def flag_default(call: ast.Call):
    """The default a ``setting(...)`` call gives (first argument or ``default=``), or Ellipsis."""
    if call.args:
        return literal(call.args[0])
    given = [keyword.value for keyword in call.keywords if keyword.arg == "default"]
    return literal(given[0]) if given else ...


def is_setting_call(node) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "setting")


def declarations(root: Path) -> tuple[list, list]:
    """(flags, function parameters) declared with a literal default in the ``.py`` files under
    ``root``."""
    flags, parameters = [], []
    for path in sorted(root.rglob("*.py")):
        shown = path.relative_to(root.parent)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                flags += [Declared(field.target.id, flag_default(field.value),
                                   f"{shown}:{field.lineno}")
                          for field in node.body if isinstance(field, ast.AnnAssign)
                          and isinstance(field.target, ast.Name) and is_setting_call(field.value)]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                arguments = node.args.posonlyargs + node.args.args
                pairs = list(zip(arguments[len(arguments) - len(node.args.defaults):],
                                 node.args.defaults))
                pairs += [(argument, default) for argument, default
                          in zip(node.args.kwonlyargs, node.args.kw_defaults) if default]
                parameters += [Declared(argument.arg, literal(default),
                                        f"{shown}:{default.lineno}")
                               for argument, default in pairs]
    return kept(flags, NOT_GIVEN), kept(parameters, OFF)


def kept(found: list, left_out: tuple) -> list:
    """The declarations of ``found`` whose value is a literal and none of ``left_out``."""
    return [one for one in found if one.value is not ... and not any(
        one.value == value and type(one.value) is type(value) for value in left_out)]


def same(one: Declared, other: Declared) -> bool:
    """The same name and value (True is not 1)."""
    return (one.name, one.value, type(one.value)) == (other.name, other.value, type(other.value))


def declared_twice(root: Path) -> dict:
    """{(name, value): the places declaring it} for each default declared more than once."""
    flags, parameters = declarations(root)
    twice = {}
    for index, flag in enumerate(flags):
        again = [other for other in flags[index + 1:] if same(flag, other)]
        again += [parameter for parameter in parameters if same(flag, parameter)]
        if again:
            places = twice.setdefault((flag.name, flag.value), [])
            places += [one.where for one in (flag, *again) if one.where not in places]
    return twice


def test_each_default_is_declared_once():
    twice = declared_twice(PACKAGE)
    explained = {**DIFFERENT_SETTINGS, **RESTATED_BELOW}
    unexplained = {key: places for key, places in twice.items() if key not in explained}
    assert not unexplained, "defaults declared twice (use one constant):\n" + "\n".join(
        f"{name} = {value!r}: {', '.join(places)}" for (name, value), places in
        unexplained.items())
    # An explanation for what is no longer there goes too.
    assert not set(explained) - set(twice), set(explained) - set(twice)


def write_package(root: Path, files: dict) -> Path:
    package = root / "package"
    package.mkdir()
    for name, text in files.items():
        (package / name).write_text(textwrap.dedent(text))
    return package


def test_a_planted_duplicate_is_found_and_a_shared_constant_is_not(tmp_path):
    package = write_package(tmp_path, {
        "settings.py": """
            DEFAULT_STRIDE = 128

            class AfterTraining(Settings):
                no_plots: bool = setting(False, "skip the pictures")

            class PretrainOptions(Settings):
                resume: bool = setting(False, "go on")
                no_plots: bool = setting(False, "skip the pictures")

            class FinetuneConfig(Settings):
                stride: int = setting(128, "tokens between windows")
                max_len: int = setting(DEFAULT_STRIDE, "a constant, not a literal")
                data: str = setting("", "not given")
            """,
        "tasks.py": """
            class Task:
                def __init__(self, data="", stride: int = 128, *, max_len=128, resume=True,
                             no_plots=False):
                    pass
            """})
    assert declared_twice(package) == {
        ("no_plots", False): ["package/settings.py:5", "package/settings.py:9"],
        ("stride", 128): ["package/settings.py:12", "package/tasks.py:3"]}


def test_one_constant_in_both_places_declares_it_once(tmp_path):
    package = write_package(tmp_path, {
        "settings.py": """
            from tasks import DEFAULT_STRIDE

            class FinetuneConfig(Settings):
                stride: int = setting(DEFAULT_STRIDE, "tokens between windows")
            """,
        "tasks.py": """
            DEFAULT_STRIDE = 128

            def windows(stride=DEFAULT_STRIDE, other=128):
                pass
            """})
    assert declared_twice(package) == {}
