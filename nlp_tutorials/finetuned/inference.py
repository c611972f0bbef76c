"""A fine-tuned head's answers on encoded examples: its logits, probabilities and scores.

Every reader of a model goes through here: ``predict`` and ``evaluate``, fine-tuning's dev
and test scoring, the masking study (under a head mask), the explorer and the benchmarks.
"""
import functools
import math

import numpy as np
import tensorflow as tf

from nlp_tutorials.finetuned.batching import batches
from nlp_tutorials.models.masks import MASK_VALUE
from nlp_tutorials.system.progress import ProgressDisplay, shown_steps
from nlp_tutorials.tasks.base import Task
from nlp_tutorials.tasks.shapes import softmax


@functools.lru_cache(maxsize=4)
def _logits_function(head, masked: bool = False):
    """One traced inference function per head (and with or without a head mask), so repeated
    evaluations do not retrace. It returns the head's logits (a tensor, or a dict of them for
    spans) as float32: under mixed precision they may be float16."""
    ids = tf.TensorSpec([None] * len(head.dummy_shape), tf.int32)  # [batch, (choices,) step]
    signature = {"input_ids": ids, "token_type_ids": ids}
    if masked:
        config = head.backbone.config
        signature["head_mask"] = tf.TensorSpec(
            [config.num_hidden_layers, config.num_attention_heads], tf.float32)
    return tf.function(
        lambda b: tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), head(b, training=False)),
        input_signature=[signature])


def predict_batches(head, arrays: dict, batch_size: int = 64, head_mask=None,
                    display: ProgressDisplay | None = None):
    """The head's logits on ``arrays``, batch by batch in order: numpy float32 (a dict of them
    for spans), each batch trimmed to its longest example. ``head_mask`` [layers, heads] is
    passed to the backbone when given; the pass's progress is shown on ``display`` if given."""
    forward = _logits_function(head, head_mask is not None)
    inputs = {k: arrays[k] for k in ("input_ids", "token_type_ids")}
    extra = {} if head_mask is None else {"head_mask": tf.constant(head_mask, tf.float32)}
    rows = len(inputs["input_ids"])
    outputs = (tf.nest.map_structure(lambda x: x.numpy(), forward({**batch, **extra}))
               for batch in batches(inputs, batch_size, pad_id=head.backbone.config.pad_token_id))
    yield from shown_steps(outputs, math.ceil(rows / batch_size), display, unit="batch",
                           batch_size=batch_size, examples=rows)


def head_outputs(head, arrays: dict, batch_size: int = 64, head_mask=None,
                 display: ProgressDisplay | None = None):
    """The head's logits for every row of ``arrays``, in order (see :func:`predict_batches`,
    which shows the pass's progress on ``display`` if given).

    Outputs with one value per token (token tagging, spans) are padded back to the arrays'
    ``max_len`` with ``MASK_VALUE``, so batches trimmed to different lengths stack.
    """
    parts = list(predict_batches(head, arrays, batch_size, head_mask, display))
    return stacked(parts, arrays["input_ids"].shape[-1], head.per_position)


def stacked(parts: list, max_len: int, per_position: bool):
    """Batches of logits (arrays, or dicts of them) as one, in order; with ``per_position``
    each batch's positions are first padded to ``max_len`` with ``MASK_VALUE``."""
    def full_length(x):  # [batch, step, ...] -> [batch, max_len, ...]
        widths = [(0, 0), (0, max_len - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
        return np.pad(x, widths, constant_values=MASK_VALUE)

    stretch = full_length if per_position else (lambda x: x)
    return tf.nest.map_structure(lambda *xs: np.concatenate([stretch(x) for x in xs]), *parts)


def class_probabilities(head, arrays: dict, batch_size: int = 64, head_mask=None) -> np.ndarray:
    """The softmax of a classifier's logits for every row: [n, labels] float32 (for MRPC,
    column 1 is P(paraphrase))."""
    return softmax(head_outputs(head, arrays, batch_size, head_mask))


def score_examples(head, task: Task, examples, arrays: dict, head_mask=None,
                   display: ProgressDisplay | None = None) -> dict:
    """The task's scores of ``head`` on ``examples`` (encoded as ``arrays``), under
    ``head_mask`` when given, the pass's progress shown on ``display`` if given."""
    outputs = head_outputs(head, arrays, head_mask=head_mask, display=display)
    return task.score(examples, task.predictions(outputs, arrays, examples))
