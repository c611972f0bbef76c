"""What an export of each task shape must answer, shared by the ONNX and LiteRT tests: the
head's own answers on the fakes' examples, encoded as ``predict`` encodes them."""
import numpy as np

from fake_tasks import CONTEXTS, SENTENCES, ChoiceTask, Question
from nlp_tutorials.tasks.conll import ConllTask
from nlp_tutorials.tasks.shapes import softmax
from nlp_tutorials.tasks.squad import SquadTask

TAGS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
# The fakes' output layers are scaled up some 10,000 times so that their answers spread (a
# fresh tiny encoder's vectors barely differ between inputs): two runtimes' float32 rounding in
# the encoder, about 1e-7, then reaches 1e-4 in their probabilities. A wrong layout or a wrong
# op moves them by 0.1 and more. Outputs not widened agree within CLOSE.
WIDENED = 1e-3
CLOSE = 1e-5
WORDS = [text.split() for text in SENTENCES if text.strip()]
OTHER_SHAPES = ("token", "choice", "span")  # the sentence shape has tests of its own


def encoded(head, tokenizer, task, examples):
    """The task's own encoding at predict's length, and the head's logits on it (numpy)."""
    max_len = min(task.max_len, head.backbone.config.max_position_embeddings)
    arrays = task.encode(tokenizer, examples, max_len)
    logits = head({k: arrays[k] for k in ("input_ids", "token_type_ids")}, training=False)
    return arrays, logits.numpy()


def shape_task(shape: str):
    """A task of ``shape``, one of :data:`OTHER_SHAPES`."""
    return {"token": ConllTask(labels=TAGS), "choice": ChoiceTask(), "span": SquadTask()}[shape]


def check_answers(shape: str, head, tokenizer, task, run) -> None:
    """Assert that ``run(arrays, pad_id)`` (an exported model's outputs by name) answers as
    ``head`` on ``shape``'s examples: a tagger each piece's tag and its probability, a
    multiple-choice model its probabilities and choice, a span model its logits."""
    from nlp_tutorials.tasks.conll import Sentence as Tagged

    if shape == "token":
        examples = [Tagged(tuple(words), ("O",) * len(words), line)
                    for line, words in enumerate(WORDS, 1)]
        arrays, logits = encoded(head, tokenizer, task, examples)
        got = run(arrays, tokenizer.pad_id)
        probabilities = softmax(logits)  # [n, step, tags]
        assert set(got) == {"tag_id", "probability"}
        real = arrays["input_ids"] != tokenizer.pad_id
        np.testing.assert_allclose(got["probability"][real], probabilities.max(axis=-1)[real],
                                   atol=CLOSE)
        assert (got["tag_id"][real] == probabilities.argmax(axis=-1)[real]).all()
    elif shape == "choice":
        arrays, logits = encoded(head, tokenizer, task, [Question(c, e, 0) for c, e in CONTEXTS])
        got = run(arrays, tokenizer.pad_id)  # ids [n, choices, step]
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
        got = run(arrays, tokenizer.pad_id)
        assert sorted(got) == ["end_logits", "start_logits"]
        for name in got:
            np.testing.assert_allclose(got[name], logits[name].numpy(), atol=CLOSE)
