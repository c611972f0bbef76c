"""export-model --format tflite: LiteRT's answers against the head's own for each task shape
(a sentence task with named labels, a token tagger, a multiple-choice task and a span model,
each a tiny fresh BERT encoded as ``predict`` encodes), inputs resized between batches; what
is written beside the model; the int8 model and its check; a missing runtime."""
import json

import numpy as np
import pytest

from fake_tasks import (CONTEXTS, SENTENCES, ChoiceTask, Question, Sentence, SentenceTask,
                        save_model, tiny_wordpiece_head, write_files)
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.conll import ConllTask
from nlp_tutorials.tasks.shapes import softmax
from nlp_tutorials.tasks.squad import SquadTask
from nlp_tutorials.text.tokenization import load_tokenizer

tf = pytest.importorskip("tensorflow")
pytest.importorskip("ai_edge_litert", reason="--format tflite needs pip install "
                                             "'nlp_tutorials[litert]'")

TAGS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
# As for ONNX (test_onnx_export.WIDENED): the fakes' output layers are scaled up some 10,000
# times, so float32 rounding in the encoder, about 1e-7, reaches 1e-4 in their probabilities;
# a wrong layout or op moves them by 0.1 and more. Outputs not widened: 1e-5.
WIDENED = 1e-3
CLOSE = 1e-5
WORDS = [text.split() for text in SENTENCES if text.strip()]


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


def encoded(head, tokenizer, task, examples):
    """The task's own encoding at predict's length, and the head's logits on it (numpy)."""
    max_len = min(task.max_len, head.backbone.config.max_position_embeddings)
    arrays = task.encode(tokenizer, examples, max_len)
    logits = head({k: arrays[k] for k in ("input_ids", "token_type_ids")}, training=False)
    return arrays, logits.numpy()


@pytest.mark.slow
def test_a_sentence_task_answers_its_probabilities_at_any_shape(tmp_path, monkeypatch):
    from nlp_tutorials.serving.tflite_export import LiteRtRunner, read_metadata

    task = SentenceTask(max_len=10)
    head, tokenizer, path, printed = exported(task, tmp_path, monkeypatch)
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
@pytest.mark.parametrize("shape", ["token", "choice", "span"])
def test_each_other_shape_answers_as_its_head(shape, tmp_path, monkeypatch):
    from nlp_tutorials.tasks.conll import Sentence as Tagged

    task = {"token": ConllTask(labels=TAGS), "choice": ChoiceTask(), "span": SquadTask()}[shape]
    head, tokenizer, path, _ = exported(task, tmp_path, monkeypatch)
    if shape == "token":
        examples = [Tagged(tuple(words), ("O",) * len(words), line)
                    for line, words in enumerate(WORDS, 1)]
        arrays, logits = encoded(head, tokenizer, task, examples)
        got = run_tflite(path, arrays, tokenizer.pad_id)
        probabilities = softmax(logits)  # [n, step, tags]
        assert set(got) == {"tag_id", "probability"}
        real = arrays["input_ids"] != tokenizer.pad_id
        np.testing.assert_allclose(got["probability"][real], probabilities.max(axis=-1)[real],
                                   atol=CLOSE)
        assert (got["tag_id"][real] == probabilities.argmax(axis=-1)[real]).all()
    elif shape == "choice":
        arrays, logits = encoded(head, tokenizer, task,
                                 [Question(c, e, 0) for c, e in CONTEXTS])
        got = run_tflite(path, arrays, tokenizer.pad_id)  # ids [n, choices, step]
        probabilities = softmax(logits)  # [n, choices]
        assert set(got) == {"choice", "probabilities"} and probabilities.std() > 0.01
        np.testing.assert_allclose(got["probabilities"], probabilities, atol=WIDENED)
        assert got["choice"].tolist() == probabilities.argmax(axis=1).tolist()
    else:
        rng = np.random.default_rng(1)
        ids = rng.integers(5, tokenizer.vocab_size, (3, 20)).astype(np.int32)
        ids[2, 14:] = tokenizer.pad_id
        arrays = {"input_ids": ids, "token_type_ids": (np.arange(20) >= 8).astype(np.int32)
                  * np.ones_like(ids)}
        logits = head(arrays, training=False)
        got = run_tflite(path, arrays, tokenizer.pad_id)
        assert sorted(got) == ["end_logits", "start_logits"]
        for name in got:
            np.testing.assert_allclose(got[name], logits[name].numpy(), atol=CLOSE)


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


def test_a_missing_runtime_is_one_line(monkeypatch, tmp_path):
    import sys

    from nlp_tutorials.serving import tflite_export

    monkeypatch.setitem(sys.modules, "ai_edge_litert", None)  # import ai_edge_litert fails
    with pytest.raises(UserError, match=r"^--format tflite needs ai-edge-litert: pip install "
                                        r"'nlp_tutorials\[litert\]'$"):
        tflite_export.export_tflite(tmp_path / "model", tmp_path / "served")
