"""export-model --format onnx --quantize int8: the quantized model, its check against float32
and the refusal past --max-drop."""
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fake_tasks import SENTENCES, SentenceTask
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.shapes import softmax

tf = pytest.importorskip("tensorflow")
onnxruntime = pytest.importorskip("onnxruntime", reason="--format onnx needs pip install "
                                                        "'nlp_tutorials[onnx]'")
pytest.importorskip("tf2onnx", reason="--format onnx needs pip install 'nlp_tutorials[onnx]'")


@settings(max_examples=50, deadline=None)
@given(st.integers(3, 9), st.data())
def test_logits_of_a_label_give_it_its_probability_and_the_arg_max(labels, data):
    from nlp_tutorials.serving.savedmodel import logits_of_label

    label = np.array(data.draw(st.lists(st.integers(0, labels - 1), min_size=1, max_size=6)))
    # the arg-max's probability is at least 1 / labels (and below 1 here, to stay strict)
    probability = np.array([data.draw(st.floats(1 / labels + 1e-3, 1 - 1e-6))
                            for _ in label], np.float32)
    logits = logits_of_label(label, probability, labels)  # [n, labels]
    assert logits.shape == (len(label), labels)
    assert (logits.argmax(axis=-1) == label).all()
    got = softmax(logits)
    np.testing.assert_allclose(got[np.arange(len(label)), label], probability, rtol=1e-5)
    np.testing.assert_allclose(got.sum(axis=-1), 1, rtol=1e-5)


class FakeRunner:
    """A model in its runtime, feeds -> outputs by name, answering ``answer(feeds)`` (the
    outputs ``label`` and ``probability``, in that order)."""

    def __init__(self, answer):
        self.answer, self.fed = answer, []

    def __call__(self, feeds):
        self.fed.append(feeds)
        return dict(zip(("label", "probability"), self.answer(feeds)))


class FakeModule:
    """What ``answers`` reads of a serving module: a binary classifier's pad id and inverse."""
    model_pad_id = 0
    max_len = 6
    head = type("Head", (), {"per_position": False, "num_labels": 2})()

    def logits_from_answer(self, outputs):
        from nlp_tutorials.serving.savedmodel import SequenceModule

        return SequenceModule.logits_from_answer(self, outputs)


def test_answers_run_every_batch_in_order_and_measure_the_largest_change():
    from nlp_tutorials.serving.quantization import answers

    rng = np.random.default_rng(0)
    rows = 150  # three batches of 64, the last short
    ids = rng.integers(1, 50, (rows, 6)).astype(np.int32)
    ids[::3, 4:] = 0  # padding, which the mask must leave out
    p = rng.uniform(0.01, 0.99, rows).astype(np.float32)

    def model(shift):
        """A binary classifier answering P(label 1) = p (moved by ``shift``), row by row in
        the order the batches come."""
        done = []

        def answer(feeds):
            start, n = sum(done), len(feeds["input_ids"])
            done.append(n)
            probability = np.clip(p[start:start + n] + shift, 0, 1).astype(np.float32)
            return [(probability > 0.5).astype(np.int32), probability]
        return answer

    runners = {"float32": FakeRunner(model(0.0)), "int8": FakeRunner(model(0.03))}
    arrays = {"input_ids": ids, "token_type_ids": np.zeros_like(ids)}
    logits, largest = answers(runners, FakeModule(), arrays, display=None)
    assert list(largest) == ["int8"]  # each model against the first
    assert [len(feeds["input_ids"]) for feeds in runners["int8"].fed] == [64, 64, 22]
    fed = runners["float32"].fed[0]
    step = fed["input_ids"].shape[1]
    np.testing.assert_array_equal(fed["attention_mask"], (ids[:64, :step] != 0).astype(np.int32))
    np.testing.assert_allclose(softmax(logits["float32"])[:, 1], p, rtol=1e-5)
    np.testing.assert_allclose(softmax(logits["int8"])[:, 1], np.clip(p + 0.03, 0, 1),
                               rtol=1e-5)
    assert largest["int8"] == pytest.approx((np.clip(p + 0.03, 0, 1) - p).max(), abs=1e-6)


