"""Fine-tune BERT on a task (MRPC paraphrase detection by default), and predict with the result.

The recipe (BERT paper, section 4.1): the task's head (for MRPC the pooled ``[CLS]`` vector
feeding a 2-way :class:`~nlp_tutorials.heads.SequenceClassifier`) trains with the whole network,
AdamW, linear warm-up over 10% of the steps, then linear decay. The task
(:mod:`nlp_tutorials.tasks`) reads, encodes, builds the head and scores; this module only runs
the model. MRPC has no official dev split in the original files, so the last ``dev_size``
(default 408, GLUE's dev size) train pairs are held out: the epoch with the best dev accuracy is
kept, and only that model is scored on the test split. With ``dev_size`` 0 every train pair
trains and the last epoch is kept: the usual second stage once a recipe (its number of epochs
above all) has been chosen on dev.

``--init-from DIR`` starts instead from real pretrained weights (see :mod:`nlp_tutorials.models.pretrained`).

Files in ``output_dir``: ``model.keras`` (head + backbone), ``task.json`` (the task's name and
label names), ``vocab.txt`` + ``tokenizer_config.json``, ``results.json``.
"""
import copy
import dataclasses
import functools
import json
import math
import zipfile
from pathlib import Path
from typing import NamedTuple

import keras
import numpy as np
import tensorflow as tf

from nlp_tutorials.training import distribute
from nlp_tutorials.training.checkpoints import build_model, latest_checkpoint, restore_model
from nlp_tutorials.training.config import FinetuneConfig, TrainConfig
from nlp_tutorials.training.loop import Hook, epoch_batches, train_steps
from nlp_tutorials.text.packing import trim_padding
from nlp_tutorials.tasks import TASKS, get_task
from nlp_tutorials.tasks.base import Task, model_arrays
from nlp_tutorials.tasks.shapes import softmax
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import read_json_object, save_atomic, write_text_atomic
from nlp_tutorials.system.values import integer_field, refuse, required, text_field
from nlp_tutorials.models import heads
from nlp_tutorials.models.masks import MASK_VALUE
from nlp_tutorials.tasks.metrics import mean_std
from nlp_tutorials.training.optimization import make_optimizer
from nlp_tutorials.text.tokenization import Tokenizer, WordTokenizer, load_tokenizer

MODEL_FILE = "model.keras"
RESULTS_FILE = "results.json"
TASK_FILE = "task.json"
SAVED_LABELS = "a non-empty list of distinct label names, as `finetune` writes it"


class Finetuned(NamedTuple):
    """What :func:`load_finetuned` reads back: the head, its tokenizer and its task (built with
    the label names saved beside the model)."""
    head: heads.Head
    tokenizer: Tokenizer
    task: Task


def backbone_and_tokenizer(config: FinetuneConfig, task: Task | None = None):
    """The backbone to fine-tune and its tokenizer.

    A real pretrained BERT from ``init_from`` (with its own WordPiece vocabulary), else the
    checkpoint ``train`` left in ``model_dir``, else (``from_scratch``) a fresh model of the
    default pre-training size, its word vocabulary learnt from the train file of ``task``
    (None: the task ``config`` names).
    """
    if config.init_from:
        from nlp_tutorials.models.bert import BERT

        return BERT.from_pretrained(config.init_from), load_tokenizer(config.init_from)
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


def length_grouped_order(lengths, batch_size: int, rng, window: int = 32) -> np.ndarray:
    """A random order of ``len(lengths)`` items in which each batch holds items of similar length.

    The items are shuffled, cut into windows of ``window`` batches, sorted by length inside each
    window, cut into batches, and the full batches are shuffled (a partial one goes last). Each
    batch is then trimmed to its longest item, so less of it is padding, while which items meet
    in a batch stays random. Returns int indices [len(lengths)].
    """
    order = rng.permutation(len(lengths))
    span = batch_size * window
    order = np.concatenate([chunk[np.argsort(-lengths[chunk], kind="stable")]
                            for chunk in np.split(order, range(span, len(order), span))])
    groups = np.split(order, range(batch_size, len(order), batch_size))
    full = [g for g in groups if len(g) == batch_size]
    partial = [g for g in groups if len(g) < batch_size]
    return np.concatenate([full[i] for i in rng.permutation(len(full))] + partial)


