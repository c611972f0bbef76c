"""Fine-tune BERT on a task (MRPC paraphrase detection by default): the recipe and its loop.

The recipe (BERT paper, section 4.1): the task's head (for MRPC the pooled ``[CLS]`` vector
feeding a 2-way :class:`~nlp_tutorials.heads.SequenceClassifier`) trains with the whole network,
AdamW, linear warm-up over 10% of the steps, then linear decay. The task
(:mod:`nlp_tutorials.tasks`) reads, encodes, builds the head and scores; this module only runs
the model. MRPC has no official dev split in the original files, so the last ``dev_size``
(by default a tenth of train, at most 408: GLUE's dev size) train pairs are held out: the epoch
with the best dev accuracy is kept, and only that model is scored on the test split. With
``dev_size`` 0 every train pair trains and the last epoch is kept: the usual second stage once
a recipe (its number of epochs above all) has been chosen on dev.

``--init-from DIR`` starts instead from real pretrained weights (see
:mod:`nlp_tutorials.models.pretrained`), or from a model ``finetune`` wrote: its encoder, and
its head too where the new task's head has the same layers (SQuAD v1.1's span head going on to
SQuAD v2.0, as BERT's authors did for v2.0).

Files in ``output_dir``: the model folder :mod:`nlp_tutorials.finetuned.folders` describes
(``model.keras``, ``task.json``, the tokenizer's files), and ``results.json``: this run's
settings and scores. Predicting and scoring a saved model live in :mod:`nlp_tutorials.finetuned`.
"""
import dataclasses
import json
import math
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np

from nlp_tutorials.finetuned.batching import batches
from nlp_tutorials.finetuned.folders import MODEL_FILE, load_finetuned, save_head, save_task
from nlp_tutorials.finetuned.inference import score_examples
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.model_files import RESULTS_FILE
from nlp_tutorials.system.progress import ProgressDisplay
from nlp_tutorials.system.provenance import run_provenance
from nlp_tutorials.tasks.base import Task, counted, reported
from nlp_tutorials.tasks.metrics import mean_std
from nlp_tutorials.text.tokenization import WordTokenizer, load_tokenizer
from nlp_tutorials.training import distribute
from nlp_tutorials.training.checkpoints import build_model, latest_checkpoint, restore_model
from nlp_tutorials.training.config import (
    WARMUP_FRACTION,
    WEIGHT_DECAY,
    FinetuneConfig,
    TrainConfig,
)
from nlp_tutorials.training.loop import Hook, epoch_batches, train_steps
from nlp_tutorials.training.optimization import make_optimizer


def backbone_and_tokenizer(config: FinetuneConfig, task: Task | None = None):
    """The backbone to fine-tune and its tokenizer.

    A real pretrained BERT from ``init_from`` (with its own WordPiece vocabulary), else the
    checkpoint ``train`` left in ``model_dir``, else (``from_scratch``) a fresh model of the
    default pre-training size, its word vocabulary learnt from the train file of ``task``
    (None: the task ``config`` names).
    """
    if config.init_from:
        from nlp_tutorials.models.bert import BERT

        # Fine-tuning never uses the pre-training heads: a checkpoint without them (a sentence
        # encoder's) is as good, and loading says nothing of them.
        return (BERT.from_pretrained(config.init_from, printer=lambda note: None),
                load_tokenizer(config.init_from))
    if not config.from_scratch:
        if not latest_checkpoint(config.model_dir):
            raise UserError(f"{config.model_dir}: no pre-trained checkpoint; run `python -m "
                            f"nlp_tutorials.bert train` first, or pass --from-scratch")
        return restore_model(config.model_dir)
    task = task or config.make_task(printer=None)
    train = task.read("train")  # the whole file: dev examples' words are known, not their labels
    tokenizer = WordTokenizer.build(task.texts(train))
    model_config = TrainConfig().model_config(tokenizer.vocab_size,
                                              task.longest(tokenizer, train))
    return build_model(model_config, config.seed), tokenizer


def starting_point(config: FinetuneConfig, task: Task | None = None):
    """(backbone, tokenizer, earlier head or None): :func:`backbone_and_tokenizer`'s, or, when
    ``init_from`` holds a model ``finetune`` wrote (``model.keras``), its backbone, its
    tokenizer and its head, whose own layers :func:`carry_head` hands on."""
    if config.init_from and (Path(config.init_from) / MODEL_FILE).is_file():
        earlier = load_finetuned(config.init_from)
        return earlier.head.backbone, earlier.tokenizer, earlier.head
    return (*backbone_and_tokenizer(config, task), None)


def head_layers(head) -> list:
    """The weights of ``head`` that are its own, not its backbone's, in creation order."""
    shared = {id(weight) for weight in head.backbone.weights}
    return [weight for weight in head.weights if id(weight) not in shared]


