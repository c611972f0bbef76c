"""scripts/results_tables.py: the documentation's results tables against their results files."""
import importlib.util
import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("results_tables", REPO / "scripts/results_tables.py")
results_tables = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(results_tables)

EPYC = {"description": "2-core AMD EPYC, AVX2", "cpu": "unknown"}
XEON = {"cpu": "Intel(R) Xeon(R) CPU @ 2.00GHz", "cpus": 2, "flags": ["avx2", "avx512f"],
        "gpus": []}


def test_every_table_in_the_docs_matches_its_files():
    assert results_tables.update(REPO, write=False) == []


def make_repo(root: Path, rows: dict, page: str = "docs/results.md") -> Path:
    """A repository with table ``t`` (columns task, score), ``rows`` as its files, and the
    table marked in ``page`` (any markdown file under docs/ or README.md)."""
    folder = root / "benchmarks/results/t"
    folder.mkdir(parents=True)
    (folder / "table.json").write_text(json.dumps({"columns": ["task", "score"]}))
    for name, row in rows.items():
        (folder / f"{name}.json").write_text(json.dumps(row))
    (root / "README.md").write_text("# x\n")
    (root / page).parent.mkdir(parents=True, exist_ok=True)
    (root / page).write_text("Before.\n\n<!-- results-table: t -->\n<!-- /results-table -->\n"
                             "\nAfter.\n")
    return root / page


def row(order, task, score, date="2026-12-06", machine=EPYC):
    return {"order": order, "cells": {"task": task, "score": "**{score}**"},
            "figures": {"score": score}, "command": "python -m nlp_tutorials.bert finetune",
            "date": date, "machine": machine, "revision": "unknown"}


def test_one_date_and_machine_is_said_once(tmp_path):
    page = make_repo(tmp_path, {"b": row(2, "RTE", "57.2"), "a": row(1, "CoLA", "30.3")})
    assert results_tables.update(tmp_path, write=False) == [
        "docs/results.md: table 't' differs from benchmarks/results/t/ "
        "(run python scripts/results_tables.py)"]
    assert results_tables.update(tmp_path, write=True) == []
    assert page.read_text() == (
        "Before.\n\n<!-- results-table: t -->\n"
        "Measured 2026-12-06 on 2-core AMD EPYC, AVX2.\n\n"
        "| task | score |\n|---|---|\n| CoLA | **30.3** |\n| RTE | **57.2** |\n"
        "<!-- /results-table -->\n\nAfter.\n")
    assert results_tables.update(tmp_path, write=False) == []


def test_rows_of_several_dates_or_machines_say_theirs(tmp_path):
    page = make_repo(tmp_path, {"a": row(1, "CoLA", "30.3"),
                                "b": row(2, "RTE", "57.2", "2026-12-07T05:00:00+00:00", XEON),
                                "c": row(3, "STS-B", "84.4", "2026-12-02")}, "README.md")
    results_tables.update(tmp_path, write=True)
    assert page.read_text().split("<!-- results-table: t -->\n")[1] == (
        "| task | score | measured | machine |\n|---|---|---|---|\n"
        "| CoLA | **30.3** | 2026-12-06 | A |\n| RTE | **57.2** | 2026-12-07 | B |\n"
        "| STS-B | **84.4** | 2026-12-02 | A |\n\n"
        "Machines: A, 2-core AMD EPYC, AVX2; "
        "B, 2 CPUs, Intel(R) Xeon(R) CPU @ 2.00GHz (AVX2, AVX512F), no GPU.\n"
        "<!-- /results-table -->\n\nAfter.\n")


def test_a_changed_figure_or_a_hand_edit_is_caught(tmp_path):
    page = make_repo(tmp_path, {"a": row(1, "CoLA", "30.3")})
    results_tables.update(tmp_path, write=True)
    made = page.read_text()
    page.write_text(made.replace("30.3", "30.4"))
    assert len(results_tables.update(tmp_path, write=False)) == 1
    page.write_text(made)
    rows = tmp_path / "benchmarks/results/t/a.json"
    rows.write_text(json.dumps(row(1, "CoLA", "28.6")))
    assert len(results_tables.update(tmp_path, write=False)) == 1
    assert results_tables.main(["--check"], root=tmp_path) == 1