def batches(arrays: dict, batch_size: int, rng=None, drop_remainder: bool = False, *,
            pad_id: int):
    """A tf.data pipeline of dict batches trimmed to their longest example.

    Given ``rng`` the order is random and length-grouped (:func:`length_grouped_order`), else
    the examples keep their order. ``pad_id``: the ``[PAD]`` id (the tokenizer's, or the
    model config's ``pad_token_id``). The arrays shaped as ``input_ids`` hold one value per
    token (ids, segments, a token task's tags) and are trimmed with it.
    """
    ids = arrays["input_ids"]  # [n, max_len], or [n, choices, max_len]
    if rng is None:
        order = slice(None)
    else:
        lengths = np.count_nonzero(ids != pad_id, axis=-1).reshape(len(ids), -1).max(axis=1)
        order = length_grouped_order(lengths, batch_size, rng)
    per_token = tuple(name for name, value in arrays.items() if value.shape == ids.shape)
    data = tf.data.Dataset.from_tensor_slices({k: v[order] for k, v in arrays.items()})
    trim = functools.partial(trim_padding, pad_id=pad_id, per_token=per_token)
    return (data.batch(batch_size, drop_remainder=drop_remainder).map(trim)
            .prefetch(tf.data.AUTOTUNE))


@functools.lru_cache(maxsize=4)
def _logits_function(head, masked: bool = False):
    """One traced inference function per head (and with or without a head mask), so repeated
    evaluations do not retrace. It returns the head's logits (a tensor, or a dict of them for
    spans) as float32: under mixed precision they may be float16."""
    ids = tf.TensorSpec([None] * len(head.dummy_shape), tf.int32)  # [batch, (choices,) step]
    signature = {"input_ids": ids, "token_type_ids": ids}
    if masked:
        config = head.backbone.config
        signature["head_mask"] = tf.TensorSpec(
            [config.num_hidden_layers, config.num_attention_heads], tf.float32)
    return tf.function(
        lambda b: tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), head(b, training=False)),
        input_signature=[signature])


def predict_batches(head, arrays: dict, batch_size: int = 64, head_mask=None):
    """The head's logits on ``arrays``, batch by batch in order: numpy float32 (a dict of them
    for spans), each batch trimmed to its longest example. ``head_mask`` [layers, heads] is
    passed to the backbone when given."""
    forward = _logits_function(head, head_mask is not None)
    inputs = {k: arrays[k] for k in ("input_ids", "token_type_ids")}
    extra = {} if head_mask is None else {"head_mask": tf.constant(head_mask, tf.float32)}
    for batch in batches(inputs, batch_size, pad_id=head.backbone.config.pad_token_id):
        yield tf.nest.map_structure(lambda x: x.numpy(), forward({**batch, **extra}))


def head_outputs(head, arrays: dict, batch_size: int = 64, head_mask=None):
    """The head's logits for every row of ``arrays``, in order (see :func:`predict_batches`).

    Outputs with one value per token (token tagging, spans) are padded back to the arrays'
    ``max_len`` with ``MASK_VALUE``, so batches trimmed to different lengths stack.
    """
    max_len = arrays["input_ids"].shape[-1]

    def full_length(x):  # [batch, step, ...] -> [batch, max_len, ...]
        widths = [(0, 0), (0, max_len - x.shape[1])] + [(0, 0)] * (x.ndim - 2)
        return np.pad(x, widths, constant_values=MASK_VALUE)

    stretch = full_length if head.per_position else (lambda x: x)
    parts = list(predict_batches(head, arrays, batch_size, head_mask))
    return tf.nest.map_structure(lambda *xs: np.concatenate([stretch(x) for x in xs]), *parts)


