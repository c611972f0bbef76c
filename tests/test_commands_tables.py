"""scripts/commands_tables.py: docs/commands.md's flag tables against the commands' parsers."""
import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("commands_tables",
                                              REPO / "scripts/commands_tables.py")
commands_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(commands_tables)

PREDICT = ("| flag | default | meaning |\n|---|---|---|\n"
           "| `input` | - | the inputs, one a line as the model's task reads them (a sentence, or "
           "two separated by a tab; docs/tasks.md has each task's), or - for standard input |\n"
           "| `--model-dir` | visual/models/bert_mrpc | fine-tuned model |\n")


def test_every_flag_table_in_the_docs_matches_its_parser():
    assert commands_tables.update(REPO, write=False) == []


def test_a_table_is_the_flags_of_its_command_as_help_states_them():
    assert commands_tables.render(commands_tables.command_parser("bert predict")) == PREDICT
    generate = commands_tables.render(commands_tables.command_parser("gpt generate"))
    rows = {row.split(" | ")[0][2:]: row.split(" | ")[1] for row in generate.splitlines()[2:]}
    assert rows == {"`--prompt`": "required", "`--max-new-tokens`": "20", "`--sample`": "off",
                    "`--top-k`": "all", "`--temperature`": "1.0", "`--seed`": "0",
                    "`--model-dir`": "visual/models/gpt"}
    heads = commands_tables.render(commands_tables.command_parser("bert heads"))
    assert "| `--pruned-dir` | \\<model-dir>_pruned\\<percent> |" in heads  # not an HTML tag


def make_repo(root: Path, body: str, name: str = "bert predict") -> Path:
    (root / "docs").mkdir(parents=True)
    (root / "README.md").write_text("# x\n")
    page = root / "docs" / "commands.md"
    page.write_text(f"Before.\n<!-- flags: {name} -->\n{body}<!-- /flags -->\nAfter.\n")
    return page


def test_a_table_that_differs_from_its_parser_is_named_then_rewritten(tmp_path):
    stale = PREDICT.replace("visual/models/bert_mrpc", "visual/models/bert")
    page = make_repo(tmp_path, stale)
    assert commands_tables.main(["--check"], root=tmp_path) == 1
    assert commands_tables.update(tmp_path, write=False) == [
        "docs/commands.md: the flags of 'bert predict' differ from its parser (run python "
        "scripts/commands_tables.py)"]
    assert commands_tables.main([], root=tmp_path) == 0
    assert page.read_text() == (f"Before.\n<!-- flags: bert predict -->\n{PREDICT}"
                                f"<!-- /flags -->\nAfter.\n")
    assert commands_tables.update(tmp_path, write=False) == []


def test_a_marker_naming_no_command_is_named(tmp_path):
    for name in ("bert train-me", "baseline extra", "nobody"):
        page = make_repo(tmp_path / name.replace(" ", "_"), "", name)
        assert commands_tables.update(page.parents[1], write=True) == [
            f"docs/commands.md: marks the flags of '{name}', which is no command"]
