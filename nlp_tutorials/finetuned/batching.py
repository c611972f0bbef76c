"""Encoded arrays as tf.data batches, each trimmed to its longest example.

Training draws them in a random, length-grouped order; inference keeps the examples' order.
Either way a batch is cut to its own longest row, so short examples do not pay for the
task's ``max_len`` in padding.
"""
import functools

import numpy as np
import tensorflow as tf

from nlp_tutorials.finetuned.batch_order import length_grouped_order
from nlp_tutorials.text.packing import trim_padding


def batches(arrays: dict, batch_size: int, rng=None, drop_remainder: bool = False, *,
            pad_id: int):
    """A tf.data pipeline of dict batches trimmed to their longest example.

    Given ``rng`` the order is random and length-grouped (:func:`length_grouped_order`), else
    the examples keep their order. ``pad_id``: the ``[PAD]`` id (the tokenizer's, or the
    model config's ``pad_token_id``). The arrays shaped as ``input_ids`` hold one value per
    token (ids, segments, a token task's tags) and are trimmed with it.
    """
    ids = arrays["input_ids"]  # [n, max_len], or [n, choices, max_len]
    if rng is None:
        order = slice(None)
    else:
        lengths = np.count_nonzero(ids != pad_id, axis=-1).reshape(len(ids), -1).max(axis=1)
        order = length_grouped_order(lengths, batch_size, rng)
    per_token = tuple(name for name, value in arrays.items() if value.shape == ids.shape)
    data = tf.data.Dataset.from_tensor_slices({k: v[order] for k, v in arrays.items()})
    trim = functools.partial(trim_padding, pad_id=pad_id, per_token=per_token)
    return (data.batch(batch_size, drop_remainder=drop_remainder).map(trim)
            .prefetch(tf.data.AUTOTUNE))
