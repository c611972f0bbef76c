"""`bert heads` on models of every task shape: importance and entropy read each shape's arrays,
and the command scores a task's own dev file (``--data``), studies its test split or, without
one, its dev split, prunes and recovers."""
import json
from types import SimpleNamespace

import numpy as np
import pytest
import tensorflow as tf

from fake_tasks import (TINY_BERT, ChoiceTask, ScoreTask, SentenceTask, save_model,
                        tiny_task_head, write_files)
from nlp_tutorials.analysis import bertology
from nlp_tutorials.bert import BERT
from nlp_tutorials.cli.settings import HeadsSettings
from nlp_tutorials.models import task_heads
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.finetuned.folders import load_finetuned
from support import without_progress

MAX_LEN = 24


def summed_gradients(head, arrays: dict) -> np.ndarray:
    """The independent computation: each padded row's loss (no trimming, eager), its gradient
    in the head mask, absolute values summed over the rows, normalised per layer."""
    layers, count = head.backbone.config.num_hidden_layers, head.backbone.config.num_attention_heads
    mask = tf.Variable(np.ones([layers, count]), dtype=tf.float32)
    total = np.zeros([layers, count])
    for row in range(len(arrays["input_ids"])):
        with tf.GradientTape() as tape:
            loss, _ = head.loss_and_metrics({**{k: v[row:row + 1] for k, v in arrays.items()},
                                             "head_mask": mask})
        total += np.abs(tape.gradient(loss, mask).numpy())
    return total / np.linalg.norm(total, axis=1, keepdims=True)


@pytest.mark.parametrize("task_class", [SentenceTask,
                                        pytest.param(ScoreTask, marks=pytest.mark.slow),
                                        pytest.param(ChoiceTask, marks=pytest.mark.slow)])
def test_importance_of_sequence_regression_and_choice_heads(task_class, tmp_path):
    task = task_class(data_dir=write_files(task_class(), tmp_path))
    head, tokenizer = tiny_task_head(task)
    arrays = task.shape.for_model(task.encode(tokenizer, task.examples("dev"), MAX_LEN))
    np.testing.assert_allclose(bertology.importance(head, arrays),
                               summed_gradients(head, arrays), rtol=1e-4, atol=1e-6)


