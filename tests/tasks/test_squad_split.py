"""`bert split-squad`: a SQuAD file split by article, sorted by title, into train and scored."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nlp_tutorials.analysis.task_baselines import split_by_article
from nlp_tutorials.cli import main
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import get_task
from nlp_tutorials.tasks.squad_files import read_squad_file
from nlp_tutorials.tasks.squad_split import split_by_title, write_split
from support import REPOSITORY, fails_without_tensorflow

REAL = REPOSITORY.parent / "shared" / "data" / "squad"


def article(title, questions, impossible=False):
    """One article of one paragraph; each question's answer is the paragraph's first word."""
    context = f"{title} is the subject here."
    qas = [{"id": q.rstrip("?"), "question": q,
            "answers": [] if impossible else [{"text": title, "answer_start": 0}],
            **({"is_impossible": True} if impossible else {})}
           for q in questions]
    return {"title": title, "paragraphs": [{"context": context, "qas": qas}]}


# File order: Mango, Apple, Zebra, Apple (a second article of the same title), Kiwi.
# By title: Apple (index 1), Apple (3), Kiwi (4), Mango (0), Zebra (2).
ARTICLES = [article("Mango", ["m0?"]), article("Apple", ["a0?", "a1?"]),
            article("Zebra", ["z0?"]), article("Apple", ["b0?"]), article("Kiwi", ["k0?", "k1?"])]


def squad_file(path: Path, articles=ARTICLES, version="1.1") -> Path:
    path.write_text(json.dumps({"data": articles, "version": version}), encoding="utf-8")
    return path


def test_articles_sort_by_title_and_equal_titles_keep_file_order(tmp_path):
    path = squad_file(tmp_path / "dev-v1.1.json")
    assert split_by_title(path, 3) == ([1, 3, 4], [0, 2])
    assert split_by_title(path, 1) == ([1], [3, 4, 0, 2])


@pytest.mark.parametrize("wrong", [0, 5, 9])
def test_a_split_leaves_both_sides_an_article(tmp_path, wrong):
    path = squad_file(tmp_path / "dev-v1.1.json")
    with pytest.raises(UserError, match=f"^--train-articles {wrong}: expected 1 to 4 "
                                        r"\(dev-v1.1.json has 5 articles\)$"):
        split_by_title(path, wrong)


@pytest.mark.parametrize("title, shown", [(["Apple"], "an array"), (7, "an integer"),
                                          (None, "null")])
def test_a_title_that_is_not_text_is_one_line(tmp_path, title, shown):
    path = squad_file(tmp_path / "dev-v1.1.json", [*ARTICLES[:2], {**ARTICLES[2], "title": title}])
    with pytest.raises(UserError, match=rf"^dev-v1.1.json: data\[2\]: title is {shown}; "
                                        r"expected a string$"):
        split_by_title(path, 1)


def test_the_written_files_hold_each_side_whole(tmp_path, capsys):
    path = squad_file(tmp_path / "dev-v1.1.json")
    assert main("bert", ["split-squad", "--input", str(path), "--train-articles", "3",
                         "--output", str(tmp_path / "out")]) in (0, None)
    train, scored = tmp_path / "out" / "train-v1.1.json", tmp_path / "out" / "scored-v1.1.json"
    assert capsys.readouterr().out.splitlines() == [f"{train}: 3 articles, 5 questions",
                                                    f"{scored}: 2 articles, 2 questions"]
    assert json.loads(train.read_text()) == {"data": [ARTICLES[1], ARTICLES[3], ARTICLES[4]],
                                             "version": "1.1"}
    assert json.loads(scored.read_text()) == {"data": [ARTICLES[0], ARTICLES[2]],
                                              "version": "1.1"}
    assert [q.id for q in read_squad_file(train)] == ["a0", "a1", "b0", "k0", "k1"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [scored.name, train.name]


def test_the_baselines_split_the_same_questions(tmp_path):
    path = squad_file(tmp_path / "dev-v1.1.json")
    train_file, scored_file = write_split(path, 2, tmp_path / "out", printer=lambda line: None)
    train, (label, scored) = split_by_article(get_task("squad", data_dir=tmp_path), 2)
    assert [q.question for q in train] == [q.question for q in read_squad_file(train_file)]
    assert [q.question for q in scored] == ["m0?", "z0?", "k0?", "k1?"]  # file order
    assert sorted(q.question for q in scored) == sorted(
        q.question for q in read_squad_file(scored_file))
    assert label == "dev-v1.1.json, the last 3 of 5 articles by title (4 questions)"


def test_articles_titled_as_in_another_file_are_left_out_before_the_split(tmp_path, capsys):
    path = squad_file(tmp_path / "dev-v1.1.json")
    other = squad_file(tmp_path / "other.json", [article("Apple", ["x?"]),
                                                 article("Zebra", ["y?"]),
                                                 article("Plum", ["z?"])])
    assert split_by_title(path, 1, without={"Apple", "Zebra"}) == ([4], [0])
    assert main("bert", ["split-squad", "--input", str(path), "--train-articles", "1",
                         "--without", str(other), "--output", str(tmp_path / "out")]) in (0, None)
    train, scored = tmp_path / "out" / "train-v1.1.json", tmp_path / "out" / "scored-v1.1.json"
    assert capsys.readouterr().out.splitlines() == [
        f"left out 3 articles whose title {other} holds",  # both Apples
        f"{train}: 1 article, 2 questions", f"{scored}: 1 article, 1 question"]
    assert json.loads(train.read_text())["data"] == [ARTICLES[4]]
    assert json.loads(scored.read_text())["data"] == [ARTICLES[0]]


def test_a_file_with_unanswerable_questions_splits_into_v2_files(tmp_path):
    articles = [article("B", ["b?"], impossible=True), article("A", ["a?"])]
    path = squad_file(tmp_path / "dev-v2.0.json", articles, "v2.0")
    train, scored = write_split(path, 1, tmp_path, printer=lambda line: None)
    assert (train.name, scored.name) == ("train-v2.0.json", "scored-v2.0.json")
    assert json.loads(train.read_text())["data"] == [articles[1]]
    # The train side answers everything, yet is still a v2.0 task's file.
    assert get_task("squad2", paths={"train": train}).examples("train")[0].question == "a?"


def test_a_bad_question_writes_nothing(tmp_path):
    broken = [article("A", ["a?"]), {"title": "B", "paragraphs": [{"context": "x", "qas": [
        {"id": "b", "question": "b?", "answers": [{"text": "y", "answer_start": 0}]}]}]}]
    path = squad_file(tmp_path / "dev-v1.1.json", broken)
    with pytest.raises(UserError, match="dev-v1.1.json"):
        write_split(path, 1, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("argv, message", [
    (["--input", "/nowhere/dev-v1.1.json", "--train-articles", "2"],
     "--input /nowhere/dev-v1.1.json: no such file; expected a SQuAD JSON file"),
    (["--input", "{file}", "--train-articles", "5"],
     "--train-articles 5: expected 1 to 4 (dev-v1.1.json has 5 articles)"),
    (["--input", "{file}", "--train-articles", "0"],
     "argument --train-articles: expected a positive integer, got 0"),
    (["--input", "{file}", "--train-articles", "2", "--without", "{file}"],
     "--without leaves 0 articles of dev-v1.1.json's 5; expected at least 2 to split"),
    (["--input", "{file}", "--train-articles", "3", "--without", "{apples}"],
     "--train-articles 3: expected 1 to 2 (dev-v1.1.json has 5 articles, 3 once those in "
     "--without are left out)"),
    (["--input", "{file}", "--train-articles", "2", "--without", "/nowhere/v2.json"],
     "--without /nowhere/v2.json: no such file; expected a SQuAD JSON file"),
])
def test_bad_input_is_one_line_before_tensorflow(tmp_path, argv, message):
    path = squad_file(tmp_path / "dev-v1.1.json")
    apples = squad_file(tmp_path / "apples.json", [article("Apple", ["x?"])])
    argv = [arg.replace("{file}", str(path)).replace("{apples}", str(apples)) for arg in argv]
    line = fails_without_tensorflow("split-squad", *argv, "--output", str(tmp_path / "out"))
    assert message in line
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_the_fixed_splits_of_the_real_dev_files(tmp_path):
    if not REAL.is_dir():
        pytest.skip(f"{REAL} is not here")
    for name, articles, counts in [("dev-v1.1.json", 38, ["38 articles, 7,836 questions",
                                                          "10 articles, 2,734 questions"]),
                                   ("dev-v2.0.json", 28, ["28 articles, 9,361 questions",
                                                          "7 articles, 2,512 questions"])]:
        result = subprocess.run([sys.executable, "-m", "nlp_tutorials.bert", "split-squad",
                                 "--input", str(REAL / name), "--train-articles", str(articles),
                                 "--output", str(tmp_path)], capture_output=True, text=True,
                                cwd=REPOSITORY, check=True)
        assert [line.split(": ", 1)[1] for line in result.stdout.splitlines()] == counts


@pytest.mark.slow
def test_the_v1_split_that_never_reads_the_articles_v2_scores(tmp_path, capsys):
    if not REAL.is_dir():
        pytest.skip(f"{REAL} is not here")
    assert main("bert", ["split-squad", "--input", str(REAL / "dev-v2.0.json"),
                         "--train-articles", "25", "--output", str(tmp_path / "v2")]) in (0, None)
    held_out = tmp_path / "v2" / "scored-v2.0.json"  # the threshold's 3 articles, the scored 7
    assert main("bert", ["split-squad", "--input", str(REAL / "dev-v1.1.json"),
                         "--train-articles", "34", "--without", str(held_out),
                         "--output", str(tmp_path / "v1")]) in (0, None)
    assert [line.split(": ", 1)[-1] for line in capsys.readouterr().out.splitlines()[2:]] == [
        f"left out 10 articles whose title {held_out} holds",
        "34 articles, 7,135 questions", "4 articles, 1,564 questions"]
    v1_titles = {a["title"] for a in json.loads((tmp_path / "v1" / "train-v1.1.json")
                                                .read_text())["data"]}
    v2_scored = sorted(a["title"] for a in json.loads(
        (REAL / "dev-v2.0.json").read_text())["data"])[28:]
    assert len(v2_scored) == 7 and not v1_titles & set(v2_scored)