@pytest.mark.parametrize("folder", ["t", "runs"])
@pytest.mark.parametrize("missing", ["date", "machine"])
def test_a_file_without_a_date_or_machine_is_refused(tmp_path, capsys, missing, folder):
    """In a table's folder or among the runs rows show (runs/)."""
    incomplete = row(1, "CoLA", "30.3")
    del incomplete[missing]
    make_repo(tmp_path, {})
    (tmp_path / f"benchmarks/results/{folder}").mkdir(exist_ok=True)
    (tmp_path / f"benchmarks/results/{folder}/cola.json").write_text(json.dumps(incomplete))
    assert results_tables.main(["--check"], root=tmp_path) == 2
    said = capsys.readouterr().err
    assert said.count("\n") == 1
    assert said.startswith(f'results_tables.py: error: benchmarks/results/{folder}/cola.json: '
                           f'no "{missing}"')


def test_a_row_naming_an_absent_figure_is_refused(tmp_path):
    broken = row(1, "CoLA", "30.3")
    broken["cells"]["score"] = "{mcc}"
    make_repo(tmp_path, {"cola": broken})
    with pytest.raises(results_tables.UserError, match="cola.json: a cell names figure 'mcc'"):
        results_tables.update(tmp_path, write=False)


def test_a_row_shown_twice_takes_its_run_from_the_first_file(tmp_path):
    page = make_repo(tmp_path, {"cola": row(1, "CoLA", "30.3"), "rte": row(2, "RTE", "57.2")})
    other = tmp_path / "benchmarks/results/u"
    other.mkdir()
    (other / "table.json").write_text(json.dumps({"columns": ["both"]}))
    joined = {"same_run_as": ["t/cola", "t/rte"], "cells": {"both": "{cola[score]}; {rte[score]}"}}
    (other / "both.json").write_text(json.dumps(joined))
    page.write_text(page.read_text() + "<!-- results-table: u -->\n<!-- /results-table -->\n")
    results_tables.update(tmp_path, write=True)
    assert "| 30.3; 57.2 |" in page.read_text()
    (tmp_path / "benchmarks/results/t/rte.json").write_text(
        json.dumps(row(2, "RTE", "57.2", "2026-12-02")))
    with pytest.raises(results_tables.UserError, match="joins runs of different dates"):
        results_tables.update(tmp_path, write=False)


def test_add_makes_a_row_from_finetunes_results(tmp_path):
    """A results.json laid out as finetune's save_results writes it (tests/system/
    test_provenance.py checks that layout) becomes a row, and the table is rewritten."""
    from nlp_tutorials.system.provenance import run_provenance

    runs = [{"seed": seed, "epoch": 3, "dev": None, "test": {"accuracy": accuracy, "f1": f1}}
            for seed, accuracy, f1 in [(1, 0.80, 0.86), (2, 0.82, 0.87)]]
    run_file = tmp_path / "results.json"
    run_file.write_text(json.dumps({**run_provenance(), "config": {"seeds": 2}, "runs": runs,
                                    "test_mean_std": {"accuracy": [0.81, 0.0141421],
                                                      "f1": [0.865, 0.0070711]}}))
    page = make_repo(tmp_path / "repo", {})
    assert results_tables.main(["add", str(run_file), "--table", "t", "--row", "mrpc",
                                "--cell", "task=MRPC", "--cell", "score={accuracy} / {f1}"],
                               root=tmp_path / "repo") == 0
    saved, made = json.loads(run_file.read_text()), json.loads(
        (tmp_path / "repo/benchmarks/results/t/mrpc.json").read_text())
    assert {key: made[key] for key in ("command", "date", "machine", "revision")} == {
        key: saved[key] for key in ("command", "date", "machine", "revision")}
    assert made["figures"]["accuracy_seeds"] == "80.0, 82.0"
    assert "| MRPC | 81.0 ± 1.4% / 86.5 ± 0.7 |" in page.read_text()
    assert f"Measured {saved['date'][:10]} on " in page.read_text()


def test_add_refuses_a_row_whose_cells_name_figures_the_run_lacks(tmp_path):
    from nlp_tutorials.system.provenance import run_provenance

    run_file = tmp_path / "results.json"
    run_file.write_text(json.dumps({**run_provenance(), "runs": [{"test": {"mcc": 0.3}}],
                                    "test_mean_std": {"mcc": [0.3, 0.0]}}))
    kept = row(1, "CoLA", "28.6")
    kept["cells"]["score"] = "{mcc} in {wall}"
    make_repo(tmp_path / "repo", {"cola": kept})
    before = (tmp_path / "repo/benchmarks/results/t/cola.json").read_text()
    adding = ["add", str(run_file), "--table", "t", "--row", "cola"]
    assert results_tables.main(adding, root=tmp_path / "repo") == 2
    assert (tmp_path / "repo/benchmarks/results/t/cola.json").read_text() == before
    assert results_tables.main(adding + ["--figure", "wall=17 min"], root=tmp_path / "repo") == 0
    assert "| CoLA | 30.0 in 17 min |" in (tmp_path / "repo/docs/results.md").read_text()