def class_probabilities(head, arrays: dict, batch_size: int = 64, head_mask=None) -> np.ndarray:
    """The softmax of a classifier's logits for every row: [n, labels] float32 (for MRPC,
    column 1 is P(paraphrase))."""
    return softmax(head_outputs(head, arrays, batch_size, head_mask))


def evaluate(head, task: Task, examples, arrays: dict, head_mask=None) -> dict:
    """The task's scores of ``head`` on ``examples`` (encoded as ``arrays``), under
    ``head_mask`` when given."""
    outputs = head_outputs(head, arrays, head_mask=head_mask)
    return task.score(examples, task.predictions(outputs, arrays, examples))


def train_epochs(head, train: dict, epochs: int, batch_size: int, rng, strategy,
                 end_of_epoch) -> None:
    """``epochs`` passes over the encoded ``train`` pairs in random length-grouped batches (the
    last partial one dropped), through the training loop; ``end_of_epoch(epoch, metrics)``
    after each (epoch from 1; ``loss`` the mean over the epoch's steps, the other metrics its
    last step's: one batch's loss moves too much to compare epochs by). Ctrl-C stops after
    the current step and raises KeyboardInterrupt."""
    steps_per_epoch = len(train["input_ids"]) // batch_size
    every_epoch = epoch_batches(
        lambda: batches(train, batch_size, rng, drop_remainder=True,
                        pad_id=head.backbone.config.pad_token_id), epochs)
    losses = []  # this epoch's, step by step

    def epoch_done(step, batch, metrics):
        mean_loss = sum(losses) / len(losses)
        losses.clear()
        end_of_epoch(step // steps_per_epoch, {**metrics, "loss": mean_loss})

    hooks = (Hook(1, lambda step, batch, metrics: losses.append(metrics["loss"])),
             Hook(steps_per_epoch, epoch_done))  # in this order after each step
    if train_steps(head, every_epoch, 1, epochs * steps_per_epoch, strategy=strategy,
                   hooks=hooks):
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
    train = model_arrays(task.encode(tokenizer, train_examples, task.max_len))
    if len(train["input_ids"]) < config.batch_size:
        raise UserError(f"{len(train['input_ids'])} train examples for {task.title}, fewer than "
                        f"--batch-size {config.batch_size}; expected a smaller --batch-size")
    held = []
    for split in ("dev", "test"):
        examples = task.examples(split)
        arrays = task.encode(tokenizer, examples, task.max_len) if examples else None
        held.append(Encoded(examples, arrays))
    return (train, *held)


def finetune_once(config: FinetuneConfig, task: Task, seed: int, strategy, printer=print,
                  after_epoch=None):
    """Fine-tune one head with ``seed``; returns (head, tokenizer, dev scores, test scores,
    the epoch kept, from 1). ``after_epoch(epoch, dev score)``, if given, hears each epoch's
    ``task.selection_score`` (a recipe search stops an unpromising trial from there).

    The epoch with the best dev score (``task.selection_score``: accuracy for MRPC) is kept and
    ``task`` tuned on it; without dev examples (``dev_size`` 0) the last epoch is, and the dev
    scores are None; with no test file the test scores are None. The head trains under
    ``strategy`` (its variables live on every replica); scoring runs on one device.
    """
    with strategy.scope():
        backbone, tokenizer = backbone_and_tokenizer(dataclasses.replace(config, seed=seed), task)
    task.max_len = min(task.max_len, backbone.config.max_position_embeddings)
    train, dev, test = encode_splits(task, tokenizer, config)
    keras.utils.set_random_seed(seed)
    steps_per_epoch = len(train["input_ids"]) // config.batch_size
    # --pooling chooses how a sequence classifier summarises; the other heads have no choice.
    options = {name: getattr(config, name) for name in task.shape.head_settings}
    with strategy.scope():
        head = task.build_head(backbone, **options)
        head.compile(optimizer=make_optimizer(config.learning_rate,
                                              config.epochs * steps_per_epoch,
                                              config.warmup_fraction, config.weight_decay))
    metric_name = task.metrics[0][1]
    best = (-math.inf, None, None, config.epochs)  # (score, weights, dev scores, epoch)

    def end_of_epoch(epoch, metrics):
        nonlocal best
        report = f"seed {seed} epoch {epoch}: train loss {metrics['loss']:.3f}"
        if dev.arrays is None:
            printer(report)
            return
        dev_scores = evaluate(head, task, dev.examples, dev.arrays)
        printer(f"{report}, dev {task.describe(dev_scores)}")
        score = task.selection_score(dev_scores)
        if score > best[0]:
            best = (score, [w.numpy() for w in head.weights], dev_scores, epoch)
        if after_epoch is not None:
            after_epoch(epoch, score)

    train_epochs(head, train, config.epochs, config.batch_size, np.random.default_rng(seed),
                 strategy, end_of_epoch)
    if dev.arrays is not None:
        for weight, value in zip(head.weights, best[1]):
            weight.assign(value)
        task.tune(best[2])
    # Training is over (and the loop's compiled step with it). Dropping AdamW (two slots the
    # size of every weight) frees that memory for scoring and saving, and keeps it out of
    # model.keras, which only prediction reads: the file is a third of the size.
    head.optimizer = None
    kept = ("last epoch (no dev examples)" if dev.arrays is None
            else f"epoch {best[3]}, best dev {metric_name} {best[0]:.3f}")
    test_scores = None
    if test.arrays is not None:
        test_scores = evaluate(head, task, test.examples, test.arrays)
        kept += f"; test {task.describe(test_scores)}"
    printer(f"seed {seed}: {kept}")
    return head, tokenizer, best[2], test_scores, best[3]


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
    distribute.set_precision(config.precision)
    output_dir = distribute.worker_dir(config.output_dir, config.strategy)
    searched = {}
    if config.search:
        from nlp_tutorials.training.search import search_recipe

        config, searched["search"] = search_recipe(config, task, strategy, finetune_once,
                                                   output_dir, printer)
    runs = []
    kept = None  # (head, tokenizer, its dev score, its task)
    for seed in range(config.seed, config.seed + config.seeds):
        # Each seed tunes a copy of its own (SQuAD v2.0's threshold), from the task as declared.
        seed_task = copy.copy(task)
        head, tokenizer, dev, test, epoch = finetune_once(config, seed_task, seed, strategy,
                                                          printer)
        runs.append({"seed": seed, "epoch": epoch, "dev": dev, "test": test})
        dev_score = -math.inf if dev is None else seed_task.selection_score(dev)
        if kept is None or dev_score > kept[2]:
            kept = (head, tokenizer, dev_score, seed_task)
    scored = "test" if runs[0]["test"] is not None else "dev"
    summary = ({name: mean_std([run[scored][name] for run in runs]) for name, _ in task.metrics}
               if runs[0][scored] is not None else {})
    if summary:
        printer(f"{task.title} {scored} over {len(runs)} seed(s): "
                f"{task.describe_mean_std(summary)}")
    save_head(kept[0], output_dir)
    kept[1].save(output_dir)
    save_task(output_dir, kept[3])
    save_results(output_dir, config, runs, {f"{scored}_mean_std": summary, **searched})
    printer(f"fine-tuned model written to {output_dir / MODEL_FILE}")
    return {"runs": runs, f"{scored}_mean_std": summary}


def save_results(output_dir, config: FinetuneConfig, runs: list, summary: dict) -> Path:
    """Write ``results.json`` (the config, every seed's scores, and ``summary``: the mean and
    std of each test score, ``test_mean_std``, or of dev's, ``dev_mean_std``, without a test
    file, and what a recipe search chose, ``search``) atomically; return its path."""
    path = Path(output_dir) / RESULTS_FILE
    write_text_atomic(path, json.dumps(
        {"config": dataclasses.asdict(config), "runs": runs, **summary}, indent=2,
        default=float) + "\n")
    return path


def save_head(head, output_dir: Path) -> Path:
    """``head.save`` through a temporary file and a rename, so a crash never leaves half a file."""
    return save_atomic(Path(output_dir) / MODEL_FILE, head.save)


def save_task(output_dir, task: Task) -> Path:
    """Write ``task.json`` beside the model: the task's name and its settings (label names,
    encoding length and stride, what else it needs: see :meth:`Task.settings`), so that
    :func:`load_finetuned` rebuilds the task and ``predict`` prints the labels by name."""
    path = Path(output_dir) / TASK_FILE
    write_text_atomic(path, json.dumps({"task": task.name, **task.settings()},
                                       indent=2) + "\n")
    return path


def load_task(output_dir, **options) -> Task:
    """The task saved beside a fine-tuned model by :func:`save_task`, built with ``options``
    too (``data_dir``, ``paths``: where ``evaluate`` reads); a model saved without
    ``task.json`` (before tasks were saved) is the default task's, MRPC."""
    path = Path(output_dir) / TASK_FILE
    if not path.is_file():
        return get_task(FinetuneConfig.task, **options)
    saved = read_json_object(path)
    name = text_field(saved, "task", path, choices=tuple(TASKS))
    labels = required(saved, "labels", path, SAVED_LABELS)
    if not (isinstance(labels, list) and labels and len(set(labels)) == len(labels)
            and all(isinstance(label, str) and label for label in labels)):
        raise refuse(path, "labels", labels, SAVED_LABELS)
    settings = {key: value for key, value in saved.items() if key != "task"}
    for key in ("max_len", "stride"):  # absent from files written before tasks had them
        if key in settings:
            integer_field(settings, key, path, minimum=1)
    try:
        return get_task(name, **settings, **options)
    except TypeError as err:  # a field the task's constructor does not take
        raise UserError(f"{path}: a field {TASKS[name].title} does not keep ({err}); "
                        f"expected the task.json `finetune` writes") from None
    except ValueError as err:  # a value the task's constructor cannot take
        raise UserError(f"{path}: {err}; expected the task.json `finetune` writes") from None


def load_finetuned(output_dir, **options) -> Finetuned:
    """(head, tokenizer, task) written by :func:`finetune`; the task's ``max_len`` is fitted
    to the head's positions, so every tool encodes with ``task.max_len``.

    ``model.keras`` is loaded with Keras' ``safe_mode`` on, always: a ``.keras`` file is a
    zip of a JSON config and HDF5 weights, and safe mode refuses the one part that would be
    code (a ``Lambda`` layer's Python bytecode) and lookup tables read from other files.
    Whatever Keras refuses or cannot read, or a model other than the head the task needs
    (with as many labels as the task has), is one line.
    """
    path = Path(output_dir) / MODEL_FILE
    if not path.is_file():
        raise UserError(f"{path}: no fine-tuned model; run `python -m nlp_tutorials.bert "
                        f"finetune` first")
    if not zipfile.is_zipfile(path):  # Keras would call it "File not found"
        raise UserError(f"{path}: damaged or not a .keras file (not a whole zip archive); "
                        f"fine-tune again, or copy the file back whole")
    task = load_task(output_dir, **options)
    import nlp_tutorials.models.bert  # noqa: F401  (registers BERT and GPT with Keras for loading)

    try:
        head = keras.models.load_model(path, compile=False, safe_mode=True)
    except Exception as err:  # Keras reports a foreign or damaged file in many exception types
        # The first sentence says what; the rest is Keras' advice, safe_mode=False among it.
        reason = " ".join(str(err).split()).split(". ")[0][:200]
        raise UserError(f"{path}: not a model `finetune` wrote ({type(err).__name__}: "
                        f"{reason})") from None
    wanted = task.shape.head_class()
    if not isinstance(head, wanted):
        raise UserError(f"{path}: holds a {type(head).__name__}; expected the "
                        f"{wanted.__name__} `python -m nlp_tutorials.bert finetune` writes for "
                        f"{task.title}")
    if getattr(head, "num_labels", task.num_labels) != task.num_labels:
        raise UserError(f"{path}: the head has {head.num_labels} label(s); {task.title} has "
                        f"{task.num_labels} ({', '.join(task.labels)})")
    # Encoded as fine-tuning encoded, and never longer than the model's positions (a model
    # saved before task.json kept a length has the task's default).
    task.max_len = min(task.max_len, head.backbone.config.max_position_embeddings)
    return Finetuned(head, load_tokenizer(output_dir), task)


def predict(head, tokenizer, task: Task, lines, source: str, printer=print,
            chunk: int = 64) -> int:
    """Print one line per example read from ``lines`` (the task parses them and writes the
    prediction: for MRPC ``label<TAB>P(paraphrase)<TAB>s1<TAB>s2``); returns the examples
    predicted.

    Examples are predicted in chunks as they are read, so an error on a late line comes after
    every earlier example's answer has been printed.
    """
    pending, done = [], 0

    def flush():
        nonlocal done
        if pending:
            arrays = task.encode(tokenizer, pending, task.max_len)
            predictions = task.predictions(head_outputs(head, arrays), arrays, pending)
            for example, prediction in zip(pending, predictions):
                printer(task.format_prediction(example, prediction))
            done += len(pending)
            pending.clear()

    try:
        for example in task.parse_lines(lines, source):
            pending.append(example)
            if len(pending) == chunk:
                flush()
    finally:
        flush()
    return done


def evaluate_model(model_dir, split: str, output_dir, data_dir=None, path=None,
                   printer=print) -> dict:
    """Score the fine-tuned model in ``model_dir`` on ``split`` ("dev" or "test") of its task,
    read from ``data_dir`` (None: the task's default folder, MRPC's shipped copy) or from the
    file ``path``; print the scores and write ``metrics_SPLIT.json`` and the task's
    predictions file (``predictions_SPLIT.tsv``, ``.json`` for SQuAD, ``.txt`` for CoNLL) into
    ``output_dir``, each atomically. Returns the scores."""
    options = {"data_dir": data_dir, "dev_size": FinetuneConfig.dev_size, "printer": printer}
    if path:
        options["paths"] = {split: path}
    head, tokenizer, task = load_finetuned(model_dir, **options)
    if task.path(split) is None and not (split == "dev" and task.path("train") is not None):
        raise UserError(f"no {split} file for {task.title}: expected "
                        f"{' or '.join(task.file_names.get(split, ())) or 'its file'} in "
                        f"--data DIR, or --file FILE")
    examples = task.examples(split)
    if not examples:
        raise UserError(f"{task.title} {split}: no examples to score (dev is held out of "
                        f"train only by --dev-size)")
    arrays = task.encode(tokenizer, examples, task.max_len)
    predictions = task.predictions(head_outputs(head, arrays), arrays, examples)
    scores = task.score(examples, predictions)
    printer(f"{task.title} {split}: {task.describe(scores)}")
    suffix, text = task.prediction_file(examples, predictions)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(output_dir / f"metrics_{split}.json", json.dumps(
        {"task": task.name, "split": split, "examples": len(examples), "scores": scores},
        indent=2, default=float) + "\n")
    write_text_atomic(output_dir / f"predictions_{split}{suffix}", text)
    printer(f"metrics_{split}.json and predictions_{split}{suffix} written to {output_dir}")
    return scores
