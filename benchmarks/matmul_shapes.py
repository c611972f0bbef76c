"""The float32 matmuls of the default step's feed-forward, forward and backward, timed alone.

    python benchmarks/matmul_shapes.py

The profile (profile_step.py) shows the backward feed-forward taking 3.4x the forward's thread
time where the FLOP count says 2x. Each backward Dense costs two matmuls of the forward's size:
the input gradient dY W^T and the weight gradient X^T dY, whose inner dimension is the batch's
1008 tokens. This script times those products in one process, interleaved (round-robin,
``--rounds`` x 10 calls each, median printed), to tell a slow shape from a slow transpose.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

TOKENS, WIDTH, FFN = 1008, 256, 1024  # default config: batch 16 x 63 tokens, hidden, feed-forward


def products():
    """name -> a zero-argument tf.function: one product of the feed-forward output layer."""
    x = tf.random.normal([TOKENS, FFN])  # [tokens, ffn]: input of the output Dense
    w = tf.random.normal([FFN, WIDTH])  # [ffn, hidden]
    dy = tf.random.normal([TOKENS, WIDTH])  # [tokens, hidden]: gradient of its output
    x_t = tf.constant(np.ascontiguousarray(x.numpy().T))  # [ffn, tokens], transposed in advance
    return {
        "forward X W": tf.function(lambda: tf.matmul(x, w)),
        "input grad dY W^T (transpose_b)": tf.function(lambda: tf.matmul(dy, w, transpose_b=True)),
        "weight grad X^T dY (transpose_a)": tf.function(lambda: tf.matmul(x, dy, transpose_a=True)),
        "weight grad tf.transpose(X) dY": tf.function(lambda: tf.matmul(tf.transpose(x), dy)),
        "weight grad X^T stored, times dY": tf.function(lambda: tf.matmul(x_t, dy)),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15, help="interleaved rounds of 10 calls")
    args = parser.parse_args(argv)
    timed = products()
    for product in timed.values():
        product().numpy()
    ms = {name: [] for name in timed}
    for _ in range(args.rounds):
        for name, product in timed.items():
            start = time.perf_counter()
            for _ in range(10):
                product().numpy()
            ms[name].append((time.perf_counter() - start) * 100)
    flop = 2 * TOKENS * FFN * WIDTH
    for name, times in ms.items():
        median = statistics.median(times)
        print(f"{name:34s} {median:6.2f} ms  {flop / median / 1e6:6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
