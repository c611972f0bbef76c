"""What ``predict`` reads besides the model: the user's lines, and the model's task.json."""
import io
import json
import re
import shutil

import pytest

from nlp_tutorials.cli import main
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import get_task

NO_PAIRS = ("no sentence pairs found (only blank lines or a header); expected one pair a line: "
            "two tab-separated sentences, or an MRPC row of 5 columns")


@pytest.mark.parametrize("lines", [["\n", "  \n", "\r\n"], [],
                                   ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n", "\n"]])
def test_lines_without_a_pair_are_refused_once_read(lines):
    with pytest.raises(UserError) as info:
        list(get_task("mrpc").parse_lines(lines, "pairs.tsv"))
    assert str(info.value) == f"pairs.tsv: {NO_PAIRS}"


def test_predict_on_a_file_of_blank_lines_exits_in_one_line(mrpc_classifier, tmp_path, capsys):
    blank = tmp_path / "blank.tsv"
    blank.write_text("\n\n   \n", encoding="utf-8")
    assert main("bert", ["predict", str(blank), "--model-dir", str(mrpc_classifier)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == f"python -m nlp_tutorials.bert predict: error: {blank}: {NO_PAIRS}\n"


def test_predict_on_empty_standard_input_exits_in_one_line(mrpc_classifier, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert main("bert", ["predict", "-", "--model-dir", str(mrpc_classifier)]) == 2
    assert capsys.readouterr().err == (f"python -m nlp_tutorials.bert predict: error: <stdin>: "
                                       f"{NO_PAIRS}\n")


def test_predict_still_answers_a_pair(mrpc_classifier, capsys, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("\nthe cat sat\ta cat was sitting\n\n"))
    assert main("bert", ["predict", "--model-dir", str(mrpc_classifier)]) == 0
    label, probability, *texts = capsys.readouterr().out.rstrip("\n").split("\t")
    assert label in ("0", "1") and 0 <= float(probability) <= 1
    assert texts == ["the cat sat", "a cat was sitting"]


KNOWN = ('"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli", "conll2003", '
         '"squad", "squad2", "swag", "commonsenseqa", "custom"')


@pytest.mark.parametrize("saved, expected", [
    ({"task": "nosuch", "labels": ["0", "1"]}, f'task is "nosuch"; expected one of {KNOWN}'),
    ({"task": 1, "labels": ["0", "1"]}, f'task is 1; expected one of {KNOWN}'),
    ({"labels": ["0", "1"]}, f'no task; expected one of {KNOWN}'),
    ({"task": "mrpc"}, "no labels; expected a non-empty list of distinct label names"),
    ({"task": "mrpc", "labels": []}, "labels is []; expected a non-empty list"),
    ({"task": "mrpc", "labels": ["0", "0"]}, 'labels is ["0", "0"]; expected a non-empty list '
                                             'of distinct label names'),
    ({"task": "mrpc", "labels": [0, 1]}, "labels is [0, 1]; expected a non-empty list"),
    ({"task": "mrpc", "labels": ["", "1"]}, 'labels is ["", "1"]; expected a non-empty list'),
])
def test_a_bad_task_json_is_named_with_its_field(mrpc_classifier, tmp_path, saved, expected):
    from nlp_tutorials.finetuned.folders import load_finetuned

    folder = shutil.copytree(mrpc_classifier, tmp_path / "model")
    (folder / "task.json").write_text(json.dumps(saved))
    with pytest.raises(UserError) as info:
        load_finetuned(folder)
    message = str(info.value)
    assert message.startswith(f"{folder / 'task.json'}: {expected}"), message


def test_predict_on_a_file_shows_its_progress_on_standard_error(mrpc_classifier, tmp_path,
                                                                capsys):
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("the cat sat\ta cat was sitting\n\nprices rose\tprices fell\n",
                     encoding="utf-8")
    assert main("bert", ["predict", str(pairs), "--model-dir", str(mrpc_classifier)]) == 0
    captured = capsys.readouterr()
    assert [line.split("\t")[2] for line in captured.out.splitlines()] == ["the cat sat",
                                                                         "prices rose"]
    # The answers alone on standard output; the lines read out of all on standard error.
    assert re.fullmatch(rf"predict {re.escape(str(pairs))}: line 3/3 - \d+s - "
                        rf"[\d.]+ examples/s\n", captured.err), captured.err


def test_predict_shows_the_lines_read_after_each_chunk(mrpc_classifier):
    import itertools

    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.predicting import predict
    from nlp_tutorials.system.progress import ProgressDisplay

    head, tokenizer, task = load_finetuned(mrpc_classifier)
    lines = ["the cat sat\ta cat was sitting\n", "\n", "prices rose\tprices fell\n",
             "it rained\tit was wet\n", "he left\tshe stayed\n", "\n"]
    printed, seconds = [], itertools.count(0, 31)
    display = ProgressDisplay(printed.append, "predict pairs.tsv", interactive=False,
                              clock=lambda: next(seconds))
    assert predict(head, tokenizer, task, lines, "pairs.tsv", printer=printed.append, chunk=2,
                   display=display, total_lines=len(lines)) == 4
    progress = [line.split(" - ") for line in printed if line.startswith("predict")]
    # After 2 pairs (3 lines read), after 4 (5 lines), and once the last blank line is read.
    assert [parts[0] for parts in progress] == ["predict pairs.tsv: line 3/6",
                                                "predict pairs.tsv: line 5/6",
                                                "predict pairs.tsv: line 6/6"]
    # 2 pairs (and 2 lines) in the 31 s after the first chunk: 15.5 s a line, one line left.
    assert progress[1][1:] == ["1:02", "0.065 examples/s", "16s left"]
    assert printed[2].startswith("predict pairs.tsv: line 3/6")  # after the first two answers
