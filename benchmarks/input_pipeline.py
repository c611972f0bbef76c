"""Does ``train --data`` feed batches faster than the default training step eats them?

    python benchmarks/input_pipeline.py
    python benchmarks/input_pipeline.py --corpus-mb 20 --batches 400 --steps 20

Writes a synthetic corpus (random words, as benchmarks/corpus_memory.py; deleted at the end),
runs ``prepare`` on it (4 shards, max_len 128, word tokenizer), and then, in the same process:

1. the input pipeline: ``--batches`` batches of 16 from ``training.training_batches`` on the
   shards, exactly the iterator ``train --data`` steps through (file interleave, shuffle
   buffer, parsing, BERT masking in numpy, trimming, prefetch), after 20 warm-up batches;
2. the default training step (BERT 256 wide, 4 layers, 4 heads, the tokenizer's vocabulary,
   batch 16, float32, no XLA) on those batches: ``--steps`` timed steps after 3 warm-up ones.

Prints batches/s of each and their ratio; the target is a ratio of at least 5.
"""
import argparse
import dataclasses
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensorflow as tf  # noqa: E402

from corpus_memory import write_corpus  # noqa: E402
from nlp_tutorials.training import distribute  # noqa: E402
from nlp_tutorials.training.config import TrainConfig  # noqa: E402
from nlp_tutorials.sources.corpus import corpus_files, learn_tokenizer  # noqa: E402
from nlp_tutorials.sources.shard_batches import ShardData  # noqa: E402
from nlp_tutorials.sources.shards import prepare_shards  # noqa: E402
from nlp_tutorials.training.pretraining import build_training_state, training_batches  # noqa: E402


def pipeline_rate(data, config, batches: int) -> float:
    """Batches per second the training iterator delivers (after 20 warm-up batches)."""
    iterator = training_batches(data, config, start=0)
    for _ in range(20):
        next(iterator)
    began = time.perf_counter()
    for _ in range(batches):
        next(iterator)
    return batches / (time.perf_counter() - began)


def step_seconds(data, config, tokenizer, steps: int) -> list[float]:
    """Seconds of each of ``steps`` default training steps on the pipeline's batches."""
    strategy = distribute.make_strategy("default")
    model_config = config.model_config(tokenizer.vocab_size, config.max_len)
    model, _ = build_training_state(config, model_config, strategy)
    batches = training_batches(data, config, start=0)
    batch = next(batches)
    step = distribute.compiled_step(strategy, model, batch)
    for _ in range(3):
        step(batch)["loss"].numpy()
    times = []
    for _ in range(steps):
        batch = next(batches)  # served from the prefetch buffer: the step is timed alone
        began = time.perf_counter()
        step(batch)["loss"].numpy()
        times.append(time.perf_counter() - began)
    return times


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus-mb", type=int, default=10)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    print(f"python {platform.python_version()}, TensorFlow {tf.__version__}, "
          f"{os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(prefix="input_pipeline_") as folder:
        text = Path(folder) / "corpus.txt"
        write_corpus(text, args.corpus_mb)
        tokenizer = learn_tokenizer("word", 8000, corpus_files(str(text)), 8)
        began = time.perf_counter()
        description = prepare_shards(str(text), Path(folder) / "shards", 4, tokenizer, 128, 1,
                                     printer=lambda _: None)
        print(f"prepare: {text.stat().st_size / 1e6:.0f} MB -> {description['examples']} pairs "
              f"in 4 shards, {time.perf_counter() - began:.0f} s")
        config = dataclasses.replace(TrainConfig(), data=str(Path(folder) / "shards"),
                                     max_len=128, model_dir=str(Path(folder) / "model"))
        data = ShardData(config.data, tokenizer, seed=1)
        pipeline = pipeline_rate(data, config, args.batches)
        times = step_seconds(data, config, tokenizer, args.steps)
    step = statistics.median(times)
    print(f"input pipeline: {pipeline:.1f} batches/s ({args.batches} batches of 16, "
          f"max_len 128, masked)")
    print(f"default train step: {step:.3f} s median over {args.steps} steps "
          f"(quartiles {statistics.quantiles(times, n=4)[0]:.3f}-"
          f"{statistics.quantiles(times, n=4)[2]:.3f} s) = {1 / step:.2f} batches/s")
    print(f"ratio: the pipeline delivers {pipeline * step:.1f}x the batches the step consumes")


if __name__ == "__main__":
    main()
