"""Time per generated token, with and without the key/value cache, as the prefix grows.

    python benchmarks/decoding_speed.py                  # prefixes 8, 32, 128; 16 tokens each
    python benchmarks/decoding_speed.py --prefixes 8 64 --tokens 8 --repeats 3

For each model and prefix length P: feed a random prefix of P tokens (not timed), then time
``--tokens`` greedy steps of one token each, and print the median over ``--repeats`` of the
seconds per token. Cached steps feed only the new token (the attention layers keep the keys and
values of the prefix), so their time should stay roughly flat as P grows; uncached steps run the
whole prefix again, so theirs grows with P. Models have random weights: speed does not depend
on what they learnt.

- gpt: the default pre-training size (256 wide, 4 layers, 4 heads), vocabulary 19,500 (about
  MRPC's word vocabulary), batch 1, as ``python -m nlp_tutorials.gpt generate``.
- transformer: the date model's size (64 wide, 2 layers, 4 heads, 37 characters), an 8-token
  source, batch 1; the prefix is the target side.
"""
import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.models.config import ModelConfig  # noqa: E402
from nlp_tutorials.models.decoding import greedy, gpt_stepper, seq2seq_stepper  # noqa: E402
from nlp_tutorials.gpt import GPT  # noqa: E402
from nlp_tutorials.transformer import Transformer  # noqa: E402


def models(max_positions: int):
    """{name: (model, stepper(cached) -> (step, state))} at the sizes the docstring names."""
    keras.utils.set_random_seed(0)
    gpt = GPT(ModelConfig(model_type="gpt", vocab_size=19500, hidden_size=256,
                          num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
                          max_position_embeddings=max_positions))
    transformer = Transformer(ModelConfig(
        model_type="transformer", vocab_size=37, hidden_size=64, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=256, hidden_act="relu",
        max_position_embeddings=max_positions))
    source = np.random.default_rng(0).integers(3, 37, (1, 8)).astype(np.int32)
    return {"gpt": (gpt, lambda cached: gpt_stepper(gpt, 1, cached=cached)),
            "transformer": (transformer,
                            lambda cached: seq2seq_stepper(transformer, source, cached=cached))}


def seconds_per_token(stepper, prefix, tokens: int) -> float:
    """Feed ``prefix`` [1, P] untimed, then time ``tokens`` one-token greedy steps."""
    step, state = stepper
    logits, state = step(tf.constant(prefix), state)
    started = time.perf_counter()
    for _ in range(tokens):
        next_id = greedy(logits[:, -1].numpy()).astype(np.int32)[:, None]  # [1, 1]
        logits, state = step(tf.constant(next_id), state)
    return (time.perf_counter() - started) / tokens


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prefixes", type=int, nargs="+", default=[8, 32, 128])
    parser.add_argument("--tokens", type=int, default=16, help="timed tokens per measurement")
    parser.add_argument("--repeats", type=int, default=5, help="measurements per cell (median)")
    args = parser.parse_args()
    print(f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
          f"TensorFlow {tf.__version__}, TF_ENABLE_ONEDNN_OPTS="
          f"{os.environ['TF_ENABLE_ONEDNN_OPTS']}")
    for name, (model, make_stepper) in models(max(args.prefixes) + args.tokens + 1).items():
        vocab = model.config.target_vocab_size or model.config.vocab_size
        rng = np.random.default_rng(1)
        for cached in (True, False):
            stepper = make_stepper(cached)  # one stepper: its tf.function traces once
            seconds_per_token(stepper, rng.integers(3, vocab, (1, 4)).astype(np.int32), 2)
            row = []
            for length in args.prefixes:
                prefix = rng.integers(3, vocab, (1, length)).astype(np.int32)
                times = [seconds_per_token(stepper, prefix, args.tokens)
                         for _ in range(args.repeats)]
                row.append(f"P={length}: {1000 * statistics.median(times):6.2f} ms")
            label = "cached  " if cached else "uncached"
            print(f"{name:11} {label} per token  " + "   ".join(row))


if __name__ == "__main__":
    main()