class ThreeLabelModule(FakeModule):
    """A three-label classifier's serving module: outputs ``label`` and its ``probability``."""
    max_len = 12
    head = type("Head", (), {"per_position": False, "num_labels": 3})()


def test_the_check_keeps_the_int8_model_scoring_best_and_reports_each(tmp_path, monkeypatch):
    from sklearn.metrics import accuracy_score

    from nlp_tutorials.serving.quantization import Int8Check, int8_report
    from nlp_tutorials.text.tokenization import load_tokenizer
    from fake_tasks import TINY_BERT

    monkeypatch.setitem(TASKS, SentenceTask.name, SentenceTask)
    task, tokenizer = SentenceTask(), load_tokenizer(TINY_BERT)
    truth = np.array([0, 1, 2, 2, 1, 0, 0, 2, 1, 2])
    words = " ".join(SENTENCES).split()
    (tmp_path / "check.tsv").write_text("".join(
        f"{' '.join(words[i:i + 4])}\t{task.labels[label]}\n" for i, label in enumerate(truth)))
    float_p = np.linspace(0.5, 0.9, len(truth)).astype(np.float32)

    def runner(wrong: list, probability_shift: float):
        """Answers ``truth`` but on the rows ``wrong`` (label + 1), one batch in order."""
        def answer(feeds):
            labels = truth.copy()
            labels[wrong] = (labels[wrong] + 1) % 3
            return [labels.astype(np.int32), float_p + np.float32(probability_shift)]
        return FakeRunner(answer)

    runners = {"float32": runner([], 0.0), "int8, 7-bit weights": runner([1, 4], 0.02),
               "int8, 8-bit weights": runner([7], 0.05)}
    printed = []
    report = int8_report(runners, ThreeLabelModule(), task, tokenizer, tmp_path,
                         Int8Check(max_drop=50.0, file=str(tmp_path / "check.tsv")),
                         printer=printed.append)
    eight_bit = truth.copy()
    eight_bit[7] = 0
    assert report["recipe"] == "int8, 8-bit weights"  # 90% beats 80% on the check's examples
    assert report["scores"]["int8"]["accuracy"] == pytest.approx(accuracy_score(truth, eight_bit))
    assert report["drop_points"] == pytest.approx(10.0)
    assert report["changed_predictions"] == 1
    # every answer's probability moved by 0.05; the label ids are counted as changes instead
    assert report["largest_output_change"] == pytest.approx(0.05, abs=1e-6)
    seven = report["candidates"]["int8, 7-bit weights"]
    assert (seven["drop_points"], seven["changed_predictions"]) == (pytest.approx(20.0), 2)
    assert seven["largest_output_change"] == pytest.approx(0.02, abs=1e-6)
    assert printed[-4:] == [
        "Fake sentences dev, float32: accuracy 100.0%",
        "Fake sentences dev, int8, 7-bit weights: accuracy 80.0%",
        "Fake sentences dev, int8, 8-bit weights: accuracy 90.0%",
        "kept int8, 8-bit weights, the best on dev: it loses 10.00 points of accuracy on 10 "
        "examples; 1 prediction changed; outputs moved by at most 0.05"]
    with pytest.raises(UserError, match=r"^--max-drop 5: the int8 model scores accuracy 90\.0% "
                                        r"on Fake sentences dev against float32's 100\.0%"):
        int8_report(runners, ThreeLabelModule(), task, tokenizer, tmp_path,
                    Int8Check(max_drop=5.0, file=str(tmp_path / "check.tsv")),
                    printer=lambda line: None)


