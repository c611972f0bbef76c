"""Training throughput of BERT's compiled step, with the machine's own matmul rate beside it.

    python benchmarks/train_throughput.py                 # default + BERT-base-shaped configs
    python benchmarks/train_throughput.py --steps 50 --configs default
    python benchmarks/train_throughput.py --configs default --precisions float32,mixed_bfloat16

Prints, per config: seconds per step (median and inter-quartile range over ``--steps`` timed
steps after warm-up), tokens/s, peak RSS of this process, executed GFLOP per step (model below),
the matmul rate measured in the same run at the step's precision, and model-FLOP utilisation
(MFU = executed FLOP/s / that rate). Also the input pipeline's batches/s against the step's,
as a ratio. ``--precisions`` runs each config in each precision ``train --precision`` takes
(float32; mixed_bfloat16: float32 weights, products in bfloat16), so the two can be compared
in one run; ``hf_reference_throughput.py --precision bfloat16`` is HuggingFace's side of it.
Peak RSS is the process's so far: to read one config's or precision's own, run it alone.

FLOP model (multiply-add = 2 FLOP; training = 3 x forward: the backward pass costs about twice
the forward one):
    per token and layer: 8 D^2 (Q, K, V, output projections) + 4 D F (feed-forward)
                         + 4 T D (scores Q K^T and context P V)
    per predicted token: 2 D^2 (MLM transform) + 2 D V (vocabulary projection)
    step = 3 x (B T L (8 D^2 + 4 D F + 4 T D) + B M (2 D^2 + 2 D V))
B batch, T tokens per sequence, L layers, D width, F feed-forward width, V vocabulary,
M = max predictions per sequence. Embedding look-ups, LayerNorm, softmax, the pooler/NSP head and
the optimizer update are left out (memory-bound, a few % of the total).
"""
import argparse
import os
import platform
import resource
import statistics
import sys
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.bert import BERT  # noqa: E402
from nlp_tutorials.models.config import ModelConfig  # noqa: E402
from nlp_tutorials.sources.mrpc import MrpcPretrainingData  # noqa: E402
from nlp_tutorials.text.masking import default_max_predictions
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.text.tokenization import WordTokenizer  # noqa: E402
from nlp_tutorials.training.distribute import PRECISIONS, set_precision  # noqa: E402
from nlp_tutorials.training.optimization import make_optimizer  # noqa: E402

CONFIGS = {
    # the original tutorial's size, and the shape of the reference measurements
    "default": dict(hidden=256, layers=4, heads=4, ffn=1024, batch=16, seq=63, vocab=19500),
    "bert-base": dict(hidden=768, layers=12, heads=12, ffn=3072, batch=4, seq=128, vocab=30522),
    # next to nothing to compute: run alone (--configs tiny), its peak RSS is what TensorFlow,
    # Keras and a compiled training step cost before any model size counts
    "tiny": dict(hidden=16, layers=1, heads=2, ffn=32, batch=16, seq=63, vocab=100),
}


def product_dtype(precision: str):
    """The dtype a model built under ``train --precision``'s ``precision`` multiplies in."""
    return tf.as_dtype(keras.mixed_precision.Policy(precision).compute_dtype)


def step_flops(c, predictions):
    d, f, t = c["hidden"], c["ffn"], c["seq"]
    per_token = c["layers"] * (8 * d * d + 4 * d * f + 4 * t * d)
    per_prediction = 2 * d * d + 2 * d * c["vocab"]
    return 3 * (c["batch"] * t * per_token + c["batch"] * predictions * per_prediction)


def matmul_rate(dtype=tf.float32, size=2048, repeats=10):
    """FLOP/s of a size^3 tf.matmul in ``dtype`` on this machine (best of ``repeats``)."""
    a = tf.cast(tf.random.normal([size, size]), dtype)
    b = tf.cast(tf.random.normal([size, size]), dtype)
    tf.matmul(a, b).numpy()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        tf.matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def synthetic_batch(c, predictions, rng):
    b, t = c["batch"], c["seq"]
    ids = rng.integers(5, c["vocab"], (b, t)).astype(np.int32)
    ids[:, 0] = 2
    positions = np.sort(np.stack([rng.choice(np.arange(1, t), predictions, replace=False)
                                  for _ in range(b)]), axis=1).astype(np.int32)
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
            "mlm_positions": positions, "mlm_ids": np.take_along_axis(ids, positions, 1),
            "mlm_weights": np.ones((b, predictions), np.float32),
            "nsp_labels": rng.integers(0, 2, b).astype(np.int32)}


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def compiled_step_and_batches(c, jit):
    """(the compiled training step of a fresh BERT shaped as ``c``, 8 synthetic batches)."""
    predictions = default_max_predictions(c["seq"])
    config = ModelConfig(vocab_size=c["vocab"], hidden_size=c["hidden"],
                         num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
                         intermediate_size=c["ffn"], max_position_embeddings=c["seq"])
    model = BERT(config)
    model.compile(optimizer=make_optimizer(1e-4, 10_000))
    rng = np.random.default_rng(0)
    batches = [synthetic_batch(c, predictions, rng) for _ in range(8)]
    return model.compiled_step(batches[0], jit_compile=jit), batches


