"""The training step under different TensorFlow environment settings, in alternating processes.

    python benchmarks/env_variants.py [--config default] [--rounds 4] [--steps 20]
    python benchmarks/env_variants.py --variants earlier,baseline --earlier-tree /tmp/old

``--earlier-tree`` adds the variant ``earlier``: the same script importing ``nlp_tutorials``
from another checkout (``git worktree add /tmp/old <commit>``), to time a code change in
alternating processes.

Some settings (``TF_XLA_FLAGS``, ``TF_ENABLE_ONEDNN_OPTS``) are read once per process, so two of
them cannot share one process the way ``ffn_layout_step.py``'s variants do. This script runs
``train_throughput.py`` once per variant per round, the variants alternating (A B C A B C ...),
and prints each run's seconds per step and matmul probe, then per variant the median step and
the median of its step time divided by the baseline's in the same round: with the VM's speed
drifting over minutes, a ratio taken round by round is the figure to trust.

Variants (``VARIANTS`` below):
    baseline     what the CLI sets (oneDNN on, nothing else)
    fuse         XLA auto-clustering of element-wise ops only (``--tf_xla_ops_to_cluster=FUSIBLE``):
                 matmuls stay oneDNN kernels, the chains between them become fused XLA kernels
    autocluster  XLA auto-clustering of everything it can compile, matmuls included
    interop1     one inter-op thread (``TF_NUM_INTEROP_THREADS=1``) instead of one per core
    intraop1     one intra-op thread (``TF_NUM_INTRAOP_THREADS=1``): each kernel on one core,
                 independent kernels side by side
    caller       oneDNN counts the calling thread as one of its workers
                 (``TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1``)
    primcache    oneDNN keeps at most 64 compiled primitives (``ONEDNN_PRIMITIVE_CACHE_CAPACITY=64``,
                 default 1024): less memory for JIT-compiled kernels, more recompiling
    sysalloc     oneDNN ops allocate with the system allocator instead of TensorFlow's pool
                 (``TF_ONEDNN_USE_SYSTEM_ALLOCATOR=1``)
    arena1       glibc malloc keeps one arena for all threads (``MALLOC_ARENA_MAX=1``) instead of
                 up to eight per core: freed small blocks are reused across threads
    mmap64k      glibc serves blocks of 64 KiB and more with mmap and returns freed memory at once
                 (``MALLOC_MMAP_THRESHOLD_=65536 MALLOC_TRIM_THRESHOLD_=0``)
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

AUTO_JIT = "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"
VARIANTS = {
    "baseline": {},
    "fuse": {"TF_XLA_FLAGS": AUTO_JIT + " --tf_xla_ops_to_cluster=FUSIBLE"},
    "autocluster": {"TF_XLA_FLAGS": AUTO_JIT},
    "interop1": {"TF_NUM_INTEROP_THREADS": "1"},
    "intraop1": {"TF_NUM_INTRAOP_THREADS": "1"},
    "caller": {"TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD": "1"},
    "primcache": {"ONEDNN_PRIMITIVE_CACHE_CAPACITY": "64"},
    "sysalloc": {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1"},
    "arena1": {"MALLOC_ARENA_MAX": "1"},
    "mmap64k": {"MALLOC_MMAP_THRESHOLD_": "65536", "MALLOC_TRIM_THRESHOLD_": "0"},
}
STEP_LINE = re.compile(r"^\w[\w-]*: (?P<seconds>[\d.]+) s/step .*peak RSS (?P<rss>\d+) MB")
PROBE_LINE = re.compile(r"matmul: (?P<rate>[\d.]+) GFLOP/s")


def run_once(variant, config, steps):
    """(seconds per step, peak RSS MB, matmul GFLOP/s) of one train_throughput.py process."""
    env = dict(os.environ, **VARIANTS[variant])  # earlier: PYTHONPATH, set by main()
    script = Path(__file__).with_name("train_throughput.py")
    result = subprocess.run(
        [sys.executable, str(script), "--configs", config, "--steps", str(steps)],
        env=env, capture_output=True, text=True, check=True)
    step = probe = None
    for line in result.stdout.splitlines():
        step = step or STEP_LINE.match(line)
        probe = probe or PROBE_LINE.search(line)
    if step is None or probe is None:
        raise RuntimeError(f"train_throughput.py printed no step line:\n{result.stdout}")
    return float(step["seconds"]), int(step["rss"]), float(probe["rate"])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="default", help="a train_throughput.py config")
    parser.add_argument("--variants", default="baseline,fuse,autocluster",
                        help="comma-separated, the first is the baseline: " + ", ".join(VARIANTS))
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per process")
    parser.add_argument("--earlier-tree", help="another checkout, for the variant 'earlier'")
    args = parser.parse_args(argv)
    if args.earlier_tree:
        if not (Path(args.earlier_tree) / "nlp_tutorials").is_dir():
            parser.error(f"--earlier-tree {args.earlier_tree}: no nlp_tutorials package there")
        VARIANTS["earlier"] = {"PYTHONPATH": str(Path(args.earlier_tree).resolve())}
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        parser.error(f"--variants: unknown {unknown}; expected some of {list(VARIANTS)}")
    runs = {name: [] for name in names}
    for round_index in range(args.rounds):
        for name in names:
            seconds, rss, rate = run_once(name, args.config, args.steps)
            runs[name].append(seconds)
            print(f"round {round_index + 1} {name}: {seconds:.3f} s/step, peak RSS {rss} MB, "
                  f"matmul {rate:.1f} GFLOP/s", flush=True)
    baseline = runs[names[0]]
    for name in names:
        ratios = [s / b for s, b in zip(runs[name], baseline)]
        print(f"{args.config}, {name}: median {statistics.median(runs[name]):.3f} s/step, "
              f"per-round ratio to {names[0]} {statistics.median(ratios):.3f} "
              f"(range {min(ratios):.3f}-{max(ratios):.3f})")


if __name__ == "__main__":
    main()
