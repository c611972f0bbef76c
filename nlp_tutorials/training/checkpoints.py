"""Building a GPT or BERT from its config, and its checkpoints: what they hold, where, how to
read one back, and which one to read when some are damaged.

``train`` writes checkpoints under ``<model_dir>/checkpoints/`` (:data:`CHECKPOINT_DIR`) with a
``tf.train.CheckpointManager``: ``ckpt-N.index`` and ``ckpt-N.data-*`` per checkpoint (N is the
step) and the ``checkpoint`` index file that lists them. :func:`newest_intact_checkpoint` picks
the checkpoint a command reads: the newest whose files all read back in full, each damaged newer
one reported in one line (a copy cut short by a full disk, a file zero-filled or deleted), the
``ckpt-N`` files themselves when the index file is missing or garbled. :func:`restore_model` is
how ``export``, ``generate`` and ``finetune`` read it back; ``train --resume`` uses
:func:`newest_intact_checkpoint` and :func:`restore_checkpoint` directly.
"""
import glob
import logging
import re
import sys
import time
from pathlib import Path

import keras
import tensorflow as tf

from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.model_files import CHECKPOINT_DIR
from nlp_tutorials.text.tokenization import load_tokenizer

INDEX_NAME = "checkpoint"  # the CheckpointManager's list of checkpoints
STEP_KEY = "iterations/.ATTRIBUTES/VARIABLE_VALUE"  # the optimizer's step count, see below
_CHECKPOINT_FILE = re.compile(r"(ckpt-(\d+))\.(index|data-\d{5}-of-(\d{5}))")
# What reading a damaged checkpoint raises: TensorFlow's errors (NotFoundError, DataLossError...),
# IndexError ("Read less bytes than requested": a data file cut short), ValueError.
READ_ERRORS = (tf.errors.OpError, IndexError, ValueError)
_warned = set()


def model_class(model_type: str):
    """The class behind a model type name (imported here so the CLI stays light)."""
    if model_type == "bert":
        from nlp_tutorials.models.bert import BERT
        return BERT
    if model_type == "gpt":
        from nlp_tutorials.models.gpt import GPT
        return GPT
    raise UserError(f"model type {model_type!r}: expected 'bert' or 'gpt'")


def build_model(model_config: ModelConfig, seed: int):
    """A freshly initialised model of ``model_config``, its weights drawn from ``seed``."""
    keras.utils.set_random_seed(seed)
    return model_class(model_config.model_type)(model_config)


def training_checkpoint(model, optimizer=None) -> tf.train.Checkpoint:
    """What a checkpoint holds: the model's weights by name, and the optimizer's state.

    Weights are keyed by their Keras path without the model's own name (Keras numbers a second
    model in one process "bert_1"; layers first called outside the model have no prefix), so
    any model of the same config restores them. The
    optimizer's slots follow the order of ``model.trainable_variables``, which is fixed by the
    config; ``iterations`` is the step count a resumed run continues from.
    """
    weights = {variable.path.removeprefix(f"{model.name}/"): variable
               for variable in model.weights}
    if len(weights) != len(model.weights):
        raise ValueError("two of the model's weights share a path")
    if optimizer is None:
        return tf.train.Checkpoint(model=weights)
    return tf.train.Checkpoint(model=weights, optimizer=list(optimizer.variables),
                               iterations=optimizer.iterations)


def restore_model(model_dir, model_name: str = "bert", report=None):
    """Load the model saved by ``train`` in ``model_dir`` (newest intact checkpoint), for
    inference.

    Returns (model, tokenizer). ``model_name`` only words the error when nothing is there;
    ``report`` (default :func:`warn`) gets one line per damaged checkpoint passed over.
    """
    model_dir = Path(model_dir)
    if not latest_checkpoint(model_dir):
        raise UserError(f"{model_dir}: no trained model; run `python -m nlp_tutorials."
                        f"{model_name} train --model-dir {model_dir}` first")
    prefix, _ = newest_intact_checkpoint(model_dir, report)
    model_config = ModelConfig.load(model_dir)
    model = model_class(model_config.model_type)(model_config)
    restore_checkpoint(training_checkpoint(model), prefix, partial=True)
    return model, load_tokenizer(model_dir)


