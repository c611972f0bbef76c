"""speed.compiled: the bucket padding against numpy's, and a head compiled by XLA in buckets
against the plain call."""
import numpy as np
import pytest

from fake_tasks import (CONTEXTS, SENTENCES, ChoiceTask, Question, Sentence, SentenceTask,
                        tiny_wordpiece_head)
from nlp_tutorials.tasks.shapes import softmax

tf = pytest.importorskip("tensorflow")


@pytest.mark.parametrize("shape", [(3, 1), (2, 32), (2, 33), (1, 4, 70), (0, 5)])
def test_padding_reaches_the_next_multiple_of_the_bucket(shape):
    from nlp_tutorials.speed.compiled import padded_to_bucket

    ids = np.arange(1, np.prod(shape) + 1, dtype=np.int32).reshape(shape)
    step = -(-shape[-1] // 32) * 32
    want = np.pad(ids, [(0, 0)] * (len(shape) - 1) + [(0, step - shape[-1])], constant_values=7)
    np.testing.assert_array_equal(padded_to_bucket(tf.constant(ids), 7).numpy(), want)


@pytest.mark.slow
@pytest.mark.parametrize("task_class", [SentenceTask, ChoiceTask])
def test_a_compiled_head_answers_as_the_plain_one(task_class):
    from nlp_tutorials.speed.compiled import compiled_in_buckets

    task = task_class()
    head, tokenizer = tiny_wordpiece_head(task, max_positions=40)
    examples = ([Question(c, e, 0) for c, e in CONTEXTS] if task.shape.name == "choice"
                else [Sentence(text, task.labels[0]) for text in SENTENCES])
    arrays = task.encode(tokenizer, examples, 9)  # padded to 32 positions when compiled

    def logits(input_ids, token_type_ids):
        return head({"input_ids": input_ids, "token_type_ids": token_type_ids}, training=False)

    inputs = [tf.constant(arrays[k]) for k in ("input_ids", "token_type_ids")]
    want = logits(*inputs).numpy()
    got = compiled_in_buckets(logits, tokenizer.pad_id)(*inputs).numpy()
    assert got.shape == want.shape and want.std() > 0.01
    # The fakes' output layer is scaled some 10,000 times (so answers spread): XLA's own exp
    # and erf, a few ulp from TensorFlow's, then move the probabilities by up to 1e-3. A
    # wrong padding or mask moves them by 0.1 and more.
    np.testing.assert_allclose(softmax(got), softmax(want), atol=1e-3)
    assert (got.argmax(axis=-1) == want.argmax(axis=-1)).all()
