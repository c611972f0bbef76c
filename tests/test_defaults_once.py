"""Each default is declared once: a flag's default is written where its settings field is, and
nowhere else with the same value by hand.

Read from the source with ``ast``, as tests/test_layout.py reads the imports. A flag is a field
made with ``setting(default, ...)`` (:mod:`nlp_tutorials.system.settings`). Two things restate
one, so that changing it in one place would leave the other behind:

- the same flag, with the same literal default, in two settings classes (``no_plots`` in
  ``train``'s and ``transformer train``'s options, where one class can inherit the other's);
- a function parameter of the flag's name whose literal default is the flag's
  (``Task(stride=128)`` beside ``--stride``'s 128).

A shared constant (``stride=DEFAULT_STRIDE`` in both places) declares it once; a literal
beside it (``stride=128`` where ``--stride`` is ``DEFAULT_STRIDE``) declares it again.
"Not given" (None, "", ()) is no default to keep in step, and is not compared; nor is a
parameter that is off unless asked (False), which says no more than a switch's absence.
"""
import ast
import shutil
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


class Declared(NamedTuple):
    name: str
    value: object
    where: str  # path:line
    source: str  # the constant it names, else where: one source is one declaration


def literal(node):
    """The value of a literal expression, or Ellipsis for anything else (a name, a call)."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return ...


def module_constants(trees: dict) -> dict:
    """{NAME: value} of every module-level ``NAME = <literal>`` under the root, but names
    given different values in different modules."""
    found = {}
    for tree in trees.values():
        for node in tree.body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)):
                found.setdefault(node.targets[0].id, []).append(literal(node.value))
    return {name: values[0] for name, values in found.items()
            if values[0] is not ... and all(value == values[0] for value in values)}


def declared(name: str, node, where: str, constants: dict) -> Declared:
    """What ``node`` gives ``name``: a literal (its own source), a constant (the source its
    name), or anything else (Ellipsis, left out)."""
    if isinstance(node, ast.Name) and node.id in constants:
        return Declared(name, constants[node.id], where, node.id)
    return Declared(name, literal(node), where, where)


def setting_default(call) -> object:
    """The default node of a ``setting(...)`` call (first argument or ``default=``), or None
    when ``call`` is not one or gives none."""
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == "setting"):
        return None
    given = call.args[:1] + [keyword.value for keyword in call.keywords
                             if keyword.arg == "default"]
    return given[0] if given else None


def parameter_defaults(function) -> list:
    """(parameter, its default node) of each parameter of ``function`` with a default."""
    arguments = function.args.posonlyargs + function.args.args
    pairs = list(zip(arguments[len(arguments) - len(function.args.defaults):],
                     function.args.defaults))
    return pairs + [(argument, default) for argument, default
                    in zip(function.args.kwonlyargs, function.args.kw_defaults) if default]


def declarations(root: Path) -> tuple[list, list]:
    """(flags, function parameters) of the ``.py`` files under ``root`` declared with a
    literal default or a module constant holding one."""
    trees = {path.relative_to(root.parent): ast.parse(path.read_text(encoding="utf-8"))
             for path in sorted(root.rglob("*.py"))}
    constants, flags, parameters = module_constants(trees), [], []
    for shown, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                flags += [declared(field.target.id, setting_default(field.value),
                                   f"{shown}:{field.lineno}", constants)
                          for field in node.body if isinstance(field, ast.AnnAssign)
                          and isinstance(field.target, ast.Name)
                          and setting_default(field.value) is not None]
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                parameters += [declared(argument.arg, default, f"{shown}:{default.lineno}",
                                        constants)
                               for argument, default in parameter_defaults(node)]
    return kept(flags, NOT_GIVEN), kept(parameters, OFF)


def kept(found: list, left_out: tuple) -> list:
    """The declarations of ``found`` with a value, none of ``left_out``."""
    return [one for one in found if one.value is not ... and not any(
        one.value == value and type(one.value) is type(value) for value in left_out)]


def same(one: Declared, other: Declared) -> bool:
    """The same name and value (True is not 1)."""
    return (one.name, one.value, type(one.value)) == (other.name, other.value, type(other.value))


def declared_twice(root: Path) -> dict:
    """{(name, value): the places declaring it} for each flag's default that has two sources
    or more: two literals, or a literal and a constant."""
    flags, parameters = declarations(root)
    twice = {}
    for flag in flags:
        alike = [one for one in flags + parameters if same(flag, one)]
        if len({one.source for one in alike}) > 1:
            twice[(flag.name, flag.value)] = sorted({one.where for one in alike})
    return twice


def test_each_default_is_declared_once():
    twice = declared_twice(PACKAGE)
    explained = DIFFERENT_SETTINGS
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


def test_planted_duplicates_are_found_a_literal_beside_a_constant_too(tmp_path):
    package = write_package(tmp_path, {
        "settings.py": """
            DEFAULT_MAX_LEN = 128

            class AfterTraining(Settings):
                no_plots: bool = setting(False, "skip the pictures")

            class PretrainOptions(Settings):
                resume: bool = setting(False, "go on")
                no_plots: bool = setting(False, "skip the pictures")

            class FinetuneConfig(Settings):
                stride: int = setting(128, "tokens between windows")
                max_len: int = setting(DEFAULT_MAX_LEN, "a constant, restated below")
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
        ("stride", 128): ["package/settings.py:12", "package/tasks.py:3"],
        ("max_len", 128): ["package/settings.py:13", "package/tasks.py:3"]}


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


def test_the_package_with_stride_restated_in_task_is_caught(tmp_path):
    """The duplicate this check was written for, planted back into a copy of the package."""
    copy = tmp_path / "nlp_tutorials"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = copy / "tasks" / "base.py"
    text = base.read_text(encoding="utf-8")
    assert "stride: int = DEFAULT_STRIDE," in text
    base.write_text(text.replace("stride: int = DEFAULT_STRIDE,", "stride: int = 128,"),
                    encoding="utf-8")
    places = declared_twice(copy)[("stride", 128)]
    assert [place.split(":")[0] for place in places] == ["nlp_tutorials/tasks/base.py",
                                                         "nlp_tutorials/training/config.py"]
