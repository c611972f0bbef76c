"""The user docs hold together: pages short enough to read, links that land, commands that parse
and read only what a user can have.

Every page under docs/ stays within 350 lines and README.md within 200; every relative link
and anchor in them (and in benchmarks/, whose logs they link to) resolves; every
``python -m nlp_tutorials...`` command in a ```bash block parses with the package's own argparse
parsers (built, never run); and every ``$NAME`` a command uses is set on that page or in
README.md.

Every path such a command reads (its input flags, by the runs of nlp_tutorials/cli/runs.py:
``--data``, ``--train``, ``--init-from``, the ``--model-dir`` of a command that loads a model,
..., and a file fed with ``<``) is one of:

- a placeholder, ``$NAME`` or a path starting with one, set on the page or in README.md and
  spelled as docs/tasks.md#placeholders lists it (``"$GLUE/RTE"``);
- a path of the repository (``data/MRPC``; a glob matching one);
- what an earlier command of the same page writes, or a path inside it: an output flag
  (``--output-dir``, ``--output``, ``train``'s ``--model-dir``), the default output of one not
  given (``finetune``: visual/models/bert_TASK; ``train``: the attention pickle), a shell
  redirection's file or a folder ``mkdir`` makes.

Anything else is named as ``page:line: command flag value (why)``. A placeholder of
docs/tasks.md#placeholders is set at most once a page, on a line whose comment says what it
holds.
"""
import contextlib
import dataclasses
import functools
import io
import itertools
import re
import shlex
from pathlib import Path

import pytest