@pytest.mark.parametrize("candidates, kept", [
    # the higher score wins, whatever else
    ({"a": (0.80, 3, 0.1), "b": (0.82, 9, 0.9)}, "b"),
    # the same score: the fewer predictions changed
    ({"a": (0.80, 5, 0.1), "b": (0.80, 2, 0.9)}, "b"),
    # the same score and changes: the smaller move of an output
    ({"a": (0.80, 2, 0.3), "b": (0.80, 2, 0.2)}, "b"),
    # a full tie: the first, the 7-bit weights every CPU multiplies without saturating
    ({"a": (0.80, 2, 0.2), "b": (0.80, 2, 0.2)}, "a"),
    # a regression counts no predictions: the score, then the outputs' move
    ({"a": (0.85, None, 0.3), "b": (0.85, None, 0.1)}, "b"),
])
def test_the_kept_recipe_ranks_score_then_changes_then_the_largest_move(candidates, kept):
    from nlp_tutorials.serving.quantization import kept_recipe

    reports = {name: {"scores": {"metric": score}, "changed_predictions": changed,
                      "largest_output_change": largest}
               for name, (score, changed, largest) in candidates.items()}
    assert kept_recipe(reports, "metric") == kept


def test_answer_of_names_what_a_prediction_answers():
    from nlp_tutorials.serving.quantization import answer_of
    from nlp_tutorials.tasks.glue import ScorePrediction
    from nlp_tutorials.tasks.shapes import ClassPrediction

    assert answer_of(ClassPrediction(2, np.ones(3))) == 2
    assert answer_of(["B-PER", "O"]) == ("B-PER", "O")
    assert answer_of(ScorePrediction(3.2)) is None


def test_largest_change_leaves_padding_and_ids_out():
    from nlp_tutorials.serving.quantization import largest_change

    mask = np.array([[1, 1, 0]])
    first = {"tag_id": np.array([[1, 2, 3]]), "probability": np.array([[0.5, 0.6, 0.1]])}
    second = {"tag_id": np.array([[4, 4, 4]]), "probability": np.array([[0.45, 0.6, 0.9]])}
    assert largest_change(first, second, mask) == pytest.approx(0.05)


def predicted_file(head, tokenizer, task, path, rows: int = 80):
    """``rows`` sentences of the fakes' words in ``task``'s file format, each labelled with the
    float model's own answer, so float32 scores 100% and every int8 change costs accuracy.
    Returns (the examples, their float labels)."""
    from fake_tasks import Sentence

    rng = np.random.default_rng(4)
    words = " ".join(SENTENCES).split()
    texts = [" ".join(rng.choice(words, rng.integers(3, 9))) for _ in range(rows)]
    arrays = task.encode(tokenizer, [Sentence(t, task.labels[0]) for t in texts], task.max_len)
    logits = head({k: arrays[k] for k in ("input_ids", "token_type_ids")}, training=False)
    labels = logits.numpy().argmax(axis=-1)
    path.write_text("".join(f"{t}\t{task.labels[i]}\n" for t, i in zip(texts, labels)))
    return [Sentence(t, task.labels[i]) for t, i in zip(texts, labels)], labels


@pytest.fixture
def sentence_check(sentence_model, tmp_path, monkeypatch):
    """(model folder, the calibration file, its examples, float labels) of the tiny sentence
    model."""
    from nlp_tutorials.finetuned.folders import load_finetuned

    monkeypatch.setitem(TASKS, SentenceTask.name, SentenceTask)
    head, tokenizer, task = load_finetuned(sentence_model)
    examples, labels = predicted_file(head, tokenizer, task, tmp_path / "check.tsv")
    return sentence_model, tmp_path / "check.tsv", examples, labels


