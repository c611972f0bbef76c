"""The whole training step with the feed-forward in the transposed layout, against two Dense calls.

    python benchmarks/ffn_layout_step.py [--config default] [--jit] [--rounds 12]

:class:`nlp_tutorials.transformer.FeedForward` runs its two products on [features, tokens]
activations (see its docstring). This script builds two BERTs of one shape: one as shipped, one
whose feed-forward is traced as the plain ``output_dense(intermediate(x))`` on [batch, step,
hidden]. Each ``tf.function`` keeps the graph it was traced with, so swapping
``FeedForward.call`` only while the second model is built and traced gives both variants in one
process. They then run interleaved (``--rounds`` x 5 steps each on the same batches) and the
script prints each median and their ratio: a ratio measured in one run survives the machine's
noise better than two separate runs of ``train_throughput.py``.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from nlp_tutorials.transformer import FeedForward  # noqa: E402
from train_throughput import CONFIGS, compiled_step_and_batches  # noqa: E402


def two_dense_calls(self, x):
    """FeedForward.call as it was before session 6: [batch, step, hidden] throughout."""
    return self.output_dense(self.intermediate(x))


def traced_steps(config, jit):
    """{variant name: a warmed-up compiled step}, and the batches they share."""
    shipped = FeedForward.call
    steps = {}
    for name, call in (("two Dense calls", two_dense_calls), ("transposed layout", shipped)):
        FeedForward.call = call
        try:
            step, batches = compiled_step_and_batches(config, jit)
            for batch in batches[:3]:
                step(batch)["loss"].numpy()
        finally:
            FeedForward.call = shipped
        steps[name] = step
    return steps, batches


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="default")
    parser.add_argument("--jit", action="store_true", help="XLA-compile both steps")
    parser.add_argument("--rounds", type=int, default=12, help="interleaved rounds of 5 steps")
    args = parser.parse_args(argv)
    config = CONFIGS[args.config]
    steps, batches = traced_steps(config, args.jit)
    seconds = {name: [] for name in steps}
    for _ in range(args.rounds):
        for name, step in steps.items():
            for i in range(5):
                start = time.perf_counter()
                step(batches[i % len(batches)])["loss"].numpy()
                seconds[name].append(time.perf_counter() - start)
    tokens = config["batch"] * config["seq"]
    medians = {name: statistics.median(times) for name, times in seconds.items()}
    for name, median in medians.items():
        print(f"{args.config}{' --jit' if args.jit else ''}, {name}: {median:.3f} s/step, "
              f"{tokens / median:.0f} tokens/s")
    before, after = medians.values()
    print(f"transposed / two Dense calls: {after / before:.3f}")


if __name__ == "__main__":
    main()
