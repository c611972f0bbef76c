"""Where a training step's time goes: a tf.profiler trace, summarised per part of the model.

    python benchmarks/profile_step.py                       # writes the trace, prints its path
    python benchmarks/profile_step.py --xprof-python /path/to/venv/bin/python
    python benchmarks/profile_step.py --xprof-python /path/to/venv/bin/python --wall

The trace (``--logdir``, default /tmp/nlp_tutorials_profile) opens in TensorBoard's Profile tab
(``pip install tensorboard-plugin-profile``). With ``--xprof-python``, a Python that has the
``xprof`` package (kept in its own venv: it pins a newer protobuf than TensorFlow's) converts the
trace to per-op figures, and this script prints thread time per step grouped by model part
(forward/backward x attention, feed-forward, LM head, ...), the optimizer, and idle time.
Without ``--jit`` every TensorFlow op is visible; under XLA the step is a single fused cluster.

Thread time adds up every thread, so an inter-op thread blocked while its kernel runs on the
intra-op threads counts as "idle". ``--wall`` reads the trace's timeline instead and prints wall
time per step by op type (time when two ops run side by side is split between them) and how
much of the step both intra-op threads are busy: what the two cores actually spend.
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
data, _ = raw_to_tool_data.xspace_to_tool_data(sys.argv[3:], sys.argv[2], {})
open(sys.argv[1], "wb" if isinstance(data, bytes) else "w").write(data)
"""
# Events on the inter-op threads that are the executor's bookkeeping, not ops.
NOT_OPS = ("ThreadpoolListener::Region", "ExecutorState::Process")
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


def convert(xprof_python, tool, output, xplanes):
    subprocess.run([xprof_python, "-c", CONVERT, output, tool, *xplanes], check=True,
                   stderr=subprocess.DEVNULL)


def busy_intervals(events):
    """Merged [start, end] intervals (microseconds) covered by ``events``."""
    merged = []
    for start, end in sorted((e["ts"], e["ts"] + e["dur"]) for e in events):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def summarise_wall(trace_json, steps, unit="step"):
    """Print wall milliseconds per ``unit`` (``steps`` of them traced) by op type, and how busy
    the intra-op threads were."""
    events = json.loads(Path(trace_json).read_text())["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    spans = [e for e in events if e.get("ph") == "X" and (e["pid"], e["tid"]) in names]
    ops = [e for e in spans if "Compute" in names[(e["pid"], e["tid"])]
           and e["name"] not in NOT_OPS]
    # Sweep the inter-op threads' op spans; concurrent ops share the time between them.
    edges = sorted([(e["ts"], 1, i) for i, e in enumerate(ops)]
                   + [(e["ts"] + e["dur"], -1, i) for i, e in enumerate(ops)])
    running, last, wall = set(), None, collections.Counter()
    for time, change, index in edges:
        if running:
            for other in running:
                wall[ops[other]["name"]] += (time - last) / len(running)
        last = time
        (running.add if change > 0 else running.discard)(index)
    everything = sum(wall.values())
    print(f"wall time per {unit} in ops: {everything / 1000 / steps:.1f} ms")
    for op_type, microseconds in wall.most_common(20):
        print(f"  {op_type:30s} {microseconds / 1000 / steps:7.1f} ms  "
              f"{100 * microseconds / everything:5.1f}%")
    intra = [busy_intervals([e for e in spans if (e["pid"], e["tid"]) == thread])
             for thread in names if "Eigen" in names[thread]]
    edges = sorted((t, change) for intervals in intra for start, end in intervals
                   for t, change in ((start, 1), (end, -1)))
    busy, last, by_count = 0, None, collections.Counter()
    for time, change in edges:
        if last is not None:
            by_count[busy] += time - last
        last, busy = time, busy + change
    total = sum(by_count.values())
    print("share of the traced time with 0, 1, 2... intra-op threads busy: "
          + ", ".join(f"{count}: {100 * by_count[count] / total:.0f}%"
                      for count in sorted(by_count)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", choices=sorted(CONFIGS), default="default")
    parser.add_argument("--steps", type=int, default=10, help="traced steps")
    parser.add_argument("--jit", action="store_true", help="XLA-compile the step")
    parser.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(),
                                                         "nlp_tutorials_profile"))
    parser.add_argument("--xprof-python", help="a Python with the xprof package, to summarise")
    parser.add_argument("--wall", action="store_true",
                        help="with --xprof-python: also wall time per op type from the timeline")
    args = parser.parse_args(argv)
    xplanes = trace(args.config, args.steps, args.logdir, args.jit)
    print(f"trace written: {xplanes[0]}")
    if args.xprof_python:
        op_stats = os.path.join(args.logdir, "framework_op_stats.json")
        convert(args.xprof_python, "framework_op_stats", op_stats, xplanes)
        summarise(op_stats, args.steps)
        if args.wall:
            timeline = os.path.join(args.logdir, "trace_viewer.json")
            convert(args.xprof_python, "trace_viewer", timeline, xplanes)
            summarise_wall(timeline, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
