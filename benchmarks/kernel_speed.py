"""Each piece of speed code in nlp_tutorials/kernels.py timed against the plain operation it
replaces: forward + backward in a ``tf.function``.

    python benchmarks/kernel_speed.py

- Dropout: Keras' Dropout (one 32-bit random number per element) against ``kernels.Dropout``
  (one per two elements), the default step's 13 dropouts of [16, 63, 256], rate 0.1 (their
  masks differ, so no gradient difference is shown).
- Softmax cross-entropy: TensorFlow's fused ``sparse_softmax_cross_entropy_with_logits``
  against ``kernels.softmax_cross_entropy`` (gradient written out), on the masked-LM head's
  logits at the default shape, [16 x 10 predictions, 19500].
- GELU: TensorFlow's composite ``tf.nn.gelu(approximate=False)``, differentiated op by op,
  against ``kernels.gelu`` (derivative written out), on the default pre-training shape's
  feed-forward activation [16 x 63, 1024].
- LayerNorm: Keras' LayerNormalization, differentiated op by op, against ``kernels.LayerNorm``
  (gradient written out), on [16, 63, 256].
- Feed-forward: two Keras Dense calls on [batch, step, hidden] against
  ``kernels.transposed_feed_forward`` (the same products on the transposed activations), at
  the default shape (256 wide, batch 16 x 63), MiniLM fine-tuning's (384 wide, 32 x 60) and
  BERT-base's (768 wide, 4 x 128).

The fused AdamW update is timed by ``benchmarks/optimizer_update.py``. The variants of each pair
run interleaved in one process (median of 30 rounds of 10 calls), so machine noise hits both
alike; the largest difference of their gradients is printed too.
"""
import os
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.models.config import ModelConfig  # noqa: E402
from nlp_tutorials.speed.kernels import (
    Dropout,
    LayerNorm,
    gelu,
    softmax_cross_entropy,
    transposed_feed_forward,
)
from nlp_tutorials.models.layers import FeedForward  # noqa: E402


def gradient_function(forward, sources):
    """A tf.function: x -> gradients of sum(forward(x)^2) for x and ``sources``."""
    @tf.function
    def run(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = sum(tf.reduce_sum(y * y) for y in forward(x))
        return tape.gradient(loss, [x] + sources)

    return run


def compare(title, variants, x, rounds=30, calls=10, same_maths=True):
    results = {name: fn(x) for name, fn in variants.items()}  # also traces each variant
    first, second = results.values()
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            begin = time.perf_counter()
            for _ in range(calls):
                fn(x)[0].numpy()
            times[name].append((time.perf_counter() - begin) / calls)
    print(f"{title}: " + ", ".join(f"{name} {1e3 * np.median(t):.2f} ms"
                                   for name, t in times.items())
          + (f"; largest gradient difference {largest_difference(first, second):.1e}"
             if same_maths else ""))


def largest_difference(first, second):
    """Largest absolute difference between two lists of gradients."""
    return max(float(tf.reduce_max(tf.abs(a - b))) for a, b in zip(first, second))


def main():
    dropouts = {"Keras Dropout": [keras.layers.Dropout(0.1) for _ in range(13)],
                "Dropout, 16 random bits": [Dropout(0.1) for _ in range(13)]}
    compare("13 dropouts [16, 63, 256]", {
        name: gradient_function(lambda x, layers=layers: [d(x, training=True) for d in layers], [])
        for name, layers in dropouts.items()}, tf.random.normal([16, 63, 256]), same_maths=False)
    logits = 3 * tf.random.normal([16 * 10, 19500])
    labels = tf.random.uniform([16 * 10], 0, 19500, tf.int32)
    compare("softmax cross-entropy [160, 19500]", {
        "TensorFlow's fused kernel": gradient_function(
            lambda x: [tf.nn.sparse_softmax_cross_entropy_with_logits(labels, x)], []),
        "gradient written out": gradient_function(
            lambda x: [softmax_cross_entropy(labels, x)], [])}, logits)
    activation = tf.random.normal([16 * 63, 1024])
    compare("GELU [1008, 1024]", {
        "composite": gradient_function(lambda x: [tf.nn.gelu(x, approximate=False)], []),
        "written-out derivative": gradient_function(lambda x: [gelu(x)], [])}, activation)
    norms = [keras.layers.LayerNormalization(epsilon=1e-12), LayerNorm(epsilon=1e-12)]
    tokens = tf.random.normal([16, 63, 256])
    for norm in norms:
        norm.build(tokens.shape)
    compare("LayerNorm [16, 63, 256]", {
        "Keras LayerNormalization": gradient_function(lambda x: [norms[0](x)], norms[0].weights),
        "LayerNorm, gradient written out": gradient_function(lambda x: [norms[1](x)],
                                                             norms[1].weights),
    }, tokens)
    for hidden, batch, step in ((256, 16, 63), (384, 32, 60), (768, 4, 128)):
        x = tf.random.normal([batch, step, hidden])
        ffn = FeedForward(ModelConfig(hidden_size=hidden, intermediate_size=4 * hidden))
        ffn.build(x.shape)
        weights = [w for dense in (ffn.intermediate, ffn.output_dense)
                   for w in (dense.kernel, dense.bias)]
        compare(f"feed-forward {hidden} wide, batch {batch} x {step}", {
            "two Dense calls": gradient_function(
                lambda v: [ffn.output_dense(ffn.intermediate(v))], weights),
            "transposed": gradient_function(lambda v: [transposed_feed_forward(
                ffn.intermediate, ffn.output_dense, v)], weights),
        }, x)


if __name__ == "__main__":
    main()
