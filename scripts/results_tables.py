"""The documentation's results tables, made from the results files under benchmarks/results/.

A table is a folder, ``benchmarks/results/<table>/``: ``table.json`` names its columns, and each
other ``*.json`` file is one row, a run's or a transcribed one's (benchmarks/README.md, "Results
files", shows one). A markdown file under README.md or docs/ shows a table between two markers,
wherever it stands::

    <!-- results-table: tasks -->
    ... made by this script: never edit it by hand ...
    <!-- /results-table -->

Run from the repository root:

    python scripts/results_tables.py                 # rewrite every table between its markers
    python scripts/results_tables.py --check         # exit 1 naming each table that differs
    python scripts/results_tables.py add OUT/results.json --table tasks --row cola \\
        [--cell "task=CoLA" ...] [--figure "wall=17 min" ...]   # a finetune run's results.json

``add`` writes ``benchmarks/results/<table>/<row>.json`` from the run's own results.json (its
command, date, machine, revision, and each score's mean ± std, as ``{accuracy}``, with the
seeds' values as ``{accuracy_seeds}``), keeping the cells of a row that exists, then rewrites
the tables. A cell's text may name the row's figures in braces: ``**{mcc}**``.
"""
import argparse
import json
import re
import string
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nlp_tutorials.system.errors import UserError  # noqa: E402

RESULTS_DIR = Path("benchmarks/results")
TABLE_FILE = "table.json"
MACHINE_KEYS = string.ascii_uppercase  # a table's machines, A, B, ..., in order of appearance
REQUIRED = ("cells", "command", "date", "machine")  # a run states the last three
MARKED = re.compile(r"(<!-- results-table: (?P<name>[\w-]+) -->\n)(?P<body>.*?)"
                    r"(<!-- /results-table -->)", re.DOTALL)


def read_json(path: Path, root: Path) -> dict:
    """``path``'s JSON object; a file that is not one is one line naming it (from ``root``
    when it lies under it)."""
    shown = path.relative_to(root) if path.is_relative_to(root) else path
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise UserError(f"{shown}: not readable as JSON ({err})") from None
    if not isinstance(found, dict):
        raise UserError(f"{shown}: holds {type(found).__name__}, expected a JSON object")
    return found


def read_row(path: Path, root: Path, columns: list) -> dict:
    """One row's file, checked: a date, a machine, a command and a cell for every column."""
    row, shown = read_json(path, root), path.relative_to(root)
    if row.get("same_run_as"):
        row = same_run(row, shown, root)
    return checked(row, shown, columns)


def checked(row: dict, shown, columns: list) -> dict:
    """``row`` with its cells filled in (``shown``), or one line naming ``shown`` and what
    it lacks."""
    stated(row, shown, REQUIRED)
    missing = [column for column in columns if column not in row["cells"]]
    if missing:
        raise UserError(f"{shown}: no cell for column(s) {', '.join(missing)}")
    try:
        row["shown"] = {column: str(row["cells"][column]).format_map(row.get("figures", {}))
                        for column in columns}
    except (KeyError, IndexError, ValueError) as err:
        raise UserError(f"{shown}: a cell names figure {err}, which \"figures\" lacks") from None
    return row


def stated(row: dict, shown, keys) -> None:
    """One line naming ``shown`` when ``row`` lacks one of ``keys``."""
    for key in keys:
        if row.get(key) in (None, "", {}):
            raise UserError(f'{shown}: no "{key}" (a results file states its {key}; '
                            'write "unknown" where it is not known)')


def same_run(row: dict, shown: Path, root: Path) -> dict:
    """A row that shows a run another file holds: that run's provenance and figures
    (``"same_run_as": "tasks/cola"``), then the row's own cells, figures and, when it is a run
    of its own too, provenance. A list of files joins runs of one date and machine, each run's
    figures under its file's name (``{cola[mcc]}``); a row's own run must share them."""
    names = row["same_run_as"]
    listed = [names] if isinstance(names, str) else names
    runs = [read_same(name, shown, root) for name in listed]
    if len({(str(run["date"])[:10], machine_text(run["machine"]))
            for run in [*runs, *([row] if "date" in row else [])]}) > 1:
        raise UserError(f'{shown}: "same_run_as" joins runs of different dates or machines')
    if isinstance(names, str):
        figures = runs[0].get("figures", {})
    else:
        figures = {Path(name).name: run.get("figures", {}) for name, run in zip(names, runs)}
    joined = {key: value for key, value in runs[0].items()
              if key not in ("cells", "order", "same_run_as")}
    if len(runs) > 1:
        joined["command"] = "; ".join(run.get("command", "unknown") for run in runs)
    return {**joined, **row, "figures": {**figures, **row.get("figures", {})}}


