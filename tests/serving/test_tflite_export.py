"""export-model --format tflite: LiteRT's answers against the head's own for each task shape
(a sentence task with named labels, a token tagger, a multiple-choice task and a span model,
each a tiny fresh BERT encoded as ``predict`` encodes), inputs resized between batches; what
is written beside the model and to standard error; the int8 model and its check; a missing
runtime."""
import json
import re

import numpy as np
import pytest

from answers_by_shape import OTHER_SHAPES, WIDENED, check_answers, encoded, shape_task
from fake_tasks import (SENTENCES, Sentence, SentenceTask, save_model, tiny_wordpiece_head,
                        write_files)
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.shapes import softmax
from nlp_tutorials.text.tokenization import load_tokenizer

tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert", reason="--format tflite needs pip install "
                                             "'nlp_tutorials[litert]'")


def exported(task, tmp_path, monkeypatch, hidden_size: int = 16, **options):
    """(head, tokenizer, path of model.tflite, printed lines) of a tiny model of ``task``."""
    from nlp_tutorials.serving.tflite_export import export_tflite

    monkeypatch.setitem(TASKS, task.name, type(task))
    head, tokenizer = tiny_wordpiece_head(task, hidden_size=hidden_size)
    model_dir = save_model(head, tokenizer, task, tmp_path / "model")
    printed = []
    path = export_tflite(model_dir, tmp_path / "served", printer=printed.append, **options)
    return head, tokenizer, path, printed


def run_tflite(path, arrays, pad_id: int) -> dict:
    """LiteRT's outputs by name for encoded ``arrays``, as a user runs the model: the
    interpreter's signature runner (which resizes the inputs), the mask from the padding."""
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_path=str(path)).get_signature_runner()
    return runner(input_ids=arrays["input_ids"].astype(np.int32),
                  token_type_ids=arrays["token_type_ids"].astype(np.int32),
                  attention_mask=(arrays["input_ids"] != pad_id).astype(np.int32))


@pytest.mark.slow
def test_a_sentence_task_answers_its_probabilities_at_any_shape(tmp_path, monkeypatch, capfd):
    from nlp_tutorials.serving.tflite_export import LiteRtRunner, read_metadata

    task = SentenceTask(max_len=10)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "2")  # the commands' level
    capfd.readouterr()
    head, tokenizer, path, printed = exported(task, tmp_path, monkeypatch)
    # the check's interpreter said nothing: its XNNPACK note went as TensorFlow's INFO lines go
    assert "XNNPACK" not in capfd.readouterr().err
    assert printed == [f"LiteRT model written to {path} (LiteRT's outputs within "
                       f"{printed[0].split('within ')[1].split(' ')[0]} of TensorFlow's on a "
                       f"probe batch)"]
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.tflite",
                                                              "tokenizer_config.json",
                                                              "vocab.txt"]
    assert load_tokenizer(path.parent).vocab == tokenizer.vocab
    assert read_metadata(path.read_bytes()) == {
        "task": task.name, "labels": json.dumps(list(task.labels)), "max_len": "10"}
    arrays, logits = encoded(head, tokenizer, task, [Sentence(t, "low") for t in SENTENCES])
    got = run_tflite(path, arrays, tokenizer.pad_id)
    probabilities = softmax(logits)  # [n, 3]
    assert set(got) == {"label", "probability"}  # label_name is text: in the metadata instead
    assert probabilities.std(axis=0).max() > 0.01  # answers differ: a wrong layout shows
    np.testing.assert_allclose(got["probability"], probabilities.max(axis=1), atol=WIDENED)
    assert got["label"].tolist() == probabilities.argmax(axis=1).tolist()
    # the export's own runner resizes the inputs: fewer rows, fewer positions, then all again
    runner = LiteRtRunner(path.read_bytes())
    for rows, step in ((3, 6), (len(SENTENCES), 10)):
        feeds = {"input_ids": arrays["input_ids"][:rows, :step],
                 "token_type_ids": arrays["token_type_ids"][:rows, :step],
                 "attention_mask": (arrays["input_ids"][:rows, :step]
                                    != tokenizer.pad_id).astype(np.int32)}
        cut = softmax(head({k: feeds[k] for k in ("input_ids", "token_type_ids")},
                           training=False).numpy())
        answered = runner(feeds)
        np.testing.assert_allclose(answered["probability"], cut.max(axis=1), atol=WIDENED)
        assert answered["label"].tolist() == cut.argmax(axis=1).tolist()


@pytest.mark.slow
@pytest.mark.parametrize("shape", OTHER_SHAPES)
def test_each_other_shape_answers_as_its_head(shape, tmp_path, monkeypatch):
    task = shape_task(shape)
    head, tokenizer, path, _ = exported(task, tmp_path, monkeypatch)
    check_answers(shape, head, tokenizer, task, lambda arrays, pad_id: run_tflite(path, arrays,
                                                                                   pad_id))


@pytest.mark.slow
def test_an_int8_model_is_smaller_and_written_with_its_check(tmp_path, monkeypatch):
    from nlp_tutorials.serving.quantization import Int8Check

    data = write_files(SentenceTask(), tmp_path / "data", splits=("dev",))
    # hidden 64: TensorFlow Lite leaves a weight of fewer than 1,024 values in float32
    head, _, path, printed = exported(SentenceTask(), tmp_path, monkeypatch, hidden_size=64,
                                      int8=Int8Check(max_drop=100.0, data_dir=str(data)))
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "model.tflite", "quantization.json", "tokenizer_config.json", "vocab.txt"]
    # float32 would take 4 bytes a weight; the embeddings' tables stay float32
    assert path.stat().st_size < 0.5 * 4 * head.count_params()
    report = json.loads((path.parent / "quantization.json").read_text())
    examples = len([s for s in SENTENCES if s.strip()])
    assert report["task"] == SentenceTask.name and report["examples"] == examples
    assert report["metric"] == "accuracy" and report["max_drop_points"] == 100.0
    assert report["drop_points"] == pytest.approx(100 * (
        report["scores"]["float32"]["accuracy"] - report["scores"]["int8"]["accuracy"]))
    # the weights are int8: answers move (the fake's widened classifier moves them by tenths)
    assert 0 < report["largest_output_change"] <= 1
    assert printed[-1] == (f"int8 LiteRT model written to {path}, its check in "
                           f"{path.parent / 'quantization.json'}")


@pytest.mark.parametrize("level, dropped", [(None, True), ("2", True), ("1", True), ("0", False),
                                             (" 0 ", False), ("loud", False)])
def test_litert_info_lines_go_unless_the_log_level_shows_info(level, dropped, monkeypatch):
    from nlp_tutorials.serving.tflite_export import litert_info

    if level is None:
        monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    else:
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", level)
    pattern = litert_info()
    note = "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.\n"
    assert (pattern is not None and re.match(pattern, note) is not None) == dropped
    if pattern is not None:  # LiteRT's errors always pass
        assert re.match(pattern, "ERROR: failed to prepare the XNNPACK delegate.\n") is None


def test_a_missing_runtime_is_one_line(monkeypatch, tmp_path):
    import sys

    from nlp_tutorials.serving import tflite_export

    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # import ai_edge_litert fails
    with pytest.raises(UserError, match=r"^--format tflite needs ai-edge-litert: pip install "
                                        r"'nlp_tutorials\[litert\]'$"):
        tflite_export.export_tflite(tmp_path / "model", tmp_path / "served")