def restore_checkpoint(checkpoint: tf.train.Checkpoint, prefix: str, partial: bool = False):
    """Restore ``prefix`` into ``checkpoint``, every object accounted for.

    Without ``partial`` every value in the files must find its variable too (``--resume``: the
    optimizer's state included); with it, the optimizer's values may stay unread (inference).
    A checkpoint that does not fit the model (another config.json) is a one-line UserError.
    """
    try:
        status = checkpoint.restore(prefix)
        if partial:
            status.expect_partial().assert_existing_objects_matched()
        else:
            status.assert_consumed()
    except (*READ_ERRORS, AssertionError) as error:
        raise UserError(f"{prefix}: does not fit the model in config.json "
                        f"({first_line(error)})") from None


def warn(line: str) -> None:
    """Print ``line`` on standard error, once per process (fine-tuning restores once per seed)."""
    if line not in _warned:
        _warned.add(line)
        print(line, file=sys.stderr)


def latest_checkpoint(model_dir) -> str | None:
    """The newest checkpoint's path prefix in ``model_dir``, or None when there is none.

    Its files are not read: it may be damaged (see :func:`newest_intact_checkpoint`).
    """
    names = checkpoint_names(Path(model_dir) / CHECKPOINT_DIR)
    return str(Path(model_dir) / CHECKPOINT_DIR / names[0]) if names else None


def holds_checkpoint(model_dir) -> bool:
    """Whether ``model_dir`` holds any checkpoint file, intact or not, or an index file."""
    directory = Path(model_dir) / CHECKPOINT_DIR
    return bool(checkpoint_names(directory)) or (directory / INDEX_NAME).exists()


def newest_intact_checkpoint(model_dir, report=None) -> tuple:
    """(path prefix, step) of the newest checkpoint in ``model_dir`` whose files read in full.

    Candidates come newest first (:func:`checkpoint_names`). Each damaged one passed over is
    reported to ``report`` (default :func:`warn`) in one line, as is an index file that is
    missing or garbled; the step is the optimizer's saved step count. When none is intact, or
    there is none, a one-line UserError names each checkpoint and what is wrong with it.
    """
    report = report or warn
    directory = Path(model_dir) / CHECKPOINT_DIR
    index_problem = read_index(directory)[1]
    names = checkpoint_names(directory)
    damaged = {}
    for name in names:
        problem = checkpoint_problem(directory / name)
        if problem is None:
            step = checkpoint_step(directory / name)
            if index_problem:
                report(f"{directory / INDEX_NAME} {index_problem}; looking for the newest "
                       f"intact checkpoint by file name ({', '.join(names)})")
            for bad, what in damaged.items():
                report(f"checkpoint {directory / bad} is damaged: {what}; using {name} "
                       f"(step {step}), the newest intact one, instead")
            return str(directory / name), step
        damaged[name] = problem
    if not damaged:
        raise UserError(f"{directory}: no checkpoint")
    details = "; ".join(f"{name}: {what}" for name, what in damaged.items())
    index = f"{INDEX_NAME} {index_problem}; " if index_problem else ""
    raise UserError(f"{directory}: no intact checkpoint ({index}{details}); copy the "
                    f"checkpoint files back whole, or train again")


def rewrite_index(model_dir, prefix) -> None:
    """When the index file of ``model_dir``'s checkpoints is missing or garbled, write a new
    one (atomically) whose newest checkpoint is ``prefix``, the older ones found by file name
    before it.

    ``tf.train.CheckpointManager`` reads that file when it starts (a garbled one can stop it);
    ``--resume`` calls this first, so the manager goes on from ``prefix`` and keeps deleting
    the oldest. The file is CheckpointState's text format; the timestamps, the files' times,
    are what the manager orders deletions by. A readable index file is left as it is.
    """
    directory = Path(model_dir) / CHECKPOINT_DIR
    if read_index(directory)[1] is None:
        return
    names = checkpoint_names(directory)
    older = names[names.index(Path(prefix).name):][::-1]
    times = [max((path.stat().st_mtime for path in directory.glob(f"{name}.*")),
                 default=time.time()) for name in older]
    lines = [f'model_checkpoint_path: "{older[-1]}"']
    lines += [f'all_model_checkpoint_paths: "{name}"' for name in older]
    lines += [f"all_model_checkpoint_timestamps: {stamp!r}" for stamp in times]
    lines.append(f"last_preserved_timestamp: {min(times) - 1.0!r}")
    write_text_atomic(directory / INDEX_NAME, "\n".join(lines) + "\n")


