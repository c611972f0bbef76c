"""A user's own table ("custom"): CSV with quoted commas, tabs and newlines, TSV, JSON lines;
labels learnt from train and kept through task.json; scores for a regression; every bad row one
line naming the file and line."""
import csv
import json

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.shapes import ClassPrediction
from nlp_tutorials.tasks.glue import ScorePrediction, TextExample
from nlp_tutorials.tasks.table import CustomTask

REVIEWS = [  # (title, body, stars): fields with commas, a tab, a newline and a quote in them
    ("Good, cheap", "Works as promised.", "great"),
    ("Broke\tfast", 'It said "sturdy".\nIt was not.', "bad"),
    ("ok", "Fine for the price, I suppose", "fine"),
    ("Again", "Second one, same story.", "bad"),
]


def write_csv(path, rows, header=("title", "body", "stars"), delimiter=","):
    with open(path, "w", encoding="utf-8", newline="") as file:
        writer = csv.writer(file, delimiter=delimiter)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def reviews_task(tmp_path, dev_rows=REVIEWS[:2], **options):
    paths = {"train": write_csv(tmp_path / "train.csv", REVIEWS),
             "dev": write_csv(tmp_path / "dev.csv", dev_rows)}
    return CustomTask(text_columns=["title", "body"], label_column="stars", paths=paths,
                      **options)


def test_a_csv_with_quoted_commas_tabs_and_newlines_reads_as_csv_writes_it(tmp_path):
    printed = []
    task = reviews_task(tmp_path, printer=printed.append)
    train = task.examples("train")
    with open(tmp_path / "train.csv", encoding="utf-8", newline="") as file:
        want = [TextExample(r["title"], r["body"], r["stars"]) for r in csv.DictReader(file)]
    assert train == want and train[1].pair == 'It said "sturdy".\nIt was not.'
    assert task.labels == ("bad", "fine", "great")  # learnt from train, sorted
    assert task.pair and task.num_labels == 3 and task.metrics == (("accuracy", "accuracy"),)
    assert printed == ["train.csv: 4 sentence pairs (bad: 2, fine: 1, great: 1)"]
    assert task.examples("dev") == want[:2]


def test_a_dev_label_train_never_saw_is_named_with_its_line(tmp_path):
    # Row 3 of dev starts on line 5: the row before it spans lines 3 and 4.
    task = reviews_task(tmp_path, dev_rows=REVIEWS[:2] + [("Hm", "Odd.", "awful")])
    with pytest.raises(UserError) as info:
        task.examples("dev")
    assert str(info.value) == (f"{tmp_path / 'dev.csv'}:5: unknown label 'awful'; the labels "
                               f"in train are bad, fine, great")


def test_a_missing_column_names_the_file_and_the_columns_found(tmp_path):
    write_csv(tmp_path / "train.csv", REVIEWS, header=("title", "text", "stars"))
    task = CustomTask(text_columns="title,body", label_column="stars",
                      paths={"train": tmp_path / "train.csv"})
    with pytest.raises(UserError) as info:
        task.examples("train")
    assert str(info.value) == (f"{tmp_path / 'train.csv'}: no column 'body'; the columns are "
                               f"title, text, stars")


def test_a_short_row_and_broken_csv_are_named_with_their_line(tmp_path):
    (tmp_path / "train.csv").write_text("text,label\nfine,a\n\nno label here\n")
    task = CustomTask(text_columns=["text"], paths={"train": tmp_path / "train.csv"})
    with pytest.raises(UserError, match=r"train.csv:4: expected 2 columns as the header names, "
                                        r"found 1$"):
        task.examples("train")
    (tmp_path / "bad.csv").write_bytes(b"text,label\nfine,a\n\xe9t\xe9,b\n")
    with pytest.raises(UserError, match=r"bad.csv:3: not valid UTF-8 \(byte 0xe9\)$"):
        CustomTask(text_columns=["text"], paths={"train": tmp_path / "bad.csv"}).examples("train")


def test_tsv_is_read_with_csv_quoting(tmp_path):
    rows = [("a\tquoted tab", "x"), ("plain", "y")]
    path = write_csv(tmp_path / "train.tsv", rows, header=("text", "label"), delimiter="\t")
    task = CustomTask(text_columns=["text"], paths={"train": path})
    assert task.examples("train") == [TextExample("a\tquoted tab", None, "x"),
                                      TextExample("plain", None, "y")]
    assert not task.pair and task.labels == ("x", "y")


def test_json_lines_read_one_object_a_line(tmp_path):
    lines = [{"q": "Is it on?", "a": "Yes, since May.", "ok": 1},
             {"q": "Where?", "a": "In the hall", "ok": "0", "note": "extra fields are fine"},
             {"q": "When?", "a": "Never", "ok": True}]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(map(json.dumps, lines)) + "\n\n")
    task = CustomTask(text_columns=["q", "a"], label_column="ok", paths={"train": path})
    assert task.examples("train") == [TextExample("Is it on?", "Yes, since May.", "1"),
                                      TextExample("Where?", "In the hall", "0"),
                                      TextExample("When?", "Never", "true")]
    assert task.labels == ("0", "1", "true")