def bench_config(name, c, steps, warmup, jit, precision="float32"):
    predictions = default_max_predictions(c["seq"])
    set_precision(precision)  # the models built from here on compute in it
    try:
        step, batches = compiled_step_and_batches(c, jit)
    finally:
        set_precision("float32")
    for i in range(warmup):
        step(batches[i % 8])["loss"].numpy()
    times = []
    for i in range(steps):
        start = time.perf_counter()
        step(batches[i % 8])["loss"].numpy()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    q1, _, q3 = statistics.quantiles(times, n=4)
    tokens = c["batch"] * c["seq"]
    return {"name": name, "precision": precision, "median": median, "q1": q1, "q3": q3,
            "tokens_per_s": tokens / median, "gflop": step_flops(c, predictions) / 1e9,
            "rss_mb": peak_rss_mb(),
            "traces": step.experimental_get_tracing_count()}


def pipeline_rate(batch_size=16, batches=200):
    """Batches/s of the real MRPC pre-training pipeline (masking included), alone."""
    train = load_mrpc("train")
    tokenizer = WordTokenizer.build([s for p in train for s in (p.text, p.pair)])
    data = MrpcPretrainingData(tokenizer, train, seed=1).dataset(batch_size)
    iterator = iter(data)
    next(iterator)
    start = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - start)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default="default,bert-base",
                        help="comma-separated: " + ", ".join(CONFIGS))
    parser.add_argument("--steps", type=int, default=50, help="timed steps per config")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--jit", action="store_true", help="XLA-compile the step")
    parser.add_argument("--precisions", default="float32",
                        help="comma-separated, of " + ", ".join(PRECISIONS[1:]) + " (default "
                             "float32); each config runs in each")
    args = parser.parse_args(argv)
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"--configs: unknown {unknown}; expected some of {list(CONFIGS)}")
    precisions = args.precisions.split(",")
    if not set(precisions) <= set(PRECISIONS[1:]):  # "auto" would name no one precision
        parser.error(f"--precisions {args.precisions}: expected some of "
                     f"{', '.join(PRECISIONS[1:])}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
          f"TensorFlow {tf.__version__}, TF_ENABLE_ONEDNN_OPTS="
          f"{os.environ['TF_ENABLE_ONEDNN_OPTS']}, jit={args.jit}")
    # The configs run first so their peak RSS leaves out the matmul probe's 2048^2 matrices.
    results = [bench_config(name, CONFIGS[name], args.steps, args.warmup, args.jit, precision)
               for name in names for precision in precisions]
    rates = {precision: matmul_rate(product_dtype(precision)) for precision in precisions}
    for precision, rate in rates.items():
        print(f"{product_dtype(precision).name} 2048^3 matmul ({precision}): "
              f"{rate / 1e9:.1f} GFLOP/s")
    for r in results:
        name = r["name"] + ("" if r["precision"] == "float32" else f" [{r['precision']}]")
        mfu = r["gflop"] * 1e9 / r["median"] / rates[r["precision"]]
        print(f"{name}: {r['median']:.3f} s/step (IQR {r['q1']:.3f}-{r['q3']:.3f}), "
              f"{r['tokens_per_s']:.0f} tokens/s, {r['gflop']:.1f} GFLOP/step, "
              f"MFU {100 * mfu:.0f}%, peak RSS {r['rss_mb']:.0f} MB, traces {r['traces']}")
        if name == "default":  # once, after the float32 step
            pipeline = pipeline_rate()
            print(f"input pipeline alone: {pipeline:.0f} batches/s = "
                  f"{pipeline * r['median']:.0f}x what the step consumes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
