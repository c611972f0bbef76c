"""Pre-training in bfloat16 against float32, seed for seed: the loss curves and the test scores.

    python benchmarks/precision_pretraining.py --out runs/precision --seeds 1,2,3
    python benchmarks/precision_pretraining.py --out runs/precision --seeds 1,2,3 \
        --figure docs/images/precision_pretraining.png

Runs ``python -m nlp_tutorials.bert train --no-plots --precision P --seed S`` (its defaults
otherwise: 1,000 steps on MRPC) for P in float32 and mixed_bfloat16 and each seed, each in a
fresh process, into ``--out``/``P_sS`` (its output in ``P_sS.log``, its wall time in
``P_sS.json``); a run whose ``.json`` exists is read, not run again. Then prints, seed by seed,
the training loss at the last step, the largest gap between the two precisions' loss curves
(logged every 50 steps), the masked-token and next-sentence accuracy on MRPC's test split (as
``train`` prints them), and the wall time; the means and standard deviations over seeds; and
with ``--figure`` draws both loss curves of every seed.

Wall times are only comparable on one CPU: bfloat16 pays on CPUs with AVX512_BF16 or AMX and
is emulated, several times slower, on others.
"""
import argparse
import json
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

PRECISIONS = ("float32", "mixed_bfloat16")
TEST_LINE = re.compile(r"test masked-token accuracy ([\d.]+) .*NSP accuracy ([\d.]+)")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder of the runs")
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated seeds")
    parser.add_argument("--figure", help="a .png to draw the loss curves in")
    return parser.parse_args(argv)


def run(folder: Path, precision: str, seed: int) -> dict:
    """Train one run (unless its record exists); its record: wall seconds and test scores."""
    record, log = folder.with_suffix(".json"), folder.with_suffix(".log")
    if record.exists():
        return json.loads(record.read_text())
    command = [sys.executable, "-m", "nlp_tutorials.bert", "train", "--no-plots",
               "--precision", precision, "--seed", str(seed), "--model-dir", str(folder)]
    start = time.perf_counter()
    with open(log, "w") as output:
        finished = subprocess.run(command, stdout=output, stderr=subprocess.STDOUT, check=False)
    wall = time.perf_counter() - start
    if finished.returncode:
        sys.exit(f"{' '.join(command)} failed; see {log}")
    found = TEST_LINE.search(log.read_text())
    if found is None:
        sys.exit(f"{log}: the run printed no test scores")
    result = {"command": command, "wall_seconds": wall,
              "test_mlm_accuracy": float(found[1]), "test_nsp_accuracy": float(found[2])}
    record.write_text(json.dumps(result) + "\n")
    return result


def curve(folder: Path, tag: str = "loss") -> dict:
    """{step: value} of one scalar the run logged for TensorBoard."""
    import tensorflow as tf

    values = {}
    for events in sorted((folder / "logs").glob("events.out.tfevents.*")):
        for record in tf.data.TFRecordDataset(str(events)):
            event = tf.compat.v1.Event.FromString(record.numpy())
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return values


def table(runs: dict, seeds) -> None:
    """Print each seed's figures, both precisions side by side, then means and spreads."""
    print("seed | precision | loss at the last step | largest loss gap | test masked-token "
          "accuracy | test NSP accuracy | wall s")
    for seed in seeds:
        gap = max(abs(runs[seed]["float32"]["curve"][step]
                      - runs[seed]["mixed_bfloat16"]["curve"][step])
                  for step in runs[seed]["float32"]["curve"])
        for precision in PRECISIONS:
            one = runs[seed][precision]
            last = one["curve"][max(one["curve"])]
            print(f"{seed} | {precision} | {last:.4f} | {gap:.4f} | "
                  f"{one['test_mlm_accuracy']:.3f} | {one['test_nsp_accuracy']:.3f} | "
                  f"{one['wall_seconds']:.0f}")
    for precision in PRECISIONS:
        for key in ("test_mlm_accuracy", "test_nsp_accuracy"):
            values = [runs[seed][precision][key] for seed in seeds]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            print(f"{precision} {key}: {statistics.mean(values):.4f} ± {spread:.4f} "
                  f"over {len(values)} seeds")


def draw(runs: dict, seeds, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4))
    for seed in seeds:
        for precision, style in zip(PRECISIONS, ("-", "--")):
            points = sorted(runs[seed][precision]["curve"].items())
            axes.plot([s for s, _ in points], [v for _, v in points], style,
                      label=f"{precision}, seed {seed}")
    axes.set_xlabel("step")
    axes.set_ylabel("training loss (masked LM + 0.2 x NSP)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    print(f"figure written to {path}")


def main(argv=None):
    args = parse_args(argv)
    seeds = [int(seed) for seed in args.seeds.split(",")]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = {}
    for seed in seeds:
        for precision in PRECISIONS:
            folder = out / f"{precision}_s{seed}"
            runs.setdefault(seed, {})[precision] = {**run(folder, precision, seed),
                                                    "curve": curve(folder)}
    table(runs, seeds)
    if args.figure:
        draw(runs, seeds, args.figure)
    return 0


if __name__ == "__main__":
    sys.exit(main())
