"""Downstream tasks: each reads its files into examples, encodes them, names its head and
scores predictions (the seam: :mod:`nlp_tutorials.tasks.base`). The BERT paper's four shapes
(:mod:`~nlp_tutorials.tasks.shapes`):
GLUE's sentence and pair classification (:mod:`~nlp_tutorials.tasks.glue`, MRPC in
:mod:`~nlp_tutorials.tasks.mrpc`, a user's own table in :mod:`~nlp_tutorials.tasks.table`),
CoNLL-2003 tagging (:mod:`~nlp_tutorials.tasks.conll`), SQuAD spans
(:mod:`~nlp_tutorials.tasks.squad`) and multiple choice (:mod:`~nlp_tutorials.tasks.choice`).
The dates task trains the encoder-decoder.

``TASKS`` maps each task's name (``finetune``'s ``task``) to its class: a new task is a module
here and one line in it.
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


def get_task(name: str, **options) -> Task:
    """The task called ``name``, built with ``options`` (``data_dir``, ``dev_size``,
    ``labels``: see :class:`~nlp_tutorials.tasks.base.Task`)."""
    if name not in TASKS:
        raise UserError(f"unknown task {name!r}; expected one of {', '.join(sorted(TASKS))}")
    return TASKS[name](**options)
