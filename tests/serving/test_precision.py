"""export-model --precision bfloat16: the head copied into bfloat16 (every weight the float32
one rounded, the products in bfloat16), its answers near float32's for every task shape, the
SavedModel's weights stored in bfloat16, and the note on a CPU without bfloat16 instructions."""
from pathlib import Path

import numpy as np
import pytest

from fake_tasks import ChoiceTask, SentenceTask, tiny_wordpiece_head
from nlp_tutorials.serving.precision import SLOW_HERE_NOTE, in_precision
from nlp_tutorials.system import hardware
from nlp_tutorials.system.hardware import has_bfloat16_instructions
from nlp_tutorials.tasks.conll import ConllTask
from nlp_tutorials.tasks.squad import SquadTask

tf = pytest.importorskip("tensorflow")

TASKS = {"sequence": SentenceTask, "choice": ChoiceTask,
         "token": lambda: ConllTask(labels=("O", "B-LOC", "I-LOC")), "span": SquadTask}


def inputs(task, tokenizer):
    """A batch of ids for ``task``'s head: [2, 7], or [2, 3, 7] for multiple choice."""
    rng = np.random.default_rng(0)
    shape = (2, 3, 7) if task.shape.name == "choice" else (2, 7)
    ids = rng.integers(5, tokenizer.vocab_size, shape).astype("int32")
    return {"input_ids": tf.constant(ids), "token_type_ids": tf.zeros(shape, tf.int32)}


@pytest.mark.parametrize("shape", sorted(TASKS))
def test_the_bfloat16_copy_rounds_every_weight_and_answers_near_float32(shape):
    task = TASKS[shape]()
    head, tokenizer = tiny_wordpiece_head(task)
    copy = in_precision(head, "bfloat16")
    assert len(copy.weights) == len(head.weights)
    for ours, theirs in zip(copy.weights, head.weights):
        # the same weight (the top model's name gets a number: bert_1/...)
        assert ours.path.split("/", 1)[1] == theirs.path.split("/", 1)[1]
        assert ours.dtype == "bfloat16"
        rounded = tf.cast(tf.cast(theirs, tf.bfloat16), tf.float32).numpy()
        np.testing.assert_array_equal(tf.cast(ours, tf.float32).numpy(), rounded)
    batch = inputs(task, tokenizer)
    batch["input_ids"] = tf.reshape(batch["input_ids"], [-1, 7])  # the encoder's [batch, step]
    batch["token_type_ids"] = tf.reshape(batch["token_type_ids"], [-1, 7])
    # The encoder's output: the fake heads' output layers are scaled up about 1e4 times (so
    # that answers differ between inputs), which bfloat16's rounding would swamp.
    want, have = (tf.cast(model.backbone(batch, training=False)["sequence_output"],
                          tf.float32).numpy() for model in (head, copy))
    # bfloat16 keeps 8 significant bits: about 0.4% a rounding, a few % after the layers.
    np.testing.assert_allclose(have, want, atol=0.05 * np.abs(want).max())
    assert np.abs(have - want).max() > 1e-4  # computed in bfloat16, not float32


def test_float32_is_the_head_itself():
    head, _ = tiny_wordpiece_head(SentenceTask())
    assert in_precision(head, "float32") is head


def shared_sentence_model(sentence_model, monkeypatch):
    """(head, tokenizer, task, model folder) of the run's tiny sentence model, its task
    registered."""
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.tasks import TASKS as REGISTERED

    monkeypatch.setitem(REGISTERED, SentenceTask.name, SentenceTask)
    return (*load_finetuned(sentence_model), sentence_model)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["float32", "bfloat16"])
