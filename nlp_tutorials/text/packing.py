"""Cutting a batch's padding: :func:`trim_padding`. Packing ``[CLS] a [SEP] b [SEP]`` itself
is the tokenizer's (:meth:`~nlp_tutorials.text.tokenization.Tokenizer.pack`); what an example
holds is its task's (:mod:`nlp_tutorials.tasks`).

:func:`trim_padding` runs inside a ``tf.data`` pipeline and imports TensorFlow there.
"""


def trim_padding(batch, multiple: int = 1, pad_id: int = 0,
                 per_token=("input_ids", "token_type_ids")):
    """Cut the columns that are padding in every row: [..., max_len] -> [..., length].

    ``length`` is the longest row rounded up to a multiple of ``multiple`` (at most max_len);
    a row's length counts its ids that are not ``pad_id`` (the tokenizer's, or the model
    config's ``pad_token_id``). MRPC pairs average 49 word tokens against a longest of 100, so
    most of a fixed-length batch is padding; attention and dense layers cost in proportion to
    length. Meant for ``tf.data.Dataset.map``; the arrays named in ``per_token`` are cut along
    their last axis (so [batch, choices, max_len] works too), the rest kept.
    """
    import tensorflow as tf

    ids = batch["input_ids"]
    lengths = tf.reduce_sum(tf.cast(ids != pad_id, tf.int32), axis=-1)  # [batch] or [batch, k]
    longest = tf.minimum(-(-tf.reduce_max(lengths) // multiple) * multiple, tf.shape(ids)[-1])
    return {name: value[..., :longest] if name in per_token else value
            for name, value in batch.items()}
