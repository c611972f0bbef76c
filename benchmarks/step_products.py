"""The default training step's matrix products alone, one after another, beside the real step.

    python benchmarks/step_products.py [--rounds 3] [--reference-python /path/to/venv/bin/python]

The step of the default config (issue 7: 256 wide, 4 layers, 4 heads, feed-forward 1024, batch
16 x 63 tokens, 10 masked-LM predictions per sequence, vocabulary 19,500) does 24.2 GFLOP of
matrix products, forward and backward, and a few hundred element-wise kernels around them.
This script times each of those 102 products alone (``tf.matmul`` with oneDNN, as the step runs
them) in the fastest of its four operand layouts, and adds them up: what the step would cost
if it did nothing but its products, one after another. That sum is a yardstick, not a strict
bound: the real step runs independent products (a layer's weight and input gradients) side by
side on its two inter-op threads, which helps small products; profile_step.py --wall shows
how the real step's time divides between products and the rest.

Each round times, in this process, the products' sum and ``--steps`` calls of the real compiled
step (``train_throughput.compiled_step_and_batches``), and with ``--reference-python`` (a venv
with torch 2.13.0 and transformers) one run of ``hf_reference_throughput.py``; it prints the
three and the ratios reference / products and reference / real step.
"""
import argparse
import collections
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from train_throughput import CONFIGS, compiled_step_and_batches, step_flops  # noqa: E402
from nlp_tutorials.data import default_max_predictions  # noqa: E402

REFERENCE_LINE = re.compile(r"^hf-reference: (?P<seconds>[\d.]+) s/step")


def products(c, predictions):
    """The step's products as (a, b, transpose_a, transpose_b) operand shapes, forward and backward.

    Names: T tokens in the batch, D width, F feed-forward width, S sequence length, BH batch x
    heads, d head width, M predicted positions, V vocabulary.
    """
    t, d, f, s = c["batch"] * c["seq"], c["hidden"], c["ffn"], c["seq"]
    bh, dh = c["batch"] * c["heads"], c["hidden"] // c["heads"]
    m, v = c["batch"] * predictions, c["vocab"]
    dense = [((t, d), (d, d), False, False),    # X W
             ((t, d), (d, d), False, True),     # dX = dY W^T
             ((t, d), (t, d), True, False)]     # dW = X^T dY
    attention = [((bh, s, dh), (bh, s, dh), False, True),   # scores Q K^T
                 ((bh, s, s), (bh, s, dh), False, False),   # context P V
                 ((bh, s, dh), (bh, s, dh), False, True),   # dP = dC V^T
                 ((bh, s, s), (bh, s, dh), True, False),    # dV = P^T dC
                 ((bh, s, s), (bh, s, dh), False, False),   # dQ = dS K
                 ((bh, s, s), (bh, s, dh), True, False)]    # dK = dS^T Q
    feed_forward = [((f, d), (d, t), False, False),   # W1^T X^T
                    ((d, f), (f, t), False, False),   # W2^T G
                    ((d, f), (d, t), True, False),    # dG = W2 dY^T
                    ((d, t), (f, t), False, True),    # dW2^T = dY^T G^T
                    ((f, d), (f, t), True, False),    # dX^T = W1 dH
                    ((f, t), (d, t), False, True)]    # dW1^T = dH X
    layer = 4 * dense + attention + feed_forward
    lm_head = [((m, d), (d, d), False, False), ((m, d), (d, d), False, True),
               ((m, d), (m, d), True, False),         # the transform Dense
               ((m, d), (v, d), False, True),         # logits = H E^T
               ((m, v), (v, d), False, False),        # dH = dL E
               ((m, v), (m, d), True, False)]         # dE = dL^T H
    return layer * c["layers"] + lm_head


def product_flops(a, b, transpose_a, transpose_b):
    rows = a[-1] if transpose_a else a[-2]
    inner = a[-2] if transpose_a else a[-1]
    cols = b[-2] if transpose_b else b[-1]
    batch = a[0] if len(a) == 3 else 1
    return 2 * batch * rows * inner * cols


def oriented(a, b, transpose_a, transpose_b, flip_a, flip_b):
    """The same product with operand a (b) stored transposed when flip_a (flip_b)."""
    def flipped(shape, flip):
        return shape[:-2] + (shape[-1], shape[-2]) if flip else shape
    return flipped(a, flip_a), flipped(b, flip_b), transpose_a != flip_a, transpose_b != flip_b


def timed_product(a, b, transpose_a, transpose_b, repeats=10, calls=7):
    """Median seconds of one product, from a tf.function running it ``repeats`` times in a row.

    Operands are arguments, not captured constants (Grappler folds products of constants), and
    every product is returned (one only sliced could be computed in part).
    """
    operands = [(tf.random.normal(a), tf.random.normal(b)) for _ in range(repeats)]

    @tf.function
    def run(operands):
        results = [tf.constant(0.0)]
        for x, y in operands:
            with tf.control_dependencies(results[-1:]):
                results.append(tf.matmul(x, y, transpose_a=transpose_a, transpose_b=transpose_b))
        return results

    run(operands)[-1].numpy()
    return median_seconds(lambda: run(operands)[-1].numpy(), calls) / repeats


def products_seconds(shapes):
    """Sum over the step's products of the fastest of the four operand layouts of each.

    Taking the fastest layout assumes the producer of each operand could hand it over in any
    layout for free: no arrangement of the same products, run one after another, is faster.
    """
    total = 0.0
    for shape, count in collections.Counter(shapes).items():
        best = min(timed_product(*oriented(*shape, flip_a, flip_b))
                   for flip_a in (False, True) for flip_b in (False, True))
        total += count * best
    return total


def median_seconds(call, steps):
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def reference_seconds(python, steps):
    script = Path(__file__).with_name("hf_reference_throughput.py")
    result = subprocess.run([python, str(script), "--steps", str(steps)],
                            capture_output=True, text=True, check=True)
    for line in result.stdout.splitlines():
        match = REFERENCE_LINE.match(line)
        if match:
            return float(match["seconds"])
    raise RuntimeError(f"hf_reference_throughput.py printed no step line:\n{result.stdout}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="timed calls per round and step")
    parser.add_argument("--reference-python",
                        help="a Python with torch and transformers, to time the reference too")
    args = parser.parse_args(argv)
    c = CONFIGS["default"]
    predictions = default_max_predictions(c["seq"])
    shapes = products(c, predictions)
    flops = sum(product_flops(*shape) for shape in shapes)
    print(f"{len(shapes)} products, {flops / 1e9:.1f} GFLOP per step "
          f"(train_throughput's FLOP model: {step_flops(c, predictions) / 1e9:.1f})")
    real, batches = compiled_step_and_batches(c, jit=False)
    for i in range(5):
        real(batches[i % 8])["loss"].numpy()
    batch_index = iter(range(10**9))
    for round_index in range(args.rounds):
        products_alone = products_seconds(shapes)
        step = median_seconds(lambda: real(batches[next(batch_index) % 8])["loss"].numpy(),
                              args.steps)
        line = (f"round {round_index + 1}: products alone {products_alone:.3f} s/step "
                f"({flops / products_alone / 1e9:.0f} GFLOP/s), real step {step:.3f} s/step, "
                f"real / products {step / products_alone:.2f}")
        if args.reference_python:
            reference = reference_seconds(args.reference_python, args.steps)
            line += (f"; reference {reference:.3f} s/step: reference / products "
                     f"{reference / products_alone:.2f}, reference / real step "
                     f"{reference / step:.2f}")
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
