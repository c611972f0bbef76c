"""Where a training step's time goes: a tf.profiler trace, summarised per part of the model.

    python benchmarks/profile_step.py                       # writes the trace, prints its path
    python benchmarks/profile_step.py --xprof-python /path/to/venv/bin/python

The trace (``--logdir``, default /tmp/nlp_tutorials_profile) opens in TensorBoard's Profile tab
(``pip install tensorboard-plugin-profile``). With ``--xprof-python``, a Python that has the
``xprof`` package (kept in its own venv: it pins a newer protobuf than TensorFlow's) converts the
trace to per-op figures, and this script prints thread time per step grouped by model part
(forward/backward x attention, feed-forward, LM head, ...), the optimizer, and idle time.
Without ``--jit`` every TensorFlow op is visible; under XLA the step is a single fused cluster.
"""
import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from train_throughput import CONFIGS, compiled_step_and_batches  # noqa: E402

CONVERT = """
import sys
from xprof.convert import raw_to_tool_data
data, _ = raw_to_tool_data.xspace_to_tool_data(sys.argv[2:], "framework_op_stats", {})
open(sys.argv[1], "wb" if isinstance(data, bytes) else "w").write(data)
"""
PARTS = ("lm_head", "attention", "ffn", "embeddings", "pooler", "nsp_head")


def trace(config_name, steps, logdir, jit):
    """Run warm-up steps, then ``steps`` traced steps; returns the xplane files written."""
    step, batches = compiled_step_and_batches(CONFIGS[config_name], jit)
    for i in range(5):
        step(batches[i % 8])["loss"].numpy()
    tf.profiler.experimental.start(logdir)
    for i in range(steps):
        step(batches[i % 8])["loss"].numpy()
    tf.profiler.experimental.stop()
    return sorted(glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb"))[-1:]


def part_of(op_name):
    """'backward: ffn', 'optimizer', 'idle' ... for a TensorFlow op name."""
    if op_name == "IDLE":
        return "idle (a thread waiting)"
    if op_name.startswith("adam"):
        return "optimizer update"
    direction = "backward" if op_name.startswith("gradient_tape") else "forward"
    return f"{direction}: " + next((p for p in PARTS if p in op_name), "other")


def summarise(op_stats_json, steps):
    """Print thread milliseconds per step for each model part, largest first."""
    table = json.loads(Path(op_stats_json).read_text())
    table = table[0] if isinstance(table, list) else table
    columns = [c["id"] for c in table["cols"]]
    rows = [dict(zip(columns, [cell.get("v") if cell else None for cell in row["c"]]))
            for row in table["rows"]]
    totals = collections.Counter()
    for row in rows:
        if row["host_or_device"] == "Host":
            totals[part_of(row["operation"])] += row["total_self_time"] / 1000 / steps
    everything = sum(totals.values())
    print(f"thread time per step: {everything:.0f} ms (all threads added up)")
    for part, ms in totals.most_common():
        print(f"  {part:28s} {ms:7.1f} ms  {100 * ms / everything:5.1f}%")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="default")
    parser.add_argument("--steps", type=int, default=10, help="traced steps")
    parser.add_argument("--jit", action="store_true", help="XLA-compile the step")
    parser.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(),
                                                         "nlp_tutorials_profile"))
    parser.add_argument("--xprof-python", help="a Python with the xprof package, to summarise")
    args = parser.parse_args(argv)
    xplanes = trace(args.config, args.steps, args.logdir, args.jit)
    print(f"trace written: {xplanes[0]}")
    if args.xprof_python:
        op_stats = os.path.join(args.logdir, "framework_op_stats.json")
        subprocess.run([args.xprof_python, "-c", CONVERT, op_stats, *xplanes], check=True,
                       stderr=subprocess.DEVNULL)
        summarise(op_stats, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