def checkpoint_names(directory) -> list:
    """The checkpoints in ``directory`` (``ckpt-N``), newest (highest N) first.

    Those the index file lists and any other whose files are there (a run killed between
    writing ``ckpt-N`` and listing it leaves one), all of them when the index file is missing
    or garbled. A listed checkpoint whose files are gone stays a candidate, so it is reported
    as damaged.
    """
    directory = Path(directory)
    names = set(read_index(directory)[0])
    for path in directory.glob("ckpt-*"):
        match = _CHECKPOINT_FILE.fullmatch(path.name)
        if match:
            names.add(match[1])

    def step(name):
        number = re.fullmatch(r"ckpt-(\d+)", name)
        return int(number[1]) if number else -1

    return sorted(names, key=step, reverse=True)


def read_index(directory) -> tuple:
    """(checkpoint names the index file lists, oldest first; what is wrong with it, or None).

    The names are file names only: the index of a run whose folder was moved still applies.
    """
    path = Path(directory) / INDEX_NAME
    if not path.exists():
        return [], "is missing"
    tf_logger = tf.get_logger()
    level = tf_logger.level
    tf_logger.setLevel(logging.ERROR)  # a garbled file is reported here, in one line
    try:
        state = tf.train.get_checkpoint_state(str(directory))
    except (*READ_ERRORS, OSError) as error:
        return [], f"is not a readable checkpoint list ({first_line(error)})"
    finally:
        tf_logger.setLevel(level)
    if state is None:
        return [], "is not a readable checkpoint list"
    names = [Path(p).name for p in state.all_model_checkpoint_paths]
    newest = Path(state.model_checkpoint_path).name
    return [n for n in names if n != newest] + [newest], None


def checkpoint_problem(prefix) -> str | None:
    """What is wrong with the checkpoint at path ``prefix``, naming its files; None when its
    index and every tensor in its data files read back in full (checksums included)."""
    prefix = Path(prefix)
    index = prefix.with_name(f"{prefix.name}.index")
    data = sorted(prefix.parent.glob(f"{glob.escape(prefix.name)}.data-*-of-*"))
    missing = missing_files(prefix, index, data)
    if missing:
        return missing
    empty = [path.name for path in (index, *data) if path.stat().st_size == 0]
    if empty:
        return f"{' and '.join(empty)} {'is' if len(empty) == 1 else 'are'} empty"
    try:
        reader = tf.train.load_checkpoint(str(prefix))
    except READ_ERRORS as error:
        return f"{index.name} {what_went_wrong(error)}"
    try:
        for key in reader.get_variable_to_shape_map():
            reader.get_tensor(key)
    except READ_ERRORS as error:
        files = data[0].name if len(data) == 1 else f"one of {prefix.name}.data-*"
        return f"{files} {what_went_wrong(error)}"
    return None


def missing_files(prefix: Path, index: Path, data: list) -> str | None:
    """Which of the checkpoint's files are missing, in words; None when none is."""
    shards = {int(m[4]) for m in map(_CHECKPOINT_FILE.fullmatch, (p.name for p in data)) if m}
    expected = [f"{prefix.name}.data-{i:05d}-of-{n:05d}" for n in shards for i in range(n)]
    gone = [] if index.exists() else [index.name]
    gone += [name for name in expected if not (prefix.parent / name).exists()]
    if not data:
        gone.append(f"{prefix.name}.data-*")
    if not gone:
        return None
    return f"{' and '.join(gone)} {'is' if len(gone) == 1 else 'are'} missing"


def what_went_wrong(error: Exception) -> str:
    """A file's problem in words, from what TensorFlow raised reading it."""
    text = first_line(error)
    if isinstance(error, IndexError) or "less bytes" in text:
        return f"is cut short ({text})"
    if "hecksum" in text:
        return "does not match its checksum (overwritten or corrupted)"
    if "sstable" in text:
        return f"is garbled or cut short ({text})"
    return f"cannot be read ({text})"


def checkpoint_step(prefix) -> int:
    """The step a checkpoint was saved at: the optimizer's count, else the N of ``ckpt-N``."""
    reader = tf.train.load_checkpoint(str(prefix))
    if reader.has_tensor(STEP_KEY):
        return int(reader.get_tensor(STEP_KEY))
    return int(Path(prefix).name.rpartition("-")[2])