def test_add_over_a_row_showing_another_files_run_makes_it_its_own(tmp_path):
    """Re-measuring a task: its row takes the new run; the file it showed, which other tables
    may show, keeps the old one."""
    from nlp_tutorials.system.provenance import run_provenance

    run_file = tmp_path / "results.json"
    run_file.write_text(json.dumps({**run_provenance(), "runs": [{"test": {"mcc": 0.3}}],
                                    "test_mean_std": {"mcc": [0.3, 0.0]}}))
    pinned = tmp_path / "repo/benchmarks/results/runs/cola.json"
    pinned.parent.mkdir(parents=True)
    pinned.write_text(json.dumps(row(1, "CoLA", "28.6")))
    page = make_repo(tmp_path / "repo", {"cola": {"same_run_as": "runs/cola",
                                                  "cells": {"task": "CoLA", "score": "{score}"}}})
    results_tables.update(tmp_path / "repo", write=True)
    assert "| CoLA | 28.6 |" in page.read_text()
    assert results_tables.main(["add", str(run_file), "--table", "t", "--row", "cola",
                                "--cell", "score={mcc}"], root=tmp_path / "repo") == 0
    assert "| CoLA | 30.0 |" in page.read_text()
    assert "same_run_as" not in json.loads(
        (tmp_path / "repo/benchmarks/results/t/cola.json").read_text())
    assert json.loads(pinned.read_text())["figures"] == {"score": "28.6"}


def test_an_empty_cell_is_written_as_one_space(tmp_path):
    going_on = row(2, "", "57.2")
    page = make_repo(tmp_path, {"a": row(1, "CoLA", "30.3"), "b": going_on})
    results_tables.update(tmp_path, write=True)
    assert "| CoLA | **30.3** |\n| | **57.2** |\n" in page.read_text()


def test_an_intro_takes_the_date_and_machine_in_place_of_the_measured_line(tmp_path):
    page = make_repo(tmp_path, {"a": row(1, "CoLA", "30.3")})
    table = tmp_path / "benchmarks/results/t/table.json"
    table.write_text(json.dumps({"columns": ["task", "score"],
                                 "intro": "Scores ({measured}), one seed:"}))
    results_tables.update(tmp_path, write=True)
    assert page.read_text().split("<!-- results-table: t -->\n")[1].startswith(
        "Scores (measured 2026-12-06 on 2-core AMD EPYC, AVX2), one seed:\n\n| task | score |\n")
    (tmp_path / "benchmarks/results/t/b.json").write_text(
        json.dumps(row(2, "RTE", "57.2", "2026-12-02")))
    results_tables.update(tmp_path, write=True)
    assert "Scores (measured on the dates and machines below), one seed:\n\n" in page.read_text()


def test_an_unknown_date_is_said_as_such(tmp_path):
    page = make_repo(tmp_path, {"a": row(1, "CoLA", "30.3", date="unknown")})
    results_tables.update(tmp_path, write=True)
    assert "Measured on 2-core AMD EPYC, AVX2, date unknown.\n" in page.read_text()


def test_a_column_named_twice_is_refused(tmp_path):
    make_repo(tmp_path, {"a": row(1, "CoLA", "30.3")})
    (tmp_path / "benchmarks/results/t/table.json").write_text(
        json.dumps({"columns": ["task", "score", "score"]}))
    with pytest.raises(results_tables.UserError, match="t/table.json: column.s. named twice: score"):
        results_tables.update(tmp_path, write=False)


def test_a_table_without_rows_is_refused(tmp_path):
    make_repo(tmp_path, {"a": row(1, "CoLA", "30.3")})
    (tmp_path / "benchmarks/results/t/a.json").unlink()
    with pytest.raises(results_tables.UserError, match=r"^benchmarks/results/t: no rows; "
                                                       r"expected a JSON file a row beside "
                                                       r"table\.json$"):
        results_tables.update(tmp_path, write=False)
