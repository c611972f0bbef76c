"""Losses that add up across replicas: each replica divides by the size of the global batch.

Under ``tf.distribute`` every replica computes the loss of its share of the batch and the
optimizer sums the replicas' gradients. Dividing each replica's sum by the weight of the whole
global batch (:func:`global_sum`) makes that sum the single-device gradient.
"""
import tensorflow as tf

from nlp_tutorials.speed.kernels import softmax_cross_entropy


def global_sum(value):
    """``value`` summed over the replicas of the running ``tf.distribute`` step.

    On one device (no strategy, or outside ``strategy.run``) that is ``value`` itself.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def sparse_cross_entropy(labels, logits, weights):
    """Mean cross-entropy over the positions where ``weights`` is 1.

    Under ``tf.distribute`` each replica divides its sum by the weight of the *global* batch,
    so the replicas' losses, and the gradients the optimizer sums across them, add up to the
    single-device ones (a per-replica mean would weigh a replica's few masked tokens as much
    as another's many).

    Args:
        labels: int ids [...]; logits: [..., vocab]; weights: float [...] of 0/1.
    Returns:
        scalar float32 loss, and the weighted accuracy of argmax(logits).
    """
    logits = tf.cast(logits, tf.float32)
    weights = tf.cast(weights, tf.float32)
    per_token = softmax_cross_entropy(labels, logits)
    total = tf.maximum(global_sum(tf.reduce_sum(weights)), 1.0)
    hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=labels.dtype), labels), tf.float32)
    return tf.reduce_sum(per_token * weights) / total, tf.reduce_sum(hits * weights) / total