def read_same(name: str, shown: Path, root: Path) -> dict:
    """The results file ``same_run_as`` names (its own ``same_run_as`` followed), with its
    provenance checked."""
    other = root / RESULTS_DIR / f"{name}.json"
    if not other.is_file():
        raise UserError(f'{shown}: "same_run_as" names {other.relative_to(root)}, which is absent')
    run = read_json(other, root)
    if run.get("same_run_as"):
        run = same_run(run, other.relative_to(root), root)
    stated(run, other.relative_to(root), REQUIRED[1:])
    return run


def read_table(folder: Path, root: Path) -> tuple[dict, list]:
    """(table.json, its rows in their ``order``, then by file name)."""
    table = read_json(folder / TABLE_FILE, root)
    if not isinstance(table.get("columns"), list):
        raise UserError(f"{(folder / TABLE_FILE).relative_to(root)}: no \"columns\" list")
    twice = sorted({column for column in table["columns"] if table["columns"].count(column) > 1})
    if twice:  # a row's cells are keyed by column: a name used twice would show one cell twice
        raise UserError(f"{(folder / TABLE_FILE).relative_to(root)}: column(s) named twice: "
                        f"{', '.join(twice)}")
    rows = [read_row(path, root, table["columns"]) for path in sorted(folder.glob("*.json"))
            if path.name != TABLE_FILE]
    if not rows:
        raise UserError(f"{folder.relative_to(root)}: no rows; expected a JSON file a row "
                        f"beside {TABLE_FILE}")
    return table, sorted(rows, key=lambda row: row.get("order", 0))


def machine_text(machine) -> str:
    """A machine as a reader wants it: its description, or its CPU, speed flags and GPUs."""
    if isinstance(machine, str):
        return machine
    if machine.get("description"):
        return machine["description"]
    flags = ", ".join(flag.upper() for flag in machine.get("flags", [])) or "no AVX"
    gpus = ", ".join(machine.get("gpus", [])) or "no GPU"
    return f"{machine.get('cpus', '?')} CPUs, {machine.get('cpu', 'unknown')} ({flags}), {gpus}"


def render(table: dict, rows: list) -> str:
    """The markdown between the markers: a note (or table.json's ``intro``), the table, and
    (rows from several dates or machines) a date and a machine column, the machines keyed by
    letter below."""
    dates = [str(row["date"])[:10] for row in rows]
    machines = [machine_text(row["machine"]) for row in rows]
    columns, cells = list(table["columns"]), [[row["shown"][c] for c in table["columns"]]
                                              for row in rows]
    keys = list(dict.fromkeys(machines))
    one_run = len(set(dates)) == 1 and len(keys) == 1
    known = dates[0] != "unknown"
    when = f"{dates[0] if known else ''} on {keys[0]}{'' if known else ', date unknown'}"
    lines = [opening(table, when.strip() if one_run else None)]
    if not one_run:
        columns += ["measured", "machine"]
        cells = [row + [date, MACHINE_KEYS[keys.index(machine)]]
                 for row, date, machine in zip(cells, dates, machines)]
    lines.append(markdown_row(columns))
    lines.append("|" + "---|" * len(columns) + "\n")
    lines += [markdown_row(row) for row in cells]
    if len(columns) > len(table["columns"]):
        lines.append("\nMachines: " + "; ".join(f"{MACHINE_KEYS[i]}, {machine}"
                                                 for i, machine in enumerate(keys)) + ".\n")
    return "".join(lines)


def opening(table: dict, when: str) -> str:
    """The paragraph above the table: table.json's ``intro``, its ``{measured}`` saying the
    date and machine (``when``) or that the table says them; without one, "Measured WHEN."."""
    measured = f"measured {when}" if when else "measured on the dates and machines below"
    if table.get("intro"):
        return table["intro"].format(measured=measured) + "\n\n"
    return f"Measured {when}.\n\n" if when else ""


def markdown_row(cells: list) -> str:
    """One markdown table line; an empty cell (a row going on from the one above) as ``| |``."""
    return "|" + "|".join(f" {cell} " if cell else " " for cell in cells) + "|\n"


def tables(root: Path) -> dict:
    """{table name: its markdown} for every folder under benchmarks/results/."""
    made = {}
    for folder in sorted(path for path in (root / RESULTS_DIR).iterdir() if path.is_dir()):
        if (folder / TABLE_FILE).is_file():
            made[folder.name] = render(*read_table(folder, root))
        else:  # runs that rows show (runs/): each states its own run
            for path in sorted(folder.glob("*.json")):
                stated(read_json(path, root), path.relative_to(root), REQUIRED[1:])
    return made


