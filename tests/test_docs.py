"""The user docs hold together: pages short enough to read, links that land, commands that parse.

Every page under docs/ stays within 350 lines and README.md within 200; every relative link
and anchor in them (and in benchmarks/, whose logs they link to) resolves; every ``python -m nlp_tutorials...`` command in a ```bash block
parses with the package's own argparse parsers (built, never run); and every ``$NAME`` a
command uses is set on that page or in README.md.
"""
import contextlib
import functools
import io
import re
import shlex
from pathlib import Path

import pytest

from nlp_tutorials.cli import build_parser

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