def test_the_exported_model_stores_its_precision_and_answers_as_the_copy(sentence_model,
                                                                         request, tmp_path,
                                                                         monkeypatch, name):
    pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text")
    from nlp_tutorials.serving.savedmodel import SequenceModule, export_model

    head, tokenizer, task, model_dir = shared_sentence_model(sentence_model, monkeypatch)
    monkeypatch.setattr(hardware, "has_bfloat16_instructions", lambda: False)
    if name == "float32":  # the default: the run's shared export of this model
        version, printed = request.getfixturevalue("sentence_savedmodel")
    else:
        printed = []
        version = export_model(model_dir, tmp_path / name, printer=printed.append,
                               precision=name)
    # The note that bfloat16 is slow here: for the bfloat16 export only, once.
    assert printed.count(SLOW_HERE_NOTE) == (name == "bfloat16")
    stored = tf.train.load_checkpoint(str(version / "variables" / "variables"))
    floats = {dtype for dtype in stored.get_variable_to_dtype_map().values() if dtype.is_floating}
    assert floats == {tf.as_dtype(name)}
    sentences = tf.constant(["a fine , warm story", "the film was dull and long", ""])
    got = tf.saved_model.load(str(version)).signatures["serving_default"](sentence=sentences)
    # As a graph, as the SavedModel runs it: oneDNN picks other kernels for eager ops on some
    # CPUs (AVX-512), whose sums differ in the last bits, or more in bfloat16.
    module = SequenceModule(in_precision(head, name), tokenizer, task)
    want = tf.function(module.serving_default)(sentences)
    assert got["probability"].dtype == tf.float32
    assert got["label"].numpy().tolist() == want["label"].numpy().tolist()
    np.testing.assert_allclose(got["probability"], want["probability"], atol=1e-5)


@pytest.mark.slow
def test_no_note_where_the_cpu_has_bfloat16_instructions(sentence_model, tmp_path, monkeypatch):
    pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text")
    from nlp_tutorials.serving.savedmodel import export_model

    _, _, _, model_dir = shared_sentence_model(sentence_model, monkeypatch)
    monkeypatch.setattr(hardware, "has_bfloat16_instructions", lambda: True)
    # Only what is printed matters here: the model need not be written.
    def write_nothing(module, folder, signatures):
        Path(folder).mkdir()  # the folder export_model then renames into place

    monkeypatch.setattr(tf.saved_model, "save", write_nothing)
    printed = []
    export_model(model_dir, tmp_path / "again", printer=printed.append, precision="bfloat16")
    assert printed and SLOW_HERE_NOTE not in printed


@pytest.mark.parametrize("flags, expected", [
    ("fpu sse2 avx2 fma avx512f avx512_bf16 amx_tile", True),
    ("fpu sse2 avx2 fma amx_bf16 amx_tile", True),
    ("fpu sse2 avx2 fma avx512f avx512_vnni", False)])
def test_bfloat16_instructions_are_read_from_the_cpu_flags(tmp_path, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nmodel name\t: A CPU\nflags\t\t: {flags}\n\n"
                       f"processor\t: 1\nflags\t\t: {flags}\n")
    assert has_bfloat16_instructions(cpuinfo) is expected


def test_no_cpuinfo_says_nothing(tmp_path):
    assert has_bfloat16_instructions(tmp_path / "missing") is None


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["token", "span", "choice"])
def test_every_serving_module_answers_from_a_bfloat16_head(shape):
    """The signatures' own arithmetic (softmax, spans' decoding, tag choice) takes the bfloat16
    head's logits: same outputs, same dtypes as from float32."""
    pytest.importorskip("tensorflow_text", reason="the string signatures need tensorflow-text")
    task = TASKS[shape]()
    head, tokenizer = tiny_wordpiece_head(task)
    task = task.replace(max_len=head.backbone.config.max_position_embeddings)  # as loading fits it
    request = {"token": [tf.constant(["a fine , warm story", "the film was dull and long"])],
               "span": [tf.constant(["what was dull ?"]),
                        tf.constant(["the film was dull and long"])],
               "choice": [tf.constant(["the man opened the door"]),
                          tf.constant([["and walked in", "then slept"]])]}[shape]
    serving_module = task.shape.server  # registered when nlp_tutorials.serving is imported
    answers = [serving_module(model, tokenizer, task).serving_default(*request)
               for model in (head, in_precision(head, "bfloat16"))]
    assert sorted(answers[0]) == sorted(answers[1])
    for name, value in answers[0].items():
        assert answers[1][name].dtype == value.dtype, name
        assert answers[1][name].shape == value.shape, name


def test_an_unknown_precision_is_refused():
    head, _ = tiny_wordpiece_head(SentenceTask())
    with pytest.raises(ValueError, match=r"^precision='float16': expected one of float32, "
                                         r"bfloat16$"):
        in_precision(head, "float16")
