"""What TensorFlow's op determinism costs a fine-tuning step.

    python benchmarks/determinism_cost.py
    python benchmarks/determinism_cost.py --rounds 5 --steps 8 --batch-size 32

The step is ``finetune``'s own: MRPC's head (the pooled ``[CLS]`` vector into a 2-way
classifier) on a fresh BERT of the size ``finetune --from-scratch`` builds (256 wide, 4 layers,
a word vocabulary of MRPC train), BERT's AdamW and schedule, the training loop's compiled step
(``distribute.compiled_step``), on the real length-grouped MRPC batches fine-tuning feeds.

Two heads with the same weights are built and compiled, one with
``tf.config.experimental.enable_op_determinism()`` on while its step is traced and run, one
with it off (one untimed step each). Then, ``--rounds`` times over the same ``--steps``
batches, each batch is one step of each head, back to back, the first of the pair alternating:
the ratio (deterministic / default seconds) is taken per pair, as on a shared machine the
speed drifts over seconds, and the two steps of a pair see the same load. Both heads see the
same batches in the same order, so their losses are compared too (the largest difference).
"""
import argparse
import os
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per mode and round")
    parser.add_argument("--batch-size", type=int, default=32, help="MRPC's recipe: 32")
    return parser.parse_args(argv)


def mrpc_batches(batch_size: int, count: int):
    """(task, word tokenizer, ``count`` length-grouped MRPC train batches as fine-tuning
    makes them)."""
    import numpy as np

    from nlp_tutorials.finetuned.batching import batches
    from nlp_tutorials.tasks import get_task
    from nlp_tutorials.text.tokenization import WordTokenizer

    task = get_task("mrpc")
    train = task.read("train")
    tokenizer = WordTokenizer.build(task.texts(train))
    arrays = task.shape.for_model(task.encode(tokenizer, train, task.max_len))
    pipeline = batches(arrays, batch_size, np.random.default_rng(0), drop_remainder=True,
                       pad_id=tokenizer.pad_id)
    return task, tokenizer, list(pipeline.take(count))


def head_and_step(task, tokenizer, first_batch, deterministic: bool):
    """A fresh MRPC head (seed 1) with BERT's AdamW and schedule, and its step, traced
    and run once with op determinism ``deterministic``."""
    import tensorflow as tf

    from nlp_tutorials.training import distribute
    from nlp_tutorials.training.checkpoints import build_model
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.optimization import make_optimizer

    set_op_determinism(deterministic)
    backbone = build_model(TrainConfig().model_config(tokenizer.vocab_size, task.max_len), 1)
    head = task.build_head(backbone)
    head.compile(optimizer=make_optimizer(1e-4, 1000))  # MRPC's peak rate
    step = distribute.compiled_step(tf.distribute.get_strategy(), head, first_batch)
    float(step(first_batch)["loss"])
    return step


def set_op_determinism(on: bool) -> None:
    import tensorflow as tf
    from tensorflow.python.framework import config  # the only way to turn it off again

    if on:
        tf.config.experimental.enable_op_determinism()
    else:
        config.disable_op_determinism()


def timed_step(step, batch, deterministic: bool) -> tuple:
    """(seconds, loss) of one step, op determinism ``deterministic``."""
    set_op_determinism(deterministic)
    start = time.perf_counter()
    loss = float(step(batch)["loss"])
    return time.perf_counter() - start, loss


def main(argv=None):
    args = parse_args(argv)
    from nlp_tutorials.system.startup import start_tensorflow

    start_tensorflow()
    task, tokenizer, batches = mrpc_batches(args.batch_size, args.steps + 1)
    steps = {mode: head_and_step(task, tokenizer, batches[0], mode) for mode in (False, True)}
    seconds, ratios, largest_loss_gap = {False: [], True: []}, [], 0.0
    for round_index in range(args.rounds):
        for step_index, batch in enumerate(batches[1:]):
            order = (False, True) if (round_index + step_index) % 2 == 0 else (True, False)
            measured = {mode: timed_step(steps[mode], batch, mode) for mode in order}
            for mode in order:
                seconds[mode].append(measured[mode][0])
            ratios.append(measured[True][0] / measured[False][0])
            largest_loss_gap = max(largest_loss_gap, abs(measured[True][1] - measured[False][1]))
        print(f"round {round_index + 1}: median step ratio so far {statistics.median(ratios):.3f}")
    print(f"default {statistics.median(seconds[False]) * 1000:.0f} ms/step, op determinism "
          f"{statistics.median(seconds[True]) * 1000:.0f} ms/step (medians of "
          f"{len(ratios)} steps each); step by step ratio deterministic / default: median "
          f"{statistics.median(ratios):.3f}, quartiles "
          f"{' to '.join(f'{q:.3f}' for q in statistics.quantiles(ratios, n=4)[::2])}; largest "
          f"loss difference between the modes {largest_loss_gap:.2e}")


if __name__ == "__main__":
    main()
