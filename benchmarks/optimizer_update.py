"""Time of one AdamW update over the default BERT's weights: Keras' AdamW against ours.

    python benchmarks/optimizer_update.py

``nlp_tutorials.speed.kernels.AdamW`` does each weight's Adam update with TensorFlow's fused
``ResourceApplyAdam`` kernel; Keras' AdamW uses about ten element-wise ops per weight. Both get
the same random gradients for weights shaped as the default pre-training model (256 wide,
4 layers, FFN 1024, vocabulary 19,500: 8.1 M weights), each update compiled as a
``tf.function``; the two are timed interleaved in one process (median of 20 rounds of 5
updates), so machine noise hits both alike. Also prints the largest difference between their
weights after 3 updates.
"""
import os
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.speed.kernels import AdamW  # noqa: E402

LAYERS, HIDDEN, FFN, VOCAB, POSITIONS = 4, 256, 1024, 19500, 63
SHAPES = ([(VOCAB, HIDDEN), (POSITIONS, HIDDEN), (2, HIDDEN)]
          + [(HIDDEN, HIDDEN)] * 4 * LAYERS + [(HIDDEN, FFN), (FFN, HIDDEN)] * LAYERS
          + [(HIDDEN,)] * 10 * LAYERS + [(FFN,)] * LAYERS)


def compiled_update(optimizer_class, start, grads):
    """(a compiled one-update function, the weights it updates)."""
    weights = [keras.Variable(w) for w in start]
    optimizer = optimizer_class(learning_rate=1e-3, weight_decay=0.01, beta_1=0.9,
                                beta_2=0.999, epsilon=1e-6)
    optimizer.build(weights)

    @tf.function
    def update():
        optimizer.apply_gradients(zip(grads, weights))

    return update, weights


def main():
    rng = np.random.default_rng(0)
    start = [rng.normal(size=s).astype("float32") for s in SHAPES]
    grads = [tf.constant(rng.normal(size=s).astype("float32")) for s in SHAPES]
    runs = {"keras.optimizers.AdamW": compiled_update(keras.optimizers.AdamW, start, grads),
            "nlp_tutorials AdamW (fused)": compiled_update(AdamW, start, grads)}
    for _ in range(3):
        for update, _ in runs.values():
            update()
    (_, a), (_, b) = runs.values()
    print(f"{sum(np.prod(s) for s in SHAPES) / 1e6:.1f} M weights; largest difference after "
          f"3 updates: {max(float(np.abs(x.numpy() - y.numpy()).max()) for x, y in zip(a, b)):.1e}")
    times = {name: [] for name in runs}
    for _ in range(20):
        for name, (update, weights) in runs.items():
            begin = time.perf_counter()
            for _ in range(5):
                update()
            weights[0].numpy()
            times[name].append((time.perf_counter() - begin) / 5)
    for name, values in times.items():
        print(f"{name}: {1e3 * np.median(values):.1f} ms per update")


if __name__ == "__main__":
    main()
