"""A fine-tuned model's folder: what ``finetune`` writes into it, and how every tool reads it.

Files: ``model.keras`` (head + backbone), ``task.json`` (the task's name and settings, its
label names among them), ``vocab.txt`` + ``tokenizer_config.json``. Each is written through a
temporary file and a rename, and each is checked as it is read back: a damaged or foreign file
is one line, never a traceback.
"""
import json
import zipfile
from pathlib import Path
from typing import NamedTuple

import keras

from nlp_tutorials.models import task_heads
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import require_folder, save_atomic, write_text_atomic
from nlp_tutorials.system.json_files import read_json_object
from nlp_tutorials.system.model_files import MODEL_FILE
from nlp_tutorials.system.values import integer_field, refuse, required, text_field
from nlp_tutorials.tasks import TASKS, get_task
from nlp_tutorials.tasks.base import Task
from nlp_tutorials.text.tokenization import Tokenizer, load_tokenizer

TASK_FILE = "task.json"
SAVED_LABELS = "a non-empty list of distinct label names, as `finetune` writes it"
# The task of a folder without task.json: the releases that saved none fine-tuned only MRPC.
LEGACY_TASK = "mrpc"


class Finetuned(NamedTuple):
    """What :func:`load_finetuned` reads back: the head, its tokenizer and its task (built with
    the label names saved beside the model)."""
    head: task_heads.Head
    tokenizer: Tokenizer
    task: Task


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
    ``task.json`` (before tasks were saved) is MRPC's."""
    path = Path(output_dir) / TASK_FILE
    if not path.is_file():
        return get_task(LEGACY_TASK, **options)
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
    """(head, tokenizer, task) written by ``finetune``; the task's ``max_len`` is fitted
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
    task = task.replace(max_len=min(task.max_len, head.backbone.config.max_position_embeddings))
    return Finetuned(head, load_tokenizer(output_dir), task)


def task_with_data(task, model_dir, data_dir, dev_size: int | None):
    """A copy of ``task``, the task of the model in ``model_dir``, reading its files from
    ``data_dir`` (or its shipped default), with ``dev_size`` held out of train when it has no
    dev file; a UserError when it has no data. ``heads`` and the attention explorer read a
    model's examples through it."""
    if data_dir is not None:
        require_folder(data_dir, "--data", f"the {task.title} files")
    elif task.default_data_dir is None and not task.paths:
        names = ", ".join(name for split in ("train", "dev")
                          for name in task.file_names.get(split, ())[:1])
        raise UserError(f"{model_dir}: a {task.title} model, whose data is not saved with it; "
                        f"expected --data DIR, the folder holding its files ({names})")
    where = {"data_dir": data_dir} if data_dir is not None else {}
    return task.replace(dev_size=dev_size, **where)  # dev_size counts only without a dev file