def tagged_arrays(rng, rows: int = 3, step: int = 12, vocab: int = 100) -> dict:
    """Encoded token and span examples made by hand: real ids then padding (id 0)."""
    lengths = rng.integers(5, step, rows)
    ids = np.zeros([rows, step], np.int32)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(5, vocab, length)
    real = (ids != 0).astype(np.float32)
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
            "tag_ids": np.where(real > 0, rng.integers(0, 3, ids.shape), 0).astype(np.int32),
            "tag_weights": real * (rng.random(ids.shape) < 0.7),
            "start_positions": (lengths // 3).astype(np.int32),
            "end_positions": (lengths // 2).astype(np.int32)}


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["token", "span"])
def test_importance_of_token_and_span_heads(shape, tmp_path):
    rng = np.random.default_rng(3)
    backbone = BERT.from_pretrained(TINY_BERT, printer=lambda line: None)
    head = (task_heads.TokenClassifier(backbone, num_labels=3, dropout=0.0) if shape == "token"
            else task_heads.SpanExtractor(backbone))
    keep = {"token": ("start_positions", "end_positions"), "span": ("tag_ids", "tag_weights")}
    arrays = {k: v for k, v in tagged_arrays(rng).items() if k not in keep[shape]}
    np.testing.assert_allclose(bertology.importance(head, arrays),
                               summed_gradients(head, arrays), rtol=1e-4, atol=1e-6)


def test_one_by_one_trims_per_token_arrays():
    rng = np.random.default_rng(0)
    arrays = tagged_arrays(rng)
    head = SimpleNamespace(backbone=SimpleNamespace(config=SimpleNamespace(pad_token_id=0)))
    examples = list(bertology.one_by_one(head, arrays))
    assert len(examples) == 3 and all(set(e) == set(arrays) for e in examples)
    for row, example in enumerate(examples):
        length = np.count_nonzero(arrays["input_ids"][row])
        for name in ("input_ids", "token_type_ids", "tag_ids", "tag_weights"):
            np.testing.assert_array_equal(example[name], arrays[name][row:row + 1, :length])
        assert example["start_positions"].tolist() == [arrays["start_positions"][row]]


@pytest.mark.slow
def test_entropy_of_a_choice_model_averages_each_choices_real_queries(tmp_path):
    task = ChoiceTask(data_dir=write_files(ChoiceTask(), tmp_path))
    head, tokenizer = tiny_task_head(task)
    arrays = task.encode(tokenizer, task.examples("dev"), MAX_LEN)
    expected = np.zeros([2, 4])
    for row in range(len(arrays["input_ids"])):
        entropies, queries = np.zeros([2, 4]), 0
        for ids, types in zip(arrays["input_ids"][row], arrays["token_type_ids"][row]):
            length = np.count_nonzero(ids)
            out = head.backbone.encode(ids[None, :length], types[None, :length])
            for layer, probs in enumerate(out["attentions"]):
                p = probs.numpy()[0]  # [heads, query, key]
                entropies[layer] += (-(p * np.log(p + 1e-12)).sum(-1)).sum(-1)
            queries += length
        expected += entropies / queries / len(arrays["input_ids"])
    np.testing.assert_allclose(bertology.entropy(head, arrays), expected, rtol=1e-4)


@pytest.fixture
def sentence_model(tmp_path, monkeypatch):
    """A saved model of the three-label sentence task and its data folder (train, dev)."""
    monkeypatch.setitem(TASKS, SentenceTask.name, SentenceTask)
    task = SentenceTask()
    head, tokenizer = tiny_task_head(task)
    data = write_files(task, tmp_path / "data")
    train = (data / "train.tsv").read_text()
    (data / "train.tsv").write_text(train * 3)  # 18 examples: one batch of 16 to recover on
    return save_model(head, tokenizer, task, tmp_path / "model"), data


@pytest.mark.slow
def test_heads_of_a_task_model_score_its_dev_file_study_dev_and_prune(sentence_model,
                                                                       tmp_path):
    model_dir, data = sentence_model
    lines = []
    result = bertology.heads_command(HeadsSettings(
        model_dir=model_dir, output_dir=tmp_path / "pictures", study=True, random_orders=1,
        prune=0.25, recover_epochs=1, data=data), printer=lines.append)
    written = json.loads((model_dir / bertology.IMPORTANCE_FILE).read_text())
    assert written["dev_pairs"] == 6  # every line of dev.tsv, none held out of train
    assert without_progress(lines)[0].startswith("head importance of 6 dev sentences written to")
    assert "Fake sentences has no test file: the study scores the dev split" in lines
    study = json.loads((model_dir / bertology.STUDY_FILE).read_text())
    assert study["split"] == "dev" and len(study["importance_order"]) == 10
    head, tokenizer, task = load_finetuned(model_dir, data_dir=data)
    unmasked = bertology.score_examples(head, task, task.examples("dev"),
                                        task.encode(tokenizer, task.examples("dev"), MAX_LEN))
    assert study["importance_order"][0] == pytest.approx(unmasked)
    assert any(line.startswith("recovery epoch 1: train loss") for line in lines)
    pruned = load_finetuned(tmp_path / "model_pruned25")
    assert pruned.task.labels == SentenceTask.labels
    assert sum(map(len, pruned.head.backbone.config.pruned_heads.values())) == 2
    assert result["pruned"] == {int(k): v for k, v in pruned.head.backbone.config
                                .pruned_heads.items()}


@pytest.mark.slow
def test_heads_of_a_task_model_study_its_test_file_when_there_is_one(sentence_model, tmp_path):
    model_dir, data = sentence_model
    (data / "test.tsv").write_text("a fine , warm story\thigh\nnothing happens\tlow\n")
    lines = []
    result = bertology.heads_command(HeadsSettings(
        model_dir=model_dir, output_dir=tmp_path / "pictures", study=True, random_orders=1,
        data=data), printer=lines.append)
    assert result["study"]["split"] == "test"
    assert not any("no test file" in line for line in lines)
    assert result["study"]["importance_order"][0]["accuracy"] in (0.0, 0.5, 1.0)


def test_heads_of_a_task_model_without_data_is_one_line(sentence_model, tmp_path):
    model_dir, _ = sentence_model
    with pytest.raises(UserError) as error:
        bertology.heads_command(HeadsSettings(model_dir=model_dir,
                                              output_dir=tmp_path / "pictures"))
    message = str(error.value)
    assert "\n" not in message and "Fake sentences model" in message
    assert "expected --data DIR" in message and "train.tsv, dev.tsv" in message
    with pytest.raises(UserError, match="--data .*nowhere: no such folder"):
        bertology.heads_command(HeadsSettings(model_dir=model_dir, output_dir=tmp_path / "pictures",
                                              data=tmp_path / "nowhere"))


@pytest.mark.slow
def test_the_heads_command_line_reads_data(sentence_model, tmp_path, capsys):
    from nlp_tutorials.cli import main

    model_dir, data = sentence_model
    pictures = str(tmp_path / "pictures")
    assert main("bert", ["heads", "--model-dir", str(model_dir), "--output-dir", pictures]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "expected --data DIR" in err
    assert main("bert", ["heads", "--model-dir", str(model_dir), "--output-dir", pictures,
                         "--data", str(data)]) == 0
    assert "head importance of 6 dev sentences" in capsys.readouterr().out
    assert json.loads((model_dir / bertology.IMPORTANCE_FILE).read_text())["dev_pairs"] == 6