def markdown_files(root: Path) -> list:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def update(root: Path, write: bool) -> list:
    """Rewrite (``write``) or compare every marked table; return one line per table that
    differs from its files, is marked nowhere, or is marked without files."""
    made, found, problems = tables(root), set(), []
    for path in markdown_files(root):
        text = path.read_text(encoding="utf-8")

        def fill(match):
            name = match["name"]
            found.add(name)
            if name not in made:
                problems.append(f"{path.relative_to(root)}: marks table '{name}', which has no "
                                f"{RESULTS_DIR / name / TABLE_FILE}")
                return match[0]
            if match["body"] != made[name] and not write:
                problems.append(f"{path.relative_to(root)}: table '{name}' differs from "
                                f"{RESULTS_DIR / name}/ (run python scripts/results_tables.py)")
            return match[1] + made[name] + match[4]

        new = MARKED.sub(fill, text)
        if write and new != text:
            path.write_text(new, encoding="utf-8")
    problems += [f"{RESULTS_DIR / name}/: marked in no markdown file under README.md or docs/"
                 for name in sorted(set(made) - found)]
    return problems


def figures_of_run(run: dict, shown: str) -> dict:
    """A finetune run's results.json as figures: each score's mean ± std and its seeds."""
    from nlp_tutorials.tasks.base import reported

    scored = "test" if run.get("test_mean_std") else "dev"
    summary = run.get(f"{scored}_mean_std") or {}
    if not summary:
        raise UserError(f"{shown}: no test_mean_std or dev_mean_std: not a finetune results.json")
    seeds = len(run.get("runs", []))
    figures = {"seeds": seeds, "scored": scored}
    for key, (mean, std) in summary.items():
        figures[key] = reported(key, mean, std if seeds > 1 else None)
        figures[f"{key}_seeds"] = ", ".join(f"{100 * one[scored][key]:.1f}"
                                            for one in run["runs"])
    return figures


def add(root: Path, run_file: str, table: str, row_name: str, cells: list,
        figures: list) -> Path:
    """Write the row ``row_name`` of ``table`` from a finetune run's results.json, with
    ``cells`` and extra ``figures`` (``NAME=TEXT`` each); nothing is written if a cell names
    a figure the run does not give."""
    run_path = Path(run_file).resolve()
    run = read_json(run_path, root)
    for flag, name in (("--table", table), ("--row", row_name)):
        if not re.fullmatch(r"[\w-]+", name):
            raise UserError(f"{flag} {name!r}: letters, digits, '_' and '-' only")
    folder = root / RESULTS_DIR / table
    if not (folder / TABLE_FILE).is_file():
        raise UserError(f"--table {table}: no {RESULTS_DIR / table / TABLE_FILE}")
    row_path = folder / f"{row_name}.json"
    row = read_json(row_path, root) if row_path.exists() else {"cells": {}}
    row.pop("same_run_as", None)  # the row's run is now this one; other tables keep theirs
    row.update({key: run.get(key, "unknown") for key in ("command", "date", "machine",
                                                         "revision")},
               figures={**figures_of_run(run, run_file), **pairs(figures, "--figure")},
               source=f"the results.json finetune wrote ({run_path})")
    row["cells"].update(pairs(cells, "--cell"))
    checked(dict(row), f"{row_path.relative_to(root)} (from {run_path.name}; add --cell or "
                       "--figure)", read_json(folder / TABLE_FILE, root)["columns"])
    row_path.write_text(json.dumps(row, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return row_path


def pairs(given: list, flag: str) -> dict:
    """``NAME=TEXT`` arguments as a dict."""
    found = {}
    for one in given:
        name, equals, text = one.partition("=")
        if not equals:
            raise UserError(f"{flag} {one!r}: expected NAME=TEXT")
        found[name] = text
    return found


def main(argv=None, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on a difference")
    commands = parser.add_subparsers(dest="command")
    adding = commands.add_parser("add", help="a finetune run's results.json as a table's row")
    adding.add_argument("run_file", help="the results.json finetune wrote")
    adding.add_argument("--table", required=True, help="its folder under benchmarks/results/")
    adding.add_argument("--row", required=True, help="the row's file name, without .json")
    adding.add_argument("--cell", action="append", default=[], help="COLUMN=TEXT, repeated")
    adding.add_argument("--figure", action="append", default=[],
                        help="NAME=TEXT, repeated: a figure the run's file lacks (its time)")
    args = parser.parse_args(argv)
    try:
        if args.command == "add":
            written = add(root, args.run_file, args.table, args.row, args.cell, args.figure)
            print(f"wrote {written.relative_to(root)}")
        problems = update(root, write=not args.check)
    except UserError as err:
        print(f"results_tables.py: error: {err}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