from nlp_tutorials.cli import build_parser
from nlp_tutorials.cli.commands import FAMILIES
from nlp_tutorials.cli.flags import flag_names
from nlp_tutorials.cli.settings import RESULTS_DIR, default_pickle
from nlp_tutorials.training.config import finetuned_dir

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
# The benchmarks' pages hold the dated run logs the user pages link to; their links must land too.
LINKED_PAGES = [*PAGES, *sorted((ROOT / "benchmarks").glob("*.md"))]
MOST_LINES = {README: 200}  # every other page: PAGE_LINES
PAGE_LINES = 350
# Variables a shell sets itself, which no page needs to define.
SHELL_VARIABLES = {"PWD", "HOME", "PATH"}
SHELL_OPERATORS = {"|", "||", "&&", ";", "&"}

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)|<img [^>]*src=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*```(\w*)")
MODULE = re.compile(r"^nlp_tutorials\.(bert|gpt|transformer|baseline)$")
VARIABLE_USE = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
VARIABLE_SET = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


def page_name(path: Path, root: Path = ROOT) -> str:
    return str(path.relative_to(root))


def blocks(text: str):
    """(line number, line, fence language or None outside a fence) for every line."""
    language = None
    for number, line in enumerate(text.splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            language = fence.group(1) if language is None else None
            continue
        yield number, line, language


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: links reduced to their text, lower case, punctuation
    other than ``-`` and ``_`` dropped, each space a ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@functools.cache
def anchors(path: Path) -> frozenset:
    """The anchors of a markdown file's headings (a repeated one numbered -1, -2, ...)."""
    seen, found = {}, set()
    for _, line, language in blocks(path.read_text(encoding="utf-8")):
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if language is None and heading:
            base = slug(heading.group(1))
            found.add(f"{base}-{seen[base]}" if base in seen else base)
            seen[base] = seen.get(base, 0) + 1
    return frozenset(found)


def broken_links(path: Path, root: Path = ROOT) -> list:
    """'page:line: target (why)' for each relative link of ``path`` that lands nowhere; pages
    are named from ``root``."""
    broken = []
    for number, line, language in blocks(path.read_text(encoding="utf-8")):
        if language is not None:
            continue
        prose = re.sub(r"`[^`]*`", "", line)
        for match in LINK.finditer(prose):
            target = match.group(1) or match.group(2)
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            landing = (path.parent / file_part).resolve() if file_part else path
            where = f"{page_name(path, root)}:{number}: {target}"
            if not landing.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and landing.suffix == ".md" and anchor not in anchors(landing):
                broken.append(f"{where} (no such heading)")
    return broken


def bash_commands(path: Path):
    """(line number, command) for each command of a ```bash block: lines ending in a backslash
    and quotes left open run on into the next line, as in the shell."""
    pending, start = "", None
    for number, line, language in blocks(path.read_text(encoding="utf-8")):
        if language != "bash":
            continue
        start = start or number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        pending += line
        try:
            words(pending)
        except ValueError:  # a quote still open
            pending += "\n"
            continue
        yield start, pending
        pending, start = "", None


def words(command: str) -> list:
    """The command's words as the shell splits them, operators as words, comments dropped."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def package_calls(command: str):
    """(module, arguments) of each ``python -m nlp_tutorials.<module> ...`` in ``command``."""
    segment = []
    for word in [*words(command), ";"]:
        if word not in SHELL_OPERATORS:
            segment.append(word)
            continue
        for i in range(len(segment) - 2):
            found = MODULE.match(segment[i + 2])
            if segment[i] == "python" and segment[i + 1] == "-m" and found:
                rest = segment[i + 3:]
                cut = next((j for j, w in enumerate(rest) if w in {">", ">>", "<"}), len(rest))
                yield found.group(1), rest[:cut]
                break
        segment = []


@functools.cache
def parser(module: str):
    return build_parser(module)


def parse_error(module: str, arguments: list):
    """argparse's one line for ``arguments``, or None when they parse."""
    told = io.StringIO()
    with contextlib.redirect_stderr(told), contextlib.redirect_stdout(io.StringIO()):
        try:
            parser(module).parse_args(arguments)
        except SystemExit as stop:
            return told.getvalue().strip() or f"exit status {stop.code}"
    return None


def defined_variables(path: Path) -> set:
    names = set()
    for _, line, language in blocks(path.read_text(encoding="utf-8")):
        found = VARIABLE_SET.match(line)
        if language == "bash" and found:
            names.add(found.group(1))
    return names


def used_variables(command: str) -> set:
    """Names a command expands: ``$NAME`` outside single quotes."""
    unquoted = re.sub(r"'[^']*'", "", command)
    return set(VARIABLE_USE.findall(unquoted))


# The paths each command reads and writes, by argparse dest: those its run names to
# ``writing(outputs, reads)`` in nlp_tutorials/cli/runs.py, and the model folder that the runs
# naming none there (predict, heads, generate, translate) load; ``-`` is standard input.
ATTENTION_IO = {"export": (("model_dir",), ("output",)),
                "plot": (("input",), ("output_dir",)),
                "explore": (("input", "model_dir", "importance", "data"), ("output",))}
PRETRAINING_IO = {"train": (("data", "init_from", "corpus"), ("model_dir",)),
                  "prepare": (("corpus", "tokenizer_from"), ("output",)), **ATTENTION_IO}
COMMAND_IO = {
    **{(family, name): io for family in ("bert", "gpt") for name, io in PRETRAINING_IO.items()},
    **{("transformer", name): io for name, io in ATTENTION_IO.items()},
    ("bert", "finetune"): (("model_dir", "init_from", "data", "train", "dev", "test",
                            "search_space"), ("output_dir",)),
    ("bert", "evaluate"): (("model_dir", "data", "file"), ("output_dir",)),
    ("bert", "predict"): (("model_dir", "input"), ()),
    ("bert", "heads"): (("model_dir", "data"), ("output_dir", "pruned_dir")),
    ("bert", "export-model"): (("model_dir",), ("output",)),
    ("bert", "split-squad"): (("input", "without"), ("output",)),
    ("gpt", "generate"): (("model_dir",), ()),
    ("transformer", "train"): ((), ("model_dir",)),
    ("transformer", "translate"): (("model_dir",), ()),
    ("baseline", ""): (("data", "train", "dev", "test"), ()),
}
# Shell words that write a path: a redirection's target, and the folders mkdir makes.
SHELL_WRITES = {">", ">>"}


def command_io(module: str, arguments: list):
    """(command name, {flag: path read}, [paths written]) of a parsing package command.

    An output flag not given counts with its default: ``finetune``'s visual/models/bert_TASK,
    ``heads --prune``'s <model-dir>_pruned<percent>, and the attention pickle and pictures
    ``train`` writes after training unless ``--no-plots``."""
    family = FAMILIES[module]
    args = parser(module).parse_args(arguments)
    name = "" if family.single else args.command
    command = family.command(name)
    reads, writes = COMMAND_IO[module, name]
    fields = {field.name: field for settings in command.settings
              for field in dataclasses.fields(settings)}
    given = vars(args)
    read = {(flag_names(fields[dest]) or [dest])[0]: given[dest]
            for dest in reads if given.get(dest) not in ("-", "", None)}
    written = [given.get(dest, command.defaults.get(dest, fields[dest].default))
               for dest in writes]
    if name == "finetune" and "output_dir" not in given:
        written.append(finetuned_dir(given.get("task", fields["task"].default)))
    if name == "heads" and "prune" in given and "pruned_dir" not in given:
        # As nlp_tutorials/analysis/bertology.py names it.
        model_dir = Path(given.get("model_dir", fields["model_dir"].default))
        written.append(f"{model_dir}_pruned{round(100 * given['prune'])}")
    if name == "train" and not given.get("no_plots"):
        written += [default_pickle(module), RESULTS_DIR]
    return name, read, [path for path in written if path]


def shell_outputs(command: str) -> list:
    """The paths the shell writes in ``command``: ``> FILE``, ``>> FILE``, ``mkdir DIR``."""
    found, said = [], words(command)
    for before, word in zip(said, said[1:]):
        if before in SHELL_WRITES:
            found.append(word)
    for i, word in enumerate(said):
        if word == "mkdir":
            rest = itertools.takewhile(lambda w: w not in SHELL_OPERATORS, said[i + 1:])
            found += [w for w in rest if not w.startswith("-")]
    return found


def tidy(path: str) -> str:
    """``path`` as an output is compared: no leading ``./``, no trailing ``/``."""
    return re.sub(r"^(\./)+", "", str(path)).rstrip("/")


def explained(value: str, placeholders: set, produced: list, root: Path) -> bool:
    """Whether an input path is a placeholder (or inside one), is in the repository, or lies
    in what an earlier command wrote."""
    placeholder = VARIABLE_USE.match(value)
    if placeholder:
        return placeholder.group(1) in placeholders
    value = tidy(value)
    in_repository = (any(root.glob(value)) if re.search(r"[*?[]", value)
                     else (root / value).exists())
    return in_repository or any(value == out or value.startswith(out + "/") for out in produced)


def unexplained_inputs(path: Path, placeholders: set, root: Path = ROOT) -> list:
    """'page:line: command flag value (why)' for each path a package command of the page
    reads (its input flags, and a file it is fed with ``<``) that is no placeholder set on the
    page or in README, no path of the repository, and nothing an earlier command of the page
    writes."""
    produced, unexplained = [], []
    for number, command in bash_commands(path):
        said = words(command)
        fed = [after for before, after in zip(said, said[1:]) if before == "<"]
        for module, arguments in package_calls(command):
            if parse_error(module, arguments):
                continue  # test_every_package_command_in_a_bash_block_parses names it
            name, read, written = command_io(module, arguments)
            for flag, value in [*read.items(), *(("<", file) for file in fed)]:
                if not explained(value, placeholders, produced, root):
                    why = ("a placeholder set nowhere" if value.startswith("$") else
                           "nothing in the repository or an earlier command writes it")
                    label = " ".join(word for word in (module, name, flag, value) if word)
                    unexplained.append(f"{page_name(path, root)}:{number}: {label} ({why})")
            produced += [tidy(out) for out in written]
        produced += [tidy(out) for out in shell_outputs(command)]
    return unexplained


@pytest.mark.parametrize("path", PAGES, ids=page_name)
def test_each_page_is_short_enough_to_read(path):
    most = MOST_LINES.get(path, PAGE_LINES)
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= most, f"{page_name(path)} has {lines} lines, at most {most}"


def test_every_relative_link_and_anchor_lands():
    broken = [entry for path in LINKED_PAGES for entry in broken_links(path)]
    assert not broken, "\n".join(broken)


def test_every_package_command_in_a_bash_block_parses():
    failures, parsed = [], 0
    for path in PAGES:
        for number, command in bash_commands(path):
            for module, arguments in package_calls(command):
                parsed += 1
                error = parse_error(module, arguments)
                if error:
                    failures.append(f"{page_name(path)}:{number}: {command.strip()}\n  {error}")
    assert not failures, "\n".join(failures)
    assert parsed >= 50  # the pages' commands were found, not skipped


def test_every_variable_a_command_uses_is_set_on_its_page_or_in_the_readme():
    readme = defined_variables(README)
    missing = []
    for path in PAGES:
        known = readme | defined_variables(path) | SHELL_VARIABLES
        for number, command in bash_commands(path):
            for name in sorted(used_variables(command) - known):
                missing.append(f"{page_name(path)}:{number}: ${name} is set nowhere")
    assert not missing, "\n".join(missing)


def test_every_path_a_command_reads_is_a_placeholder_in_the_repository_or_written_before():
    readme = defined_variables(README) - SHELL_VARIABLES
    unexplained = [entry for path in PAGES
                   for entry in unexplained_inputs(path, readme | defined_variables(path))]
    assert not unexplained, "\n".join(unexplained)


def listed_placeholders() -> set:
    """The placeholders docs/tasks.md#placeholders names."""
    text = (ROOT / "docs" / "tasks.md").read_text(encoding="utf-8")
    section = text.split("\n## Placeholders\n")[1].split("\n## ")[0]
    return set(re.findall(r"`\$([A-Z_]+)`", section))


def placeholder_faults(path: Path, names: set, root: Path = ROOT) -> list:
    """'page:line: $NAME ...' for each placeholder of ``names`` set again on the page or set
    without a comment saying what it holds."""
    faults, seen = [], set()
    for number, line, language in blocks(path.read_text(encoding="utf-8")):
        setting = VARIABLE_SET.match(line)
        if language != "bash" or not setting or setting.group(1) not in names:
            continue
        where = f"{page_name(path, root)}:{number}: ${setting.group(1)}"
        if setting.group(1) in seen:
            faults.append(f"{where} set again")
        if not re.search(r"\s#", line):
            faults.append(f"{where} set without a comment")
        seen.add(setting.group(1))
    return faults


def test_each_placeholder_is_set_at_most_once_a_page_with_a_comment_saying_what_it_holds():
    listed = listed_placeholders()
    assert {"GLUE", "CONLL", "SQUAD", "MINILM", "CORPUS"} <= listed
    faults = [fault for path in PAGES for fault in placeholder_faults(path, listed)]
    assert not faults, "\n".join(faults)


def test_the_placeholders_of_inputs_are_those_tasks_md_lists():
    """One spelling a kind of data: each placeholder an input starts with is one of
    docs/tasks.md#placeholders."""
    listed = listed_placeholders()
    strays = []
    for path in PAGES:
        for number, command in bash_commands(path):
            for module, arguments in package_calls(command):
                if parse_error(module, arguments):
                    continue
                for flag, value in command_io(module, arguments)[1].items():
                    name = VARIABLE_USE.match(value)
                    if name and name.group(1) not in listed:
                        strays.append(f"{page_name(path)}:{number}: {flag} {value}")
    assert not strays, "placeholders docs/tasks.md#placeholders does not list:\n" + \
        "\n".join(strays)


# The checks themselves, on cases worked by hand.

def test_anchors_follow_githubs_rule():
    assert slug("`bert train` and `gpt train`") == "bert-train-and-gpt-train"
    assert slug("The suite's time") == "the-suites-time"
    assert slug("SQuAD v2.0 from a SQuAD v1.1 model") == "squad-v20-from-a-squad-v11-model"
    assert slug("Fine-tuning on the tasks (docs/results.md)") == \
        "fine-tuning-on-the-tasks-docsresultsmd"
    assert slug("hf_finetune_reference.py") == "hf_finetune_referencepy"


def test_a_link_to_a_missing_file_or_heading_is_named(tmp_path):
    (tmp_path / "other.md").write_text("# Title\n\n## A part\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text("[fine](other.md#a-part) [gone](missing.md)\n"
                    "```bash\n# [not a link](nowhere.md)\n```\n"
                    "[no heading](other.md#b-part) `[code](nowhere.md)`\n", encoding="utf-8")
    assert broken_links(page, tmp_path) == ["page.md:1: missing.md (no such file)",
                                            "page.md:5: other.md#b-part (no such heading)"]


def test_commands_are_found_through_pipes_and_continuations_and_bad_flags_are_caught():
    command = ('echo "a film" | python -m nlp_tutorials.bert predict --model-dir m '
               '&& python -m nlp_tutorials.baseline --task rte --data glue/RTE  # a comment')
    assert list(package_calls(command)) == [
        ("bert", ["predict", "--model-dir", "m"]),
        ("baseline", ["--task", "rte", "--data", "glue/RTE"])]
    assert parse_error("bert", ["finetune", "--task", "rte", "--epochs", "3"]) is None
    assert "--no-such-flag" in parse_error("bert", ["finetune", "--no-such-flag"])
    assert "invalid choice" in parse_error("bert", ["fine-tune"])
    assert used_variables('x --init-from "$MINILM" -c \'print($NOT_EXPANDED)\'') == {"MINILM"}


def test_an_input_nothing_holds_or_writes_is_named_and_placeholders_and_outputs_are_not(tmp_path):
    (tmp_path / "data" / "MRPC").mkdir(parents=True)
    page = tmp_path / "page.md"
    page.write_text(
        "```bash\n"
        "GLUE=~/data/glue   # GLUE's task folders\n"
        "python -m nlp_tutorials.bert finetune --task rte --data \"$GLUE/RTE\"\n"
        "python -m nlp_tutorials.bert evaluate --model-dir visual/models/bert_rte --data glue/RTE\n"
        "python -m nlp_tutorials.bert split-squad --input \"$SQUAD/dev-v1.1.json\" \\\n"
        "    --train-articles 3 --output split\n"
        "python -m nlp_tutorials.bert finetune --task squad --train ./split/train-v1.1.json \\\n"
        "    --init-from data/MRPC --output-dir runs/squad\n"
        "python -m nlp_tutorials.bert heads --model-dir runs/squad --prune 0.5\n"
        "python -m nlp_tutorials.bert predict --model-dir runs/squad_pruned50 < pairs.tsv\n"
        "echo '{}' > space.json\n"
        "python -m nlp_tutorials.bert finetune --search 2 --search-space space.json\n"
        "python -m nlp_tutorials.bert explore --model-dir visual/models/bert\n"
        "python -m nlp_tutorials.bert prepare --corpus 'data/*' --output shards\n"
        "python -m nlp_tutorials.bert prepare --corpus 'books/*.txt' --output more\n"
        "python -m nlp_tutorials.bert train --data shards\n"
        "python -m nlp_tutorials.bert explore --input visual/tmp/bert_attention_matrix.pkl\n"
        "```\n", encoding="utf-8")
    assert unexplained_inputs(page, defined_variables(page), tmp_path) == [
        "page.md:4: bert evaluate --data glue/RTE "
        "(nothing in the repository or an earlier command writes it)",
        "page.md:5: bert split-squad --input $SQUAD/dev-v1.1.json (a placeholder set nowhere)",
        "page.md:10: bert predict < pairs.tsv "
        "(nothing in the repository or an earlier command writes it)",
        "page.md:13: bert explore --model-dir visual/models/bert "
        "(nothing in the repository or an earlier command writes it)",
        "page.md:15: bert prepare --corpus books/*.txt "
        "(nothing in the repository or an earlier command writes it)"]


def test_a_command_reads_its_input_flags_and_writes_its_outputs_or_their_defaults():
    commands = {(module, command.name): command for module, family in FAMILIES.items()
                for command in family.commands}
    assert set(COMMAND_IO) == set(commands)  # a new command must say what it reads and writes
    for key, (reads, writes) in COMMAND_IO.items():
        fields = {field.name for settings in commands[key].settings
                  for field in dataclasses.fields(settings)}
        assert {*reads, *writes} <= fields, key
    assert command_io("bert", ["finetune", "--task", "rte", "--data", "d", "--dev", "-"]) == (
        "finetune", {"--data": "d"}, ["visual/models/bert_rte"])
    assert command_io("bert", ["evaluate", "--model-dir", "m", "--file", "f",
                               "--output-dir", "o"]) == (
        "evaluate", {"--model-dir": "m", "--file": "f"}, ["o"])
    assert command_io("gpt", ["train", "--no-plots"]) == ("train", {}, ["visual/models/gpt"])
    assert command_io("bert", ["heads", "--model-dir", "m/", "--prune", "0.25"])[2] == [
        "visual/results", "m_pruned25"]
    assert command_io("baseline", ["--task", "rte", "--data-dir", "g"]) == (
        "", {"--data": "g"}, [])
    assert shell_outputs("mkdir -p a b && echo x > c; cat c >> d") == ["c", "d", "a", "b"]


def test_a_placeholder_set_twice_or_without_a_comment_is_named(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("```bash\nGLUE=~/glue   # GLUE's task folders\nGLUE=~/other   # again\n"
                    "SQUAD=~/squad\nX=1\n```\nGLUE=~/outside a block\n", encoding="utf-8")
    assert placeholder_faults(page, {"GLUE", "SQUAD"}, tmp_path) == [
        "page.md:3: $GLUE set again", "page.md:4: $SQUAD set without a comment"]
