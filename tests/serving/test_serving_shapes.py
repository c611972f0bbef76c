"""export-model for every task shape it serves: a sentence task with three named labels, a
regression and a multiple-choice task, each exported and called in a fresh Python, against
the head's own outputs on the task's encoding, at the task's maximum length; a shape with no
serving module is refused in one line. Token tagging: test_tagging_export.py; spans:
test_span_export.py."""
import numpy as np
import pytest

from fake_tasks import (ChoiceTask, Question, ScoreTask, Sentence, SentenceTask, save_model,
                        tiny_wordpiece_head)
from fresh_process import load_elsewhere
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.shapes import SequenceShape, softmax
from nlp_tutorials.tasks.mrpc import MrpcTask

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text: "
                                              "pip install tensorflow-text")

SENTENCES = ["a fine , warm story", "the film was dull and long", "", "unseen zebras",
             "the best film of the year , and a warm evening at the film"]
QUESTIONS = [("the man opened the door", ["and walked in", "then slept", "of the river"]),
             ("the dog ran", ["into the park", "after the ball", ""]),
             ("she picked up the phone and called", ["home", "the man", "a blue number"])]


def exported(task_class, tmp_path, monkeypatch):
    """(head, tokenizer, task, SavedModel folder) of a tiny model of ``task_class``."""
    from nlp_tutorials.serving.savedmodel import export_model

    monkeypatch.setitem(TASKS, task_class.name, task_class)
    task = task_class()
    head, tokenizer = tiny_wordpiece_head(task)
    model_dir = save_model(head, tokenizer, task, tmp_path / "model")
    printed = []
    version = export_model(model_dir, tmp_path / "served", printer=printed.append)
    return head, tokenizer, task, version, printed


def head_outputs(head, tokenizer, task, examples, max_len=None):
    """The head's logits on the task's own encoding, numpy; by default at predict's length
    (the task's, at most the positions)."""
    from nlp_tutorials.finetuned.inference import head_outputs as outputs

    max_len = max_len or min(task.max_len, head.backbone.config.max_position_embeddings)
    return outputs(head, task.encode(tokenizer, examples, max_len))


@pytest.mark.slow
def test_a_sentence_task_with_three_named_labels(sentence_model, sentence_savedmodel,
                                                 monkeypatch):
    from nlp_tutorials.finetuned.folders import load_finetuned

    monkeypatch.setitem(TASKS, SentenceTask.name, SentenceTask)
    head, tokenizer, task = load_finetuned(sentence_model)
    version, printed = sentence_savedmodel
    assert printed[-1].endswith("(signatures: encode, predict_ids, serving_default)")
    answer = load_elsewhere(version, {"serving_default": {"sentence": SENTENCES}})
    got = answer["serving_default"]
    examples = [Sentence(text, "low") for text in SENTENCES]
    probabilities = softmax(head_outputs(head, tokenizer, task, examples))  # [n, 3]
    want = probabilities.argmax(axis=1)
    assert probabilities.std(axis=0).max() > 0.01  # answers differ: a wrong layout shows
    assert got["label"] == want.tolist()
    assert got["label_name"] == [task.labels[i] for i in want]
    np.testing.assert_allclose(got["probability"], probabilities.max(axis=1), atol=1e-5)


@pytest.mark.slow
def test_a_regression_answers_its_score(tmp_path, monkeypatch):
    head, tokenizer, task, version, _ = exported(ScoreTask, tmp_path, monkeypatch)
    got = load_elsewhere(version, {"serving_default": {"sentence": SENTENCES}})
    examples = [Sentence(text, "0") for text in SENTENCES]
    scores = head_outputs(head, tokenizer, task, examples)[:, 0]
    assert set(got["serving_default"]) == {"score"} and scores.std() > 0.01
    np.testing.assert_allclose(got["serving_default"]["score"], scores, atol=1e-4)


@pytest.mark.slow
def test_a_choice_task_answers_probabilities_and_the_chosen_ending(tmp_path, monkeypatch):
    head, tokenizer, task, version, printed = exported(ChoiceTask, tmp_path, monkeypatch)
    assert printed[-1].endswith("(signatures: predict_ids, serving_default)")
    inputs = {"context": [c for c, _ in QUESTIONS], "endings": [e for _, e in QUESTIONS]}
    examples = [Question(c, tuple(e), 0) for c, e in QUESTIONS]
    arrays = task.encode(tokenizer, examples,
                         min(task.max_len, head.backbone.config.max_position_embeddings))
    ids = {"input_ids": arrays["input_ids"].tolist(),  # [n, choices, step]
           "token_type_ids": arrays["token_type_ids"].tolist(),
           "attention_mask": (arrays["input_ids"] != tokenizer.pad_id).astype(int).tolist()}
    answer = load_elsewhere(version, {"serving_default": inputs, "predict_ids": ids})
    got = answer["serving_default"]
    probabilities = softmax(head_outputs(head, tokenizer, task, examples))  # [n, 3]
    np.testing.assert_allclose(answer["predict_ids"]["probabilities"], probabilities, atol=1e-5)
    assert probabilities.std() > 0.01
    np.testing.assert_allclose(got["probabilities"], probabilities, atol=1e-5)
    chosen = probabilities.argmax(axis=1)
    assert got["choice"] == chosen.tolist()
    assert got["ending"] == [e[i] for (_, e), i in zip(QUESTIONS, chosen)]