@pytest.mark.slow
def test_an_int8_model_is_written_with_its_check_scored_independently(sentence_check,
                                                                      tmp_path):
    import onnx
    from sklearn.metrics import accuracy_score

    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.serving.onnx_export import export_onnx
    from nlp_tutorials.serving.quantization import Int8Check

    model_dir, check_file, examples, labels = sentence_check
    printed = []
    path = export_onnx(model_dir, tmp_path / "served", printer=printed.append,
                       int8=Int8Check(max_drop=100.0, file=str(check_file)))
    proto = onnx.load(str(path))
    quantized = [node for node in proto.graph.node
                 if node.op_type in ("DynamicQuantizeMatMul", "MatMulInteger")]
    float_matmuls = [node for node in proto.graph.node if node.op_type == "MatMul"]
    # every Dense's matmul by a weight is int8; attention's two products of activations not
    assert quantized and len(float_matmuls) == 2 * 2  # 2 per layer, 2 layers in the fake
    assert {p.key for p in proto.metadata_props} == {"task", "labels", "max_len"}
    assert sorted(p.name for p in path.parent.iterdir()) == [
        "model.onnx", "quantization.json", "tokenizer_config.json", "vocab.txt"]

    head, tokenizer, task = load_finetuned(model_dir)
    arrays = task.encode(tokenizer, examples, task.max_len)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = {"input_ids": arrays["input_ids"], "token_type_ids": arrays["token_type_ids"],
             "attention_mask": (arrays["input_ids"] != tokenizer.pad_id).astype(np.int32)}
    int8_labels = dict(zip([o.name for o in session.get_outputs()],
                           session.run(None, feeds)))["label"]
    report = json.loads((path.parent / "quantization.json").read_text())
    assert report["examples"] == len(examples) == 80
    assert report["examples_from"] == str(check_file)
    assert report["scores"]["float32"]["accuracy"] == 1.0  # the labels are its answers
    assert report["scores"]["int8"]["accuracy"] == pytest.approx(
        accuracy_score(labels, int8_labels))
    assert report["changed_predictions"] == int((int8_labels != labels).sum())
    assert report["drop_points"] == pytest.approx(100 * (1 - accuracy_score(labels,
                                                                            int8_labels)))
    # the largest move of an answer's probability (the fake's classifier is widened: they
    # move by tenths); float32 ONNX and TensorFlow differ by 1e-4 here (test_onnx_export)
    float_probability = softmax(head({k: arrays[k] for k in ("input_ids", "token_type_ids")},
                                     training=False).numpy()).max(axis=-1)
    int8_probability = dict(zip([o.name for o in session.get_outputs()],
                                session.run(None, feeds)))["probability"]
    assert report["largest_output_change"] == pytest.approx(
        np.abs(float_probability - int8_probability).max(), abs=1e-3)
    assert printed[0].startswith("int8 check on Fake sentences dev: batch 1/2")  # progress
    drop = report["drop_points"]
    assert set(report["candidates"]) == {"int8, 7-bit weights", "int8, 8-bit weights"}
    assert report["candidates"][report["recipe"]]["drop_points"] == drop
    assert drop == min(found["drop_points"] for found in report["candidates"].values())
    assert f"Fake sentences dev, {report['recipe']}: accuracy {100 - drop:.1f}%" in printed
    changed = report["changed_predictions"]
    assert (f"kept {report['recipe']}, the best on dev: it loses {drop:.2f} points of accuracy "
            f"on 80 examples; {changed} prediction{'' if changed == 1 else 's'} changed; "
            f"outputs moved by at most {report['largest_output_change']:.2g}") in printed
    assert printed[-1] == (f"int8 ONNX model written to {path} (opset 17), its check in "
                           f"{path.parent / 'quantization.json'}")


def flipped_classifier(model_bytes):
    """The float ONNX model with its last weight matmul's sign turned: most answers change."""
    import onnx
    from onnx import numpy_helper

    proto = onnx.load_from_string(model_bytes)
    weights = {w.name: w for w in proto.graph.initializer}
    last = next(node for node in reversed(proto.graph.node) if node.op_type == "MatMul"
                and node.input[1] in weights)
    weight = weights[last.input[1]]
    weight.CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(weight), weight.name))
    return proto.SerializeToString()