def carry_head(earlier, head, source: str, printer=print) -> None:
    """Start ``head``'s own layers from ``earlier``'s when both are the same kind of head with
    weights of the same shapes (same labels); else keep them fresh. ``printer`` hears which."""
    mine, theirs = head_layers(head), head_layers(earlier)
    if type(head) is type(earlier) and [w.shape for w in mine] == [w.shape for w in theirs]:
        for weight, value in zip(mine, theirs):
            weight.assign(value)
        printer(f"started from {source}: its encoder and its {type(head).__name__} head")
        return
    printer(f"started from {source}: its encoder; its {type(earlier).__name__} head does not "
            f"fit this task's {type(head).__name__}, which starts fresh")


def new_head(task: Task, backbone, config: FinetuneConfig, earlier=None, printer=print):
    """``task``'s head around ``backbone``, its own layers from the ``earlier`` head where
    they fit (:func:`carry_head`)."""
    # --pooling chooses how a sequence classifier summarises; the other heads have no choice.
    head = task.build_head(backbone, **{name: getattr(config, name)
                                        for name in task.shape.head_settings})
    if earlier is not None:
        carry_head(earlier, head, config.init_from, printer)
    return head


def compile_for_epochs(head, train: dict, epochs: int, batch_size: int, learning_rate: float,
                       warmup_fraction: float = WARMUP_FRACTION,
                       weight_decay: float = WEIGHT_DECAY) -> None:
    """Compile ``head`` with the recipe's optimizer for ``epochs`` passes over the encoded
    ``train`` examples in batches of ``batch_size`` (the last partial one dropped, as
    :func:`train_epochs` drops it): AdamW peaking at ``learning_rate`` after
    ``warmup_fraction`` of the steps, then decaying linearly to 0 at the last step."""
    steps = epochs * (len(train["input_ids"]) // batch_size)
    head.compile(optimizer=make_optimizer(learning_rate, steps, warmup_fraction, weight_decay))


class EpochProgress:
    """Training's progress epoch by epoch, as Keras' ``fit`` shows it: each epoch a
    :class:`~nlp_tutorials.system.progress.Progress` of its own on ``display``, titled
    ``epoch 2/3``, its steps, time left and smoothed loss; the loop's steps count over the run.
    Each epoch's starts when the one before has ended (:meth:`next_epoch`), its scores said."""

    def __init__(self, display: ProgressDisplay, epochs: int, steps_per_epoch: int,
                 batch_size: int):
        self.display, self.epochs, self.steps_per_epoch = display, epochs, steps_per_epoch
        self.batch_size, self.number = batch_size, 0
        self.next_epoch()

    def next_epoch(self) -> None:
        self.number += 1
        self.epoch = self.display.named(f"epoch {self.number}/{self.epochs}").start(
            self.steps_per_epoch, batch_size=self.batch_size)

    def update(self, step: int, metrics: dict) -> None:
        self.epoch.update(step - (self.number - 1) * self.steps_per_epoch, metrics)


def train_epochs(head, train: dict, epochs: int, batch_size: int, rng, strategy,
                 end_of_epoch, display: ProgressDisplay | None = None) -> None:
    """``epochs`` passes over the encoded ``train`` pairs in random length-grouped batches (the
    last partial one dropped), through the training loop; ``end_of_epoch(epoch, metrics)``
    after each (epoch from 1; ``loss`` the mean over the epoch's steps, the other metrics its
    last step's: one batch's loss moves too much to compare epochs by). Each epoch's progress
    is shown on ``display`` (None: none). Ctrl-C stops after the current step and raises
    KeyboardInterrupt."""
    steps_per_epoch = len(train["input_ids"]) // batch_size
    every_epoch = epoch_batches(
        lambda: batches(train, batch_size, rng, drop_remainder=True,
                        pad_id=head.backbone.config.pad_token_id), epochs)
    losses = []  # this epoch's, step by step
    progress = (EpochProgress(display, epochs, steps_per_epoch, batch_size)
                if display is not None else None)

    def epoch_done(step, batch, metrics):
        mean_loss = sum(losses) / len(losses)
        losses.clear()
        end_of_epoch(step // steps_per_epoch, {**metrics, "loss": mean_loss})
        if progress and step // steps_per_epoch < epochs:
            progress.next_epoch()

    hooks = (Hook(1, lambda step, batch, metrics: losses.append(metrics["loss"])),
             Hook(steps_per_epoch, epoch_done))  # in this order after each step
    if train_steps(head, every_epoch, 1, epochs * steps_per_epoch, strategy=strategy,
                   progress=progress, hooks=hooks):
        raise KeyboardInterrupt


class Encoded(NamedTuple):
    """A split's examples and their arrays (None: the split is empty)."""
    examples: list
    arrays: dict | None


def encode_splits(task: Task, tokenizer, config: FinetuneConfig) -> tuple:
    """(train arrays for the model, dev :class:`Encoded`, test :class:`Encoded`)."""
    train_examples = task.examples("train")
    if config.swap_augment:
        train_examples = task.augment(train_examples)
    train = task.shape.for_model(task.encode(tokenizer, train_examples, task.max_len))
    if len(train["input_ids"]) < config.batch_size:
        raise UserError(f"{len(train['input_ids'])} train examples for {task.title}, fewer than "
                        f"--batch-size {config.batch_size}; expected a smaller --batch-size")
    held = []
    for split in ("dev", "test"):
        examples = task.examples(split)
        arrays = task.encode(tokenizer, examples, task.max_len) if examples else None
        held.append(Encoded(examples, arrays))
    return (train, *held)


def seeded_start(config: FinetuneConfig, task: Task, seed: int, strategy):
    """:func:`starting_point` under ``strategy``, everything random seeded with ``seed`` first.

    First, as Keras' dropout layers and initialisers take their seeds from Python's generator
    as they are made: a restored or loaded backbone's dropout (and a pooler a checkpoint lacks)
    would otherwise follow whatever drew from it before. The seed then goes on to the head's
    weights and dropout's masks; the batch order has a generator of its own from ``seed``.
    """
    keras.utils.set_random_seed(seed)
    with strategy.scope():
        return starting_point(dataclasses.replace(config, seed=seed), task)


def finetune_once(config: FinetuneConfig, task: Task, seed: int, strategy, printer=print,
                  after_epoch=None, note_printer=None, display: ProgressDisplay | None = None):
    """Fine-tune one head with ``seed``; returns (head, tokenizer, dev scores, test scores,
    the epoch kept, from 1, the task as the head was trained and tuned: its ``max_len`` fitted
    to the model's positions). ``after_epoch(epoch, dev score)``, if given, hears each epoch's
    ``task.selection_score`` (a recipe search stops an unpromising trial from there).
    ``note_printer`` (default ``printer``) hears which of an earlier model's layers the head
    starts from: a run of several seeds says it once. ``display`` (default: ``printer``'s)
    shows the progress of each epoch and of each pass over dev and test examples, under
    ``seed N``.

    Everything random is drawn from ``seed`` (:func:`seeded_start`): on one machine at one
    thread count the same seed gives the same bits (docs/finetuning.md#repeatable-runs).

    The epoch with the best dev score (``task.selection_score``: accuracy for MRPC) is kept and
    the task returned tuned on it (:meth:`~nlp_tutorials.tasks.base.Task.tuned`); without dev
    examples (``dev_size`` 0) the last epoch is, and the dev scores are None; with no test file
    the test scores are None. The head trains under ``strategy`` (its variables live on every
    replica); scoring runs on one device.
    """
    note_printer = note_printer or printer
    display = (display or ProgressDisplay(printer)).named(f"seed {seed}")
    backbone, tokenizer, earlier = seeded_start(config, task, seed, strategy)
    task = task.replace(max_len=min(task.max_len, backbone.config.max_position_embeddings))
    train, dev, test = encode_splits(task, tokenizer, config)
    with strategy.scope():
        head = new_head(task, backbone, config, earlier, note_printer)
        compile_for_epochs(head, train, config.epochs, config.batch_size, config.learning_rate,
                           config.warmup_fraction, config.weight_decay)
    best = (-math.inf, None, None, config.epochs)  # (score, weights, dev scores, epoch)

    def end_of_epoch(epoch, metrics):
        nonlocal best
        report = f"seed {seed} epoch {epoch}: train loss {metrics['loss']:.3f}"
        if dev.arrays is None:
            printer(report)
            return
        dev_scores = score_examples(head, task, dev.examples, dev.arrays,
                                    display=display.named(f"epoch {epoch} dev"))
        printer(f"{report}, dev {task.describe(dev_scores)}")
        score = task.selection_score(dev_scores)
        if score > best[0]:
            best = (score, [w.numpy() for w in head.weights], dev_scores, epoch)
        if after_epoch is not None:
            after_epoch(epoch, score)

    train_epochs(head, train, config.epochs, config.batch_size, np.random.default_rng(seed),
                 strategy, end_of_epoch, display)
    if dev.arrays is not None:
        for weight, value in zip(head.weights, best[1]):
            weight.assign(value)
        task = task.tuned(best[2])
    # Training is over (and the loop's compiled step with it). Dropping AdamW (two slots the
    # size of every weight) frees that memory for scoring and saving, and keeps it out of
    # model.keras, which only prediction reads: the file is a third of the size.
    head.optimizer = None
    test_scores = (None if test.arrays is None else score_examples(
        head, task, test.examples, test.arrays, display=display.named("test")))
    printer(f"seed {seed}: {kept_line(task, best, dev, test_scores)}")
    return head, tokenizer, best[2], test_scores, best[3], task


def kept_line(task: Task, best: tuple, dev: Encoded, test_scores: dict | None) -> str:
    """What :func:`finetune_once` says of the epoch it kept (``best``: its score, weights, dev
    scores and number) and of its test scores."""
    kept = ("last epoch (no dev examples)" if dev.arrays is None
            else f"epoch {best[3]}, best dev {task.metrics[0][1]} "
                 f"{reported(task.metrics[0][0], best[0])}")
    return kept + (f"; test {task.describe(test_scores)}" if test_scores is not None else "")


def finetune(config: FinetuneConfig, printer=print, task: Task | None = None) -> dict:
    """Fine-tune on ``config``'s task with ``seeds`` seeds; save the best-on-dev head (the first
    seed's without dev examples) with its tokenizer and task; return every run's scores and
    the mean ± std of the test scores (of dev's when there is no test file).

    ``task``: the task ``config`` names, its files already read (the command line reads them
    before TensorFlow starts); None builds and reads it here. Under ``--strategy multiworker``
    the workers other than the chief write into a sub-folder of ``output_dir`` (see
    :func:`nlp_tutorials.training.distribute.worker_dir`).
    """
    if task is None:
        task = config.make_task(printer)
        task.read_splits()  # a missing or broken file stops the run before anything starts
    # First: logical CPU devices and the multi-worker runtime need a TensorFlow not yet started.
    strategy = distribute.make_strategy(config.strategy, config.cpu_replicas)
    distribute.check_batch_size(config.batch_size, strategy)
    precision = distribute.resolve_precision(config.precision)  # "auto": what it stands for here
    config = dataclasses.replace(config, precision=precision.name)  # as results.json records
    printer(precision.line())
    distribute.set_precision(config.precision)
    distribute.set_op_determinism(config.deterministic)
    output_dir = distribute.worker_dir(config.output_dir, config.strategy)
    searched = {}
    if config.search:
        from nlp_tutorials.training.search import search_recipe

        config, searched["search"] = search_recipe(config, task, strategy, finetune_once,
                                                   output_dir, printer)
    runs = []
    kept = None  # (head, tokenizer, its dev score, its task)
    for seed in range(config.seed, config.seed + config.seeds):
        said = printer if seed == config.seed else (lambda line: None)
        head, tokenizer, dev, test, epoch, seed_task = finetune_once(
            config, task, seed, strategy, printer, note_printer=said)
        runs.append({"seed": seed, "epoch": epoch, "dev": dev, "test": test})
        dev_score = -math.inf if dev is None else seed_task.selection_score(dev)
        if kept is None or dev_score > kept[2]:
            kept = (head, tokenizer, dev_score, seed_task)
    scored = "test" if runs[0]["test"] is not None else "dev"
    summary = ({name: mean_std([run[scored][name] for run in runs]) for name, _ in task.metrics}
               if runs[0][scored] is not None else {})
    if summary:
        printer(f"{task.title} {scored} over {counted(len(runs), 'seed')}: "
                f"{task.describe_mean_std(summary, len(runs))}")
    save_head(kept[0], output_dir)
    kept[1].save(output_dir)
    save_task(output_dir, kept[3])
    save_results(output_dir, config, runs, {f"{scored}_mean_std": summary, **searched})
    printer(f"fine-tuned model written to {output_dir / MODEL_FILE}")
    return {"runs": runs, f"{scored}_mean_std": summary}


def save_results(output_dir, config: FinetuneConfig, runs: list, summary: dict) -> Path:
    """Write ``results.json`` (the config, every seed's scores, and ``summary``: the mean and
    std of each test score, ``test_mean_std``, or of dev's, ``dev_mean_std``, without a test
    file, and what a recipe search chose, ``search``) atomically; return its path. Beside them
    the run's ``command``, ``date``, ``machine`` and ``revision``
    (:func:`~nlp_tutorials.system.provenance.run_provenance`): what a results table's row
    needs (``scripts/results_tables.py add``)."""
    import tensorflow as tf

    gpus = [device.name for device in tf.config.list_physical_devices("GPU")]
    path = Path(output_dir) / RESULTS_FILE
    write_text_atomic(path, json.dumps(
        {**run_provenance(gpus), "config": dataclasses.asdict(config), "runs": runs,
         **summary}, indent=2, default=float) + "\n")
    return path
