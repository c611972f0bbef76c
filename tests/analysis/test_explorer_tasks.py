"""`explore --model-dir` on a fine-tuned model: the task's own examples, with the model's answer
beside each (the label and its probability, a regression's score, the chosen ending)."""
import numpy as np
import pytest

from fake_tasks import (ChoiceTask, ScoreTask, SentenceTask, save_model, tiny_task_head,
                        tiny_wordpiece_head, write_files)
from nlp_tutorials.analysis import explorer
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS, get_task
from nlp_tutorials.finetuned.inference import class_probabilities, head_outputs
from nlp_tutorials.tasks.shapes import softmax


def positions(head) -> int:
    """The model's positions: ``predict`` and the explorer encode to that length."""
    return head.backbone.config.max_position_embeddings


def saved(task_class, tmp_path, monkeypatch):
    """(model folder, data folder, head, tokenizer) of a tiny model of ``task_class``."""
    monkeypatch.setitem(TASKS, task_class.name, task_class)
    task = task_class()
    head, tokenizer = tiny_wordpiece_head(task)
    return (save_model(head, tokenizer, task, tmp_path / "model"),
            write_files(task, tmp_path / "data"), head, tokenizer)


@pytest.mark.slow
def test_a_sentence_model_shows_its_dev_examples_and_its_labels(tmp_path, monkeypatch):
    model_dir, data, head, tokenizer = saved(SentenceTask, tmp_path, monkeypatch)
    found = explorer.collect_from_model("bert", model_dir, 4, data)
    task = SentenceTask(data_dir=data)
    dev = task.examples("dev")[:4]  # no test file: dev is shown
    probabilities = class_probabilities(head, task.encode(tokenizer, dev, positions(head)))
    assert found["answers"] == [
        {"label": task.labels[row.argmax()], "probability": round(float(row.max()), 4)}
        for row in probabilities]
    assert [tokens[1:3] for tokens in found["src"]] == [
        tokenizer.tokenize(e.text)[:2] for e in dev]
    page = explorer.page_data(found)
    assert [e["answer"] for e in page["examples"]] == found["answers"]


@pytest.mark.slow
def test_a_regression_model_shows_its_scores(tmp_path, monkeypatch):
    model_dir, data, head, tokenizer = saved(ScoreTask, tmp_path, monkeypatch)
    (data / "test.tsv").write_text("a fine , warm story\t4.0\nit was fine\t2.5\n")
    found = explorer.collect_from_model("bert", model_dir, 8, data)
    task = ScoreTask(data_dir=data)
    scores = head_outputs(head, task.encode(tokenizer, task.examples("test"), positions(head)))[:, 0]
    assert len(found["src"]) == 2  # the test file's two sentences
    np.testing.assert_allclose([a["score"] for a in found["answers"]], scores, rtol=1e-5)


@pytest.mark.slow
def test_a_choice_model_shows_the_chosen_endings_row(tmp_path, monkeypatch):
    model_dir, data, head, tokenizer = saved(ChoiceTask, tmp_path, monkeypatch)
    found = explorer.collect_from_model("bert", model_dir, 8, data)
    task = ChoiceTask(data_dir=data)
    dev = task.examples("dev")
    arrays = task.encode(tokenizer, dev, positions(head))
    probabilities = softmax(head_outputs(head, arrays))  # [n, choices]
    chosen = probabilities.argmax(axis=1)
    assert found["answers"] == [{"label": f"ending {c + 1}",
                                 "probability": round(float(p[c]), 4)}
                                for c, p in zip(chosen, probabilities)]
    for row, choice in enumerate(chosen):
        ids = arrays["input_ids"][row, choice]
        shown = [token for token in found["src"][row] if token != "[PAD]"]  # padded to the longest
        assert shown == tokenizer.convert_ids_to_tokens(ids[ids != 0])


@pytest.mark.slow
def test_the_shipped_mrpc_model_shows_the_test_pairs_as_before(tmp_path):
    from nlp_tutorials.analysis.visual import collect_attention

    task = get_task("mrpc")
    head, tokenizer = tiny_task_head(task)
    model_dir = save_model(head, tokenizer, task, tmp_path / "model")
    found = explorer.collect_from_model("bert", model_dir, 3)
    before = collect_attention(head.backbone, tokenizer, 3)
    assert found["src"] == before["src_tokens"] and found["segments"] == before["segments"]
    np.testing.assert_array_equal(found["attentions"]["encoder"][1],
                                  before["attentions"]["encoder"][1])
    pairs = task.examples("test")[:3]
    probabilities = class_probabilities(head, task.encode(tokenizer, pairs, positions(head)))
    assert [a["probability"] for a in found["answers"]] == [
        round(float(p.max()), 4) for p in probabilities]


def test_a_task_model_without_data_is_one_line(tmp_path, monkeypatch):
    model_dir, _, _, _ = saved(SentenceTask, tmp_path, monkeypatch)
    with pytest.raises(UserError, match="Fake sentences model.*expected --data DIR"):
        explorer.collect_from_model("bert", model_dir, 2)


@pytest.mark.slow
def test_the_explore_command_line_reads_data(tmp_path, monkeypatch, capsys):
    from nlp_tutorials.cli import main

    model_dir, data, _, _ = saved(SentenceTask, tmp_path, monkeypatch)
    page = tmp_path / "page.html"
    assert main("bert", ["explore", "--model-dir", str(model_dir), "--output", str(page),
                         "--data", str(data), "--n", "2"]) == 0
    assert capsys.readouterr().out == f"explorer page written to {page}\n"
    html = page.read_text(encoding="utf-8")
    assert html.count('"answer":{"label":') == 2
