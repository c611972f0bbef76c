"""export-model --format onnx: ONNX Runtime's answers against the head's own, for a sentence
task with named labels, a token tagger, a multiple-choice task and a span model, each a tiny
fresh BERT encoded as ``predict`` encodes; what is written beside the model; the refusals."""
import json

import numpy as np
import pytest

from answers_by_shape import OTHER_SHAPES, WIDENED, check_answers, encoded, shape_task
from fake_tasks import SENTENCES, Sentence, SentenceTask, save_model, tiny_wordpiece_head
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.tasks.shapes import softmax
from nlp_tutorials.text.tokenization import load_tokenizer

tf = pytest.importorskip("tensorflow")
onnxruntime = pytest.importorskip("onnxruntime", reason="--format onnx needs pip install "
                                                        "'nlp_tutorials[onnx]'")
pytest.importorskip("tf2onnx", reason="--format onnx needs pip install 'nlp_tutorials[onnx]'")
from test_serving import predict_probabilities  # noqa: E402


def exported(task, tmp_path, monkeypatch):
    """(head, tokenizer, path of model.onnx, printed lines) of a tiny model of ``task``."""
    from nlp_tutorials.serving.onnx_export import export_onnx

    monkeypatch.setitem(TASKS, task.name, type(task))
    head, tokenizer = tiny_wordpiece_head(task)
    model_dir = save_model(head, tokenizer, task, tmp_path / "model")
    printed = []
    path = export_onnx(model_dir, tmp_path / "served", printer=printed.append)
    return head, tokenizer, path, printed


def run_onnx(path, arrays, pad_id: int) -> dict:
    """ONNX Runtime's outputs by name for encoded ``arrays``, the mask from the padding."""
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": arrays["input_ids"].astype(np.int32),
             "token_type_ids": arrays["token_type_ids"].astype(np.int32),
             "attention_mask": (arrays["input_ids"] != pad_id).astype(np.int32)}
    names = [output.name for output in session.get_outputs()]
    return dict(zip(names, session.run(None, feeds)))


@pytest.mark.slow
def test_a_sentence_task_answers_predicts_probabilities(sentence_model, sentence_onnx,
                                                        monkeypatch):
    from nlp_tutorials.finetuned.folders import load_finetuned

    monkeypatch.setitem(TASKS, SentenceTask.name, SentenceTask)
    head, tokenizer, task = load_finetuned(sentence_model)
    path, printed = sentence_onnx
    assert printed == [f"ONNX model written to {path} (opset 17; ONNX Runtime's outputs "
                       f"within {printed[0].split('within ')[1].split(' ')[0]} of "
                       f"TensorFlow's on a probe batch)"]
    arrays, logits = encoded(head, tokenizer, task, [Sentence(t, "low") for t in SENTENCES])
    got = run_onnx(path, arrays, tokenizer.pad_id)
    probabilities = softmax(logits)  # [n, 3]
    assert set(got) == {"label", "probability"}  # label_name is text: in the metadata instead
    assert probabilities.std(axis=0).max() > 0.01  # answers differ: a wrong layout shows
    np.testing.assert_allclose(got["probability"], probabilities.max(axis=1), atol=WIDENED)
    assert got["label"].tolist() == probabilities.argmax(axis=1).tolist()


@pytest.mark.slow
def test_metadata_and_tokenizer_travel_with_the_model(tmp_path, monkeypatch):
    import onnx

    task = SentenceTask(max_len=10)
    _, tokenizer, path, _ = exported(task, tmp_path, monkeypatch)
    metadata = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert metadata == {"task": task.name, "labels": json.dumps(list(task.labels)),
                        "max_len": "10"}
    assert sorted(p.name for p in path.parent.iterdir()) == ["model.onnx",
                                                              "tokenizer_config.json",
                                                              "vocab.txt"]
    assert load_tokenizer(path.parent).vocab == tokenizer.vocab


@pytest.mark.slow
@pytest.mark.parametrize("shape", OTHER_SHAPES)
def test_each_other_shape_answers_as_its_head(shape, tmp_path, monkeypatch):
    task = shape_task(shape)
    head, tokenizer, path, _ = exported(task, tmp_path, monkeypatch)
    check_answers(shape, head, tokenizer, task, lambda arrays, pad_id: run_onnx(path, arrays,
                                                                                 pad_id))


@pytest.mark.slow
def test_a_conversion_that_answers_otherwise_is_refused_and_writes_nothing(tmp_path,
                                                                          monkeypatch):
    from nlp_tutorials.serving import onnx_export

    monkeypatch.setattr(onnx_export, "largest_difference", lambda *args: 0.25)
    with pytest.raises(UserError, match=r"^ONNX conversion: ONNX Runtime's outputs differ from "
                                        r"TensorFlow's by 0\.25 on a probe batch \(expected at "
                                        r"most 0\.0001\)$"):
        exported(SentenceTask(), tmp_path, monkeypatch)
    assert not (tmp_path / "served").exists()


def test_a_missing_converter_is_one_line(monkeypatch, tmp_path):
    import sys

    from nlp_tutorials.serving import onnx_export

    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # import tf2onnx raises ImportError
    with pytest.raises(UserError, match=r"^--format onnx needs tf2onnx: pip install "
                                        r"'nlp_tutorials\[onnx\]' \(tf2onnx and onnxruntime\)$"):
        onnx_export.export_onnx(tmp_path / "model", tmp_path / "served")


@pytest.mark.slow
def test_minilm_answers_predicts_probabilities(minilm_mrpc, tmp_path):
    from nlp_tutorials.serving.onnx_export import export_onnx
    from nlp_tutorials.tasks.mrpc import MrpcTask

    path = export_onnx(minilm_mrpc, tmp_path / "served", printer=lambda *_: None)
    pairs = load_mrpc("test")[:32]
    want = predict_probabilities(minilm_mrpc, pairs)
    assert want.std() > 0.1
    tokenizer = load_tokenizer(minilm_mrpc)
    arrays = MrpcTask().encode(tokenizer, pairs, 128)
    got = run_onnx(path, arrays, tokenizer.pad_id)
    np.testing.assert_allclose(got["probability"], want, atol=1e-5)
