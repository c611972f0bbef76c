"""The package's folders are its architecture: imports run one way, and nothing cycles.

Read from the source with ``ast`` (nothing is imported), so a new upward import fails here
whatever the import order at run time.
"""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "nlp_tutorials"

# Lowest first; a module may import from its own folder and from folders listed before it.
LAYERS = ["system", "speed", "text", "models", "sources", "tasks", "finetuned", "training",
          "analysis", "serving", "cli"]
# The names users import and run: they sit on top and only re-export or launch.
TOP = {"bert", "gpt", "transformer", "config", "heads", "tokenization", "baseline", "__init__"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_imports(path: Path) -> set[str]:
    """Every ``nlp_tutorials...`` module the file imports, at any depth of the code."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "nlp_tutorials":
                found.update(f"nlp_tutorials.{alias.name}" for alias in node.names)
            elif node.module.startswith("nlp_tutorials."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("nlp_tutorials."))
    return found


def folder_of(module: str) -> str:
    """The first name under the package: a layer folder or a public name at the top."""
    return module.split(".")[1] if "." in module else "__init__"


def graph() -> dict:
    return {module_name(path): package_imports(path) for path in PACKAGE.rglob("*.py")}


def test_every_module_sits_in_a_layer_folder_or_is_a_public_name():
    for path in PACKAGE.rglob("*.py"):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) == 1:
            assert path.stem in TOP, f"{relative}: a module at the top that is not a public name"
        else:
            assert relative.parts[0] in LAYERS, f"{relative}: a folder outside the layers"


def test_imports_run_only_downward():
    upward = []
    for module, imports in graph().items():
        if module == "nlp_tutorials" or folder_of(module) in TOP:
            continue
        rank = LAYERS.index(folder_of(module))
        for target in imports:
            target_folder = folder_of(target)
            if target_folder in TOP or LAYERS.index(target_folder) > rank:
                upward.append(f"{module} -> {target}")
    assert not upward, "imports that run upward:\n" + "\n".join(sorted(upward))


def test_nothing_below_the_command_line_imports_it():
    for module, imports in graph().items():
        if not module.startswith("nlp_tutorials.cli") and folder_of(module) not in TOP:
            assert not any(t.startswith("nlp_tutorials.cli") for t in imports), module


def test_serving_and_the_explorer_load_fine_tuned_models_without_training():
    """A fine-tuned model is read through ``finetuned/``, never through the code that trained it.

    The explorer also draws a pre-training checkpoint and the date Transformer, each read back
    by the module that writes it: those two, and nothing else of ``training/``.
    """
    readers_of_other_models = {"nlp_tutorials.training.checkpoints",
                               "nlp_tutorials.training.seq2seq"}
    reaching = []
    for folder, allowed in ((PACKAGE / "serving", set()),
                            (PACKAGE / "analysis" / "explorer", readers_of_other_models)):
        for path in folder.rglob("*.py"):
            reaching += [f"{module_name(path)} -> {target}" for target in package_imports(path)
                         if (target == "nlp_tutorials.training"
                             or target.startswith("nlp_tutorials.training."))
                         and target not in allowed]
    assert not reaching, "imports of training/:\n" + "\n".join(sorted(reaching))


def test_no_module_over_450_lines_and_no_function_over_60():
    """A module longer than 450 lines holds more than one job; a function longer than 60 lines
    more than one step. Either is split along its seam (docs/design.md)."""
    too_long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        if len(source.splitlines()) > 450:
            too_long.append(f"{path.relative_to(PACKAGE)}: {len(source.splitlines())} lines")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > 60:
                    too_long.append(f"{path.relative_to(PACKAGE)}: {node.name}, {lines} lines")
    assert not too_long, "\n".join(too_long)


def test_the_lesson_files_stay_short():
    for name in ("masks", "transformer", "gpt", "bert", "task_heads"):
        lines = len((PACKAGE / "models" / f"{name}.py").read_text().splitlines())
        assert lines <= 400, f"models/{name}.py has {lines} lines; the lesson files stay under 400"


def test_no_import_cycle():
    imports = graph()
    known = set(imports)

    def resolve(target):  # "from nlp_tutorials.training import checkpoints" names a module
        return target if target in known else target.rsplit(".", 1)[0]

    edges = {m: {resolve(t) for t in ts if resolve(t) in known and resolve(t) != m}
             for m, ts in imports.items()}
    state = {}

    def visit(module, trail):
        state[module] = "open"
        for target in edges[module]:
            if state.get(target) == "open":
                raise AssertionError("import cycle: " + " -> ".join(trail + [module, target]))
            if target not in state:
                visit(target, trail + [module])
        state[module] = "done"

    for module in edges:
        if module not in state:
            visit(module, [])
