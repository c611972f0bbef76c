"""A serving model's call compiled by XLA, its inputs padded to a few lengths.

``tf.function(jit_compile=True)`` hands the whole encoder to XLA, which fuses the element-wise
work between the matmuls (LayerNorm, GELU, the softmax's parts, the residual adds) that
TensorFlow otherwise runs as separate kernels, and drops the graph executor's per-op cost that
dominates a single short input. But XLA compiles one program per input shape, a second or more
each on a CPU: served inputs of every length would each pay one. Padding each batch to a
multiple of ``BUCKET`` positions leaves four lengths up to 128. What the padding adds is masked
out (the model masks every ``[PAD]``), so the answers are those of the plain call.
"""
import tensorflow as tf

BUCKET = 32  # positions; 128-token inputs then come in 4 lengths


def padded_to_bucket(ids, pad_value: int, bucket: int = BUCKET):
    """int32 [..., step] -> [..., step rounded up to a multiple of ``bucket``], the new
    positions holding ``pad_value``."""
    extra = -tf.shape(ids)[-1] % bucket
    rank = tf.rank(ids)
    paddings = tf.concat([tf.zeros([rank - 1, 2], tf.int32), [[0, extra]]], axis=0)
    return tf.pad(ids, paddings, constant_values=pad_value)


def compiled_in_buckets(logits, pad_id: int, bucket: int = BUCKET):
    """``logits(input_ids, token_type_ids)`` (int32 [..., step] each) compiled by XLA, called on
    inputs padded to a multiple of ``bucket`` positions with ``pad_id`` (segment 0).

    Only for a function whose answer ignores padded positions and has no step axis (a sequence
    or multiple-choice head's logits): the padding would otherwise show in the answer.
    """
    compiled = tf.function(logits, jit_compile=True)

    def call(input_ids, token_type_ids):
        return compiled(padded_to_bucket(input_ids, pad_id, bucket),
                        padded_to_bucket(token_type_ids, 0, bucket))

    return call
