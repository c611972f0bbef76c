"""Where one served pair's time goes: the SavedModel answering MRPC pairs one at a time, traced.

    python benchmarks/serving_profile.py --model-dir visual/models/minilm_mrpc --threads 2
    python benchmarks/serving_profile.py --model-dir ... --signature predict_ids --threads 1

Exports the fine-tuned model in ``--model-dir`` as ``export-model`` does (into a temporary
folder), loads it as a server would, answers ``--calls`` MRPC test pairs one at a time
untraced (the median is the latency printed), then the same pairs under TensorFlow's profiler,
and prints from the trace's timeline the wall time per call by op type and how much of it the
intra-op threads were busy (``profile_step.py --wall``'s summary). TensorFlow's intra-op pool
has ``--threads`` threads and its inter-op pool one, as in ``serving_speed.py``; oneDNN's kernels
are on, as the package's commands start TensorFlow.

The trace is converted by the converter TensorFlow ships (``_pywrap_profiler_plugin``, what
TensorBoard's profile plugin calls); ``--xprof-python`` names a Python with the ``xprof``
package to convert with instead. The trace (``--logdir``) also opens in TensorBoard's Profile tab.
"""
import argparse
import glob
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from profile_step import CONVERT, summarise_wall  # noqa: E402
from serving_speed import encoded_pairs  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="a fine-tuned MRPC model folder")
    parser.add_argument("--signature", choices=("serving_default", "predict_ids"),
                        default="serving_default",
                        help="raw strings in, or the package's tokenizer in front")
    parser.add_argument("--threads", type=int, default=2, help="intra-op threads")
    parser.add_argument("--calls", type=int, default=40, help="pairs answered, one a call")
    parser.add_argument("--logdir", default=os.path.join(tempfile.gettempdir(),
                                                         "nlp_tutorials_serving_profile"))
    parser.add_argument("--xprof-python", help="a Python with the xprof package, to convert")
    return parser.parse_args(argv)


def answerer(args, folder: Path):
    """A function answering pair ``i`` of the MRPC test pairs, through the exported model."""
    import tensorflow as tf

    from nlp_tutorials.serving.savedmodel import export_model, import_tensorflow_text
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.text.tokenization import load_tokenizer

    import_tensorflow_text()
    export_model(args.model_dir, folder, printer=lambda line: None)
    signature = tf.saved_model.load(str(folder / "1")).signatures[args.signature]
    pairs = load_mrpc("test")[-args.calls:]
    if args.signature == "serving_default":
        inputs = [{"sentence1": tf.constant([p.text]), "sentence2": tf.constant([p.pair])}
                  for p in pairs]
    else:
        tokenizer = load_tokenizer(args.model_dir)
        inputs = [{name: tf.constant(array) for name, array
                   in encoded_pairs(tokenizer, [p.text], [p.pair]).items()} for p in pairs]
    return lambda i: signature(**inputs[i])["probability"].numpy()


def trace(args, answer):
    """The untraced median latency (ms), and the xplane file of the traced calls."""
    import tensorflow as tf

    for i in range(min(3, args.calls)):  # the first calls allocate
        answer(i)
    latencies = []
    for i in range(args.calls):
        start = time.perf_counter()
        answer(i)
        latencies.append(time.perf_counter() - start)
    tf.profiler.experimental.start(args.logdir)
    for i in range(args.calls):
        answer(i)
    tf.profiler.experimental.stop()
    xplane = sorted(glob.glob(f"{args.logdir}/plugins/profile/*/*.xplane.pb"))[-1]
    return 1000 * statistics.median(latencies), xplane


def timeline(args, xplane) -> Path:
    """The trace's timeline as trace-viewer JSON, written beside it."""
    output = Path(args.logdir) / "trace_viewer.json"
    if args.xprof_python:
        subprocess.run([args.xprof_python, "-c", CONVERT, str(output), "trace_viewer", xplane],
                       check=True, stderr=subprocess.DEVNULL)
        return output
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin

    data, converted = _pywrap_profiler_plugin.xspace_to_tools_data([xplane], "trace_viewer@",
                                                                   {})
    if not converted:
        sys.exit(f"TensorFlow's converter could not read {xplane}: {data[:200]!r}; "
                 f"give --xprof-python")
    output.write_bytes(data if isinstance(data, bytes) else data.encode())
    return output


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with tempfile.TemporaryDirectory() as folder:
        latency, xplane = trace(args, answerer(args, Path(folder) / "served"))
    print(f"{args.signature}, {args.threads} intra-op thread(s), one MRPC test pair a call: "
          f"median {latency:.1f} ms untraced over {args.calls} calls")
    print(f"trace written: {xplane}")
    summarise_wall(timeline(args, xplane), args.calls, unit="call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