@pytest.mark.slow
def test_the_kept_model_is_written_and_8_bit_weights_kept_on_vnni_are_noted(
        sentence_check, tmp_path, monkeypatch):
    import onnx

    from nlp_tutorials.serving import onnx_export
    from nlp_tutorials.serving.quantization import Int8Check

    # the "8-bit" model is the float one itself, so it scores 100% and is the one kept
    monkeypatch.setattr(onnx_export, "int8_candidates", lambda model_bytes: {
        "int8, 7-bit weights": flipped_classifier(model_bytes),
        "int8, 8-bit weights": model_bytes})
    monkeypatch.setattr(onnx_export.hardware, "has_vnni", lambda: True)
    model_dir, check_file, _, _ = sentence_check
    printed = []
    path = onnx_export.export_onnx(model_dir, tmp_path / "served", printer=printed.append,
                                   int8=Int8Check(max_drop=5.0, file=str(check_file)))
    report = json.loads((path.parent / "quantization.json").read_text())
    assert report["recipe"] == "int8, 8-bit weights" and report["drop_points"] == 0
    assert report["candidates"]["int8, 7-bit weights"]["drop_points"] > 5
    written = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "MatMul" in written and not written & {"DynamicQuantizeMatMul", "MatMulInteger"}
    assert printed[-2] == ("note: int8, 8-bit weights scored best on this CPU, which has "
                           "VNNI; a CPU without it (no avx512_vnni or avx_vnni flag) may "
                           "saturate their products: check the model there before serving "
                           "it there")


@pytest.mark.parametrize("flags, vnni", [("fpu avx2 fma avx512f avx512_vnni", True),
                                         ("fpu avx2 avx_vnni", True), ("fpu avx2 fma", False)])
def test_vnni_is_read_from_the_cpu_flags(tmp_path, flags, vnni):
    from nlp_tutorials.system.hardware import has_vnni

    (tmp_path / "cpuinfo").write_text(f"processor\t: 0\nflags\t\t: {flags}\n\n"
                                      f"processor\t: 1\nflags\t\t: {flags}\n")
    assert has_vnni(tmp_path / "cpuinfo") is vnni
    assert has_vnni(tmp_path / "missing") is None


@pytest.mark.slow
def test_an_int8_model_losing_more_than_max_drop_is_refused_and_nothing_written(
        sentence_check, tmp_path, monkeypatch):
    from nlp_tutorials.serving import onnx_export
    from nlp_tutorials.serving.quantization import Int8Check

    monkeypatch.setattr(onnx_export, "int8_candidates",
                        lambda model_bytes: {"int8": flipped_classifier(model_bytes)})
    model_dir, check_file, _, _ = sentence_check
    with pytest.raises(UserError, match=r"^--max-drop 5: the int8 model scores accuracy "
                                        r"[\d.]+% on Fake sentences dev against float32's "
                                        r"100\.0%, [\d.]+ points lower; nothing written"):
        onnx_export.export_onnx(model_dir, tmp_path / "served", printer=lambda line: None,
                                int8=Int8Check(max_drop=5.0, file=str(check_file)))
    assert not (tmp_path / "served").exists()


@pytest.mark.parametrize("dev_file, record, seen", [
    (False, {"config": {"dev_size": 0}}, True),   # trained on all of train: dev was seen
    (False, {"config": {"dev_size": None}}, False),  # the default held a tenth out
    (False, {"config": {"dev_size": 100}}, False),
    (True, {"config": {"dev_size": 0}}, False),   # a dev file of its own: never trained on
    (False, None, False),                          # no results.json: nothing to say
    (False, ["not", "an", "object"], False),
])
def test_a_dev_split_held_out_of_train_is_seen_only_after_dev_size_0(tmp_path, dev_file,
                                                                      record, seen):
    from nlp_tutorials.serving.quantization import seen_in_training

    task = type("Task", (), {"path": lambda self, split: tmp_path / "dev.tsv" if dev_file
                             else None})()
    if record is not None:
        (tmp_path / "results.json").write_text(json.dumps(record))
    assert seen_in_training(task, tmp_path) is seen
