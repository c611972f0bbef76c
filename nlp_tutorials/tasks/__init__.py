"""Downstream tasks: each reads its files into examples, encodes them, names its head and
scores predictions (the seam: :mod:`nlp_tutorials.tasks.base`). The BERT paper's four shapes
(:mod:`~nlp_tutorials.tasks.shapes`):
GLUE's sentence and pair classification (:mod:`~nlp_tutorials.tasks.glue`, MRPC in
:mod:`~nlp_tutorials.tasks.mrpc`, a user's own table in :mod:`~nlp_tutorials.tasks.table`),
CoNLL-2003 tagging (:mod:`~nlp_tutorials.tasks.conll`), SQuAD spans
(:mod:`~nlp_tutorials.tasks.squad`) and multiple choice (:mod:`~nlp_tutorials.tasks.choice`).
The dates task trains the encoder-decoder.

``TASKS`` maps each task's name (``finetune``'s ``--task``) to its class: a new task is one
:class:`~nlp_tutorials.tasks.base.Task` subclass and one entry here, or
:func:`register_task` at run time. The commands read their choices and help from it.
"""
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.base import Task
from nlp_tutorials.tasks.choice import CommonsenseQaTask, SwagTask
from nlp_tutorials.tasks.conll import ConllTask
from nlp_tutorials.tasks.glue import (
    ColaTask,
    MnliTask,
    QnliTask,
    QqpTask,
    RteTask,
    Sst2Task,
    StsbTask,
    WnliTask,
)
from nlp_tutorials.tasks.mrpc import MrpcTask
from nlp_tutorials.tasks.squad import Squad2Task, SquadTask
from nlp_tutorials.tasks.table import CustomTask

TASKS = {"cola": ColaTask, "sst2": Sst2Task, "mrpc": MrpcTask, "stsb": StsbTask, "qqp": QqpTask,
         "mnli": MnliTask, "qnli": QnliTask, "rte": RteTask, "wnli": WnliTask,
         "conll2003": ConllTask,
         "squad": SquadTask, "squad2": Squad2Task,
         "swag": SwagTask, "commonsenseqa": CommonsenseQaTask,
         "custom": CustomTask}


def register_task(name: str, task_class: type) -> None:
    """Make ``task_class`` (a :class:`Task` subclass whose ``name`` is ``name``) known to every
    command as ``--task name``, as an entry in :data:`TASKS` would."""
    if not (isinstance(task_class, type) and issubclass(task_class, Task)):
        raise TypeError(f"register_task({name!r}, ...): expected a Task subclass, got "
                        f"{task_class!r}")
    if task_class.name != name:
        raise ValueError(f"register_task({name!r}, ...): the class is named "
                         f"{task_class.name!r}; a saved model finds its task by that name")
    if TASKS.get(name, task_class) is not task_class:
        raise ValueError(f"register_task({name!r}, ...): {name} is {TASKS[name].__name__}")
    TASKS[name] = task_class


def named_tasks() -> tuple:
    """The names ``--task`` accepts: every task in :data:`TASKS`, registered ones included, but
    a user's own table, which ``finetune``'s ``--text-columns`` chooses."""
    return tuple(name for name in TASKS if name != CustomTask.name)


def task_flag_help() -> str:
    """``--task``'s help: the names grouped by shape, "the task: cola, mrpc (a label or score
    of a sentence or pair); conll2003 (a tag per word); ..."."""
    groups = {}
    for name in named_tasks():
        groups.setdefault(TASKS[name].shape, []).append(name)
    return "the task: " + "; ".join(f"{', '.join(group)} ({shape.described_as or shape.name})"
                                    for shape, group in groups.items())


def get_task(name: str, **options) -> Task:
    """The task called ``name``, built with ``options`` (``data_dir``, ``dev_size``,
    ``labels``: see :class:`~nlp_tutorials.tasks.base.Task`)."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; expected one of {', '.join(sorted(TASKS))}")
    return TASKS[name](**options)