@pytest.mark.parametrize("line, error", [
    ('{"q": "Hi", "a": "Yo"}', "train.jsonl:2: no field 'ok'; the fields there are q, a"),
    ('["Hi", "Yo", 1]', "train.jsonl:2: expected a JSON object a line, found list"),
    ('{"q": "Hi", "a": 5, "ok": 1}', "train.jsonl:2: field 'a' holds 5; expected text (a JSON "
                                     "string)"),
    ('{"q": "Hi",', "train.jsonl:2: not valid JSON (Expecting property name enclosed in double "
                    "quotes at column 12)"),
])
def test_a_bad_json_line_is_named(tmp_path, line, error):
    path = tmp_path / "train.jsonl"
    path.write_text('{"q": "A", "a": "B", "ok": 0}\n' + line + "\n")
    task = CustomTask(text_columns=["q", "a"], label_column="ok", paths={"train": path})
    with pytest.raises(UserError) as info:
        task.examples("train")
    assert str(info.value) == f"{tmp_path}/{error}"


def test_regression_reads_scores_and_refuses_a_word_by_its_line(tmp_path):
    path = write_csv(tmp_path / "train.csv", [("a", "1.5"), ("b", "4"), ("c", "-2e-1")],
                     header=("text", "y"))
    task = CustomTask(text_columns=["text"], label_column="y", regression=True,
                      paths={"train": path})
    assert task.labels == ("score",) and task.num_labels == 1
    assert task.metrics == (("pearson", "Pearson"), ("spearman", "Spearman"))
    train = task.examples("train")
    assert [e.label for e in train] == [1.5, 4.0, -0.2]
    assert task.summarize(train) == "3 sentences, scores -0.20 to 4.00"
    from nlp_tutorials.text.tokenization import WordTokenizer

    arrays = task.encode(WordTokenizer.build(task.texts(train)), train, 8)
    assert arrays["labels"].dtype == np.float32
    np.testing.assert_array_equal(arrays["labels"], np.float32([1.5, 4, -0.2]))
    assert task.format_prediction(train[0], ScorePrediction(2.25)) == "2.250\ta"
    write_csv(tmp_path / "dev.csv", [("a", "3"), ("b", "high")], header=("text", "y"))
    task.paths["dev"] = tmp_path / "dev.csv"
    with pytest.raises(UserError, match=r"dev.csv:3: score 'high' is not a number"):
        task.examples("dev")


def test_settings_round_trip_through_task_json_and_predict_prints_the_labels(tmp_path):
    task = reviews_task(tmp_path, max_len=96)
    task.examples("train")
    saved = json.loads(json.dumps(task.settings()))
    assert saved == {"labels": ["bad", "fine", "great"], "max_len": 96, "stride": 128,
                     "text_columns": ["title", "body"], "label_column": "stars",
                     "regression": False, "file_format": None}
    rebuilt = CustomTask(**saved)
    assert rebuilt.labels == task.labels and rebuilt.pair
    lines = rebuilt.parse_lines(["Nice\tReally nice.\n", "just one\n"], "in.tsv")
    example = next(lines)
    assert example == TextExample("Nice", "Really nice.", "bad", "1")
    chosen = ClassPrediction(2, np.float32([0.1, 0.2, 0.7]))
    assert rebuilt.format_prediction(example, chosen) == "great\t0.700\tNice\tReally nice."
    with pytest.raises(UserError, match=r"^in.tsv, line 2: expected two tab-separated"):
        next(lines)
    # Evaluate's file holds the label names, each row's position in the file as its index.
    assert rebuilt.prediction_file(task.examples("dev"), [chosen, chosen]) == (
        ".tsv", "index\tprediction\n0\tgreat\n1\tgreat\n")


def test_the_format_comes_from_the_suffix_or_is_named(tmp_path):
    (tmp_path / "train.txt").write_text("text\tlabel\nhello, there\tx\n")
    with pytest.raises(UserError, match=r"train.txt: cannot tell the format from the suffix "
                                        r"'.txt'; expected a .csv, .tsv or .jsonl file"):
        CustomTask(paths={"train": tmp_path / "train.txt"}).examples("train")
    named = CustomTask(paths={"train": tmp_path / "train.txt"}, file_format="tsv")
    assert named.examples("train") == [TextExample("hello, there", None, "x")]
    with pytest.raises(UserError, match="file format 'xlsx': expected csv, tsv or jsonl"):
        CustomTask(file_format="xlsx")
    with pytest.raises(UserError, match="--text-columns 'a,b,c': expected one or two column"):
        CustomTask(text_columns="a,b,c")


def test_a_folder_of_train_and_dev_files_is_found_by_their_names(tmp_path):
    write_csv(tmp_path / "train.csv", REVIEWS)
    (tmp_path / "dev.jsonl").write_text(json.dumps({"title": "t", "body": "b", "stars": "fine"}))
    task = CustomTask(text_columns=["title", "body"], label_column="stars", data_dir=tmp_path)
    assert len(task.examples("train")) == 4
    assert task.examples("dev") == [TextExample("t", "b", "fine")]
    assert task.examples("test") == []