def test_mrpc_labels_named_by_their_numbers_get_no_label_name():
    from nlp_tutorials.serving.savedmodel import SequenceModule

    class Head:
        num_labels = 2
        backbone = type("B", (), {"config": type("C", (), {"max_position_embeddings": 8,
                                                           "pad_token_id": 0})})

    tokenizer = type("T", (), {"cls_id": 2, "sep_id": 3, "pad_id": 0})()
    assert SequenceModule(Head(), tokenizer, MrpcTask(), strings=False).label_names is None
    named = SequenceModule(Head(), tokenizer, SentenceTask(labels=("no", "yes")), strings=False)
    assert named.label_names.numpy().tolist() == [b"no", b"yes"]


@pytest.mark.slow
def test_a_sentence_is_truncated_at_the_tasks_max_len_not_the_positions():
    from nlp_tutorials.serving.savedmodel import SequenceModule

    task = SentenceTask(max_len=6)
    head, tokenizer = tiny_wordpiece_head(task)  # 24 positions
    examples = [Sentence(text, "low") for text in SENTENCES]
    # As a graph, as a SavedModel runs it and as predict's logits are computed: oneDNN picks
    # other kernels for eager ops on some CPUs (AVX-512), whose sums differ in the last bits.
    module = SequenceModule(head, tokenizer, task)
    got = tf.function(module.serving_default)(tf.constant(SENTENCES))
    want = softmax(head_outputs(head, tokenizer, task, examples))  # at 6 tokens
    np.testing.assert_allclose(got["probability"], want.max(axis=1), atol=1e-5)
    at_positions = softmax(head_outputs(head, tokenizer, task, examples, max_len=24))
    assert np.abs(at_positions - want).max() > 0.01  # the long sentences answer otherwise


def test_a_shape_without_a_serving_module_is_refused_in_one_line(tmp_path, monkeypatch):
    from nlp_tutorials.serving.savedmodel import export_model

    class Unserved(SentenceTask):
        name, title = "fake_unserved", "Fake unserved"

    monkeypatch.setitem(TASKS, Unserved.name, Unserved)
    task = Unserved()
    head, tokenizer = tiny_wordpiece_head(task)
    save_model(head, tokenizer, task, tmp_path / "model")
    class UnservedShape(SequenceShape):  # a shape no serving module registered for
        name = "unserved"

    monkeypatch.setattr(Unserved, "shape", UnservedShape())
    with pytest.raises(UserError) as error:
        export_model(tmp_path / "model", tmp_path / "served")
    assert str(error.value) == (f"{tmp_path / 'model'}: a Fake unserved model, of shape "
                                f"'unserved'; export-model serves the shapes choice, sequence, "
                                f"span and token")
    assert not (tmp_path / "served").exists()


@pytest.mark.slow
def test_xla_compiled_signatures_answer_as_the_plain_ones():
    from nlp_tutorials.serving.savedmodel import ChoiceModule, SequenceModule

    task = SentenceTask()
    head, tokenizer = tiny_wordpiece_head(task)
    plain, compiled = (SequenceModule(head, tokenizer, task, xla=xla) for xla in (False, True))
    sentences = tf.constant(SENTENCES)
    want, got = plain.serving_default(sentences), compiled.serving_default(sentences)
    assert got["label"].numpy().tolist() == want["label"].numpy().tolist()
    # Widened output layer: see tests/speed/test_compiled.py for the tolerance.
    np.testing.assert_allclose(got["probability"], want["probability"], atol=1e-3)
    task = ChoiceTask()
    head, tokenizer = tiny_wordpiece_head(task)
    plain, compiled = (ChoiceModule(head, tokenizer, task, xla=xla) for xla in (False, True))
    inputs = (tf.constant([c for c, _ in QUESTIONS]), tf.constant([e for _, e in QUESTIONS]))
    want, got = plain.serving_default(*inputs), compiled.serving_default(*inputs)
    assert got["choice"].numpy().tolist() == want["choice"].numpy().tolist()
    np.testing.assert_allclose(got["probabilities"], want["probabilities"], atol=1e-3)


def test_xla_is_refused_for_a_tagger_in_one_line(tmp_path, monkeypatch):
    from nlp_tutorials.serving.savedmodel import export_model
    from nlp_tutorials.tasks.conll import ConllTask

    task = ConllTask(labels=("O", "B-LOC", "I-LOC"))
    head, tokenizer = tiny_wordpiece_head(task)
    model_dir = save_model(head, tokenizer, task, tmp_path / "model")
    with pytest.raises(UserError, match=r"^--xla: .*/model is a CoNLL-2003 model, of shape "
                                        r"'token'; --xla compiles the shapes sequence and "
                                        r"choice only$"):
        export_model(model_dir, tmp_path / "served", xla=True)
    assert not (tmp_path / "served").exists()
