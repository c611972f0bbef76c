"""Seconds to encode every MRPC pair (train + test) for classification with ``MrpcTask.encode``.

    python benchmarks/encoding_speed.py                  # word tokenizer, max_len 64, 5 repeats
    python benchmarks/encoding_speed.py --repeats 20 --max-len 128

The word tokenizer is built from MRPC train (not timed); each repeat then times one
``MrpcTask().encode`` call over the 5,801 pairs. Prints the median and the fastest repeat, and
whether the median is under ``--budget`` seconds (2.0: the figure the encoding was written to,
vectorised padding and packing instead of one Python loop per pair). No TensorFlow.
"""
import argparse
import platform
import statistics
import time

from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc
from nlp_tutorials.text.tokenization import WordTokenizer


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls (default 5)")
    parser.add_argument("--max-len", type=int, default=64, help="tokens per pair (default 64)")
    parser.add_argument("--budget", type=float, default=2.0,
                        help="seconds the median should stay under (default 2.0)")
    args = parser.parse_args()
    train = load_mrpc("train")
    pairs = train + load_mrpc("test")
    tokenizer = WordTokenizer.build(s for p in train for s in (p.text, p.pair))
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        MrpcTask().encode(tokenizer, pairs, args.max_len)
        seconds.append(time.perf_counter() - start)
    median = statistics.median(seconds)
    print(f"{platform.processor() or platform.machine()}: MrpcTask.encode, {len(pairs)} pairs, "
          f"max_len {args.max_len}: median {median:.3f} s, fastest {min(seconds):.3f} s over "
          f"{args.repeats} repeats; {'within' if median < args.budget else 'OVER'} the "
          f"{args.budget:g} s budget")


if __name__ == "__main__":
    main()
