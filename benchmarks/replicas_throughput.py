"""Seconds per training step of the default BERT under a tf.distribute strategy and precision.

    python benchmarks/replicas_throughput.py                                   # one device
    python benchmarks/replicas_throughput.py --strategy mirrored --cpu-replicas 2
    python benchmarks/replicas_throughput.py --precision mixed_bfloat16

One configuration per process (logical CPU devices are made before TensorFlow starts). Builds
the default pre-training BERT (256 wide, 4 layers, 4 heads, MRPC word vocabulary, batch 16,
batches trimmed to their longest pair as in `train`), runs ``--warmup`` steps, then times
``--steps`` steps one by one and prints the median and inter-quartile range, so a stall of the
shared machine shows as an outlier instead of moving the figure. Figures: docs/scaling.md.
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="default")
    parser.add_argument("--cpu-replicas", type=int, default=0)
    parser.add_argument("--precision", default="float32")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()

    from nlp_tutorials.training import distribute

    strategy = distribute.make_strategy(args.strategy, args.cpu_replicas)  # before any TF op
    distribute.set_precision(args.precision)

    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.sources.mrpc import MrpcPretrainingData
    from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc
    from nlp_tutorials.text.tokenization import WordTokenizer
    from nlp_tutorials.training.checkpoints import build_model
    from nlp_tutorials.text.packing import trim_padding
    from nlp_tutorials.training.optimization import make_optimizer

    config = TrainConfig()
    pairs = load_mrpc("train")
    tokenizer = WordTokenizer.build([s for p in pairs for s in (p.text, p.pair)])
    max_len = MrpcTask().longest(tokenizer, pairs)
    with strategy.scope():
        model = build_model(config.model_config(tokenizer.vocab_size, max_len), config.seed)
        model.compile(optimizer=make_optimizer(config.learning_rate, 1000))
    data = MrpcPretrainingData(tokenizer, pairs, max_len=max_len, seed=config.seed)
    batches = iter(data.dataset(config.batch_size).map(trim_padding))
    first = next(batches)
    step = distribute.compiled_step(strategy, model, first)
    times = []
    for index in range(args.warmup + args.steps):
        batch = next(batches)
        start = time.perf_counter()
        float(step(batch)["loss"])  # waits for the step to finish
        if index >= args.warmup:
            times.append(time.perf_counter() - start)
    quartiles = statistics.quantiles(times, n=4)
    print(f"strategy {args.strategy}, {strategy.num_replicas_in_sync} replica(s), "
          f"{args.precision}: {statistics.median(times):.3f} s/step median "
          f"(IQR {quartiles[0]:.3f}-{quartiles[2]:.3f}, slowest {max(times):.3f}) over "
          f"{len(times)} steps of batch {config.batch_size}")


if __name__ == "__main__":
    main()
