"""The flag tables of docs/commands.md, made from the commands' own parsers.

A command's flags, their defaults and what they mean are declared once, with its settings
(:mod:`nlp_tutorials.system.settings`); ``--help`` shows them from there, and so does each table
this script writes between two markers of a markdown file under README.md or docs/::

    <!-- flags: bert train -->
    ... made by this script: never edit it by hand ...
    <!-- /flags -->

The marker names the command as it is typed after ``python -m nlp_tutorials.``: ``bert train``,
``gpt generate``, ``baseline``. A row is one flag of that command's parser, in ``--help``'s
order (``--verbose``, on every command that starts TensorFlow, is left to the prose); the
default is the one its help states. Run from the repository root:

    python scripts/commands_tables.py            # rewrite every table between its markers
    python scripts/commands_tables.py --check    # exit 1 naming each table that differs
"""
import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nlp_tutorials.cli import build_parser  # noqa: E402
from nlp_tutorials.cli.commands import FAMILIES  # noqa: E402

MARKED = re.compile(r"(<!-- flags: (?P<name>[\w -]+?) -->\n)(?P<body>.*?)(<!-- /flags -->)",
                    re.DOTALL)
LEFT_TO_PROSE = {"help", "verbose"}


def command_parser(name: str):
    """The parser of ``name`` ("bert train", "baseline"), or None when there is no such
    command."""
    family, _, command = name.partition(" ")
    if family not in FAMILIES:
        return None
    parser = build_parser(family)
    if FAMILIES[family].single:
        return None if command else parser
    commands = next(action for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction))
    return commands.choices.get(command)


def flag_cell(action) -> str:
    """```--data DIR``` (its other spellings after a comma), or a positional's name."""
    if not action.option_strings:
        return f"`{action.metavar or action.dest}`"
    takes_value = action.nargs != 0
    metavar = f" {action.metavar}" if takes_value and action.metavar else ""
    first, *others = action.option_strings
    return ", ".join([f"`{first}{metavar}`", *(f"`{other}`" for other in others)])


def meaning_and_default(action) -> tuple[str, str]:
    """The help split from the default it ends with: ("optimisation steps", "1000")."""
    text = action.help.replace("%%", "%")
    meaning, said, default = text.rpartition(" (default")
    if not said:
        meaning, default = text, ""
    else:
        default = default.removeprefix(":").strip().removesuffix(")")
    if action.nargs == 0:  # a switch, given or not (--no-swap too: not given, pairs swap)
        default = "off"
    elif action.required:
        default = "required"
    if action.choices and not all(str(choice) in meaning for choice in action.choices):
        meaning += "; one of " + ", ".join(f"`{choice}`" for choice in action.choices)
    return meaning, default or "none"


def cell(text: str) -> str:
    """``text`` as a table cell: a bar, a star or an angle bracket is text, not markdown or
    HTML (``<model-dir>_pruned<percent>``)."""
    return re.sub(r"([|*<])", r"\\\1", text)


def render(parser) -> str:
    """The markdown table of ``parser``'s flags."""
    lines = ["| flag | default | meaning |", "|---|---|---|"]
    for action in parser._actions:
        if action.dest in LEFT_TO_PROSE:
            continue
        meaning, default = meaning_and_default(action)
        lines.append(f"| {flag_cell(action)} | {cell(default)} | {cell(meaning)} |")
    return "\n".join(lines) + "\n"


def markdown_files(root: Path) -> list:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def update(root: Path, write: bool) -> list:
    """Rewrite (``write``) or compare every marked table; return one line per table that
    differs from its command's parser or names no command."""
    problems = []
    for path in markdown_files(root):
        text = path.read_text(encoding="utf-8")

        def fill(match):
            parser = command_parser(match["name"])
            if parser is None:
                problems.append(f"{path.relative_to(root)}: marks the flags of "
                                f"'{match['name']}', which is no command")
                return match[0]
            made = render(parser)
            if match["body"] != made and not write:
                problems.append(f"{path.relative_to(root)}: the flags of '{match['name']}' "
                                f"differ from its parser (run python scripts/commands_tables.py)")
            return match[1] + made + match[4]

        new = MARKED.sub(fill, text)
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    return problems


def main(argv=None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    args = parser.parse_args(argv)
    problems = update(root, write=not args.check)
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
