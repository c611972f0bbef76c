"""Attention masks: additive, 0 where a query may look at a key, MASK_VALUE where it may not.

Added to the attention scores before the softmax, MASK_VALUE makes a hidden key's probability
exactly 0. :func:`padding_mask` hides padding (BERT, the Transformer's encoder);
:func:`causal_mask` hides the future too (GPT, the Transformer's decoder);
:func:`cached_causal_mask` is the causal mask of positions decoded one at a time.
:func:`layer_head_mask` is of another kind: multiplicative, per attention head (1 keeps, 0 off).
"""
import tensorflow as tf

from nlp_tutorials.system.errors import UserError

# Large enough that exp() of it underflows to exactly 0 in float32, yet finite in float16
# (max 65504) and bfloat16, so masked scores never turn into NaN under mixed precision.
MASK_VALUE = -1e4


def padding_mask(ids, pad_id: int = 0, attention_mask=None):
    """Additive mask hiding padded keys.

    Args:
        ids: token ids, [batch, step].
        attention_mask: optional [batch, step], 1 for real tokens and 0 for padding (the
            HuggingFace convention); when given it decides, instead of comparing ids to
            ``pad_id``.
    Returns:
        float32 [batch, 1, 1, step]: 0 for real keys, MASK_VALUE for padded keys; it
        broadcasts over heads and query positions.
    """
    if attention_mask is None:
        is_pad = tf.cast(tf.equal(ids, pad_id), tf.float32)  # [batch, step]
    else:
        is_pad = 1.0 - tf.cast(tf.not_equal(attention_mask, 0), tf.float32)
    return tf.expand_dims(tf.expand_dims(is_pad, 1), 1) * MASK_VALUE  # [batch, 1, 1, step]


def causal_mask(ids, pad_id: int = 0, attention_mask=None):
    """Additive mask hiding padded keys and every key after the query (look-ahead).

    Args:
        ids: token ids, [batch, step].
        attention_mask: optional [batch, step], 1 for real tokens (see :func:`padding_mask`).
    Returns:
        float32 [batch, 1, step, step]: entry [b, 0, i, j] is 0 when query i may look at key j
        (j <= i and j is not padding), MASK_VALUE otherwise.
    """
    step = tf.shape(ids)[1]
    # [step, step]: 1 above the diagonal, where the key comes after the query
    future = 1.0 - tf.linalg.band_part(tf.ones([step, step]), -1, 0)
    return tf.maximum(padding_mask(ids, pad_id, attention_mask) + future * MASK_VALUE, MASK_VALUE)


def cached_causal_mask(past, new):
    """Causal mask for ``new`` queries that follow ``past`` cached positions (no padding).

    Returns float32 [1, 1, new, past + new]: query i sits at position past + i and may look at
    every key j <= past + i.
    """
    allowed = tf.linalg.band_part(tf.ones([new, past + new]), -1, past)  # 1 where j - i <= past
    return ((1.0 - allowed) * MASK_VALUE)[tf.newaxis, tf.newaxis]


def layer_head_mask(head_mask, config):
    """``head_mask`` as [layers, heads] float32 (one [heads] row serves every layer).

    1 keeps a head, 0 switches it off, values between scale it; heads are numbered as in the
    unpruned model of ``config``. None stays None. A mask of another shape raises UserError.
    """
    if head_mask is None:
        return None
    head_mask = tf.cast(head_mask, tf.float32)
    layers, heads = config.num_hidden_layers, config.num_attention_heads
    if head_mask.shape == (heads,):
        return tf.tile(head_mask[tf.newaxis], [layers, 1])
    if head_mask.shape != (layers, heads):
        raise UserError(f"head_mask of shape {list(head_mask.shape)}: expected [{heads}] "
                        f"(heads) or [{layers}, {heads}] (layers, heads)")
    return head_mask
