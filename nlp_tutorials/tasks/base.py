"""The task seam: what fine-tuning needs to know about a downstream task, in one class.

The BERT paper (Devlin et al., 2019, section 4) fine-tunes one backbone on four shapes of task,
each with its own head (:mod:`nlp_tutorials.models.heads`):

- ``"sequence"``: one label per sentence or sentence pair (GLUE: MRPC, SST-2, MNLI ...);
  :class:`~nlp_tutorials.models.heads.SequenceClassifier`.
- ``"token"``: one label per word (CoNLL-2003 NER); ``TokenClassifier``.
- ``"span"``: the answer's first and last token in a passage (SQuAD); ``SpanExtractor``.
- ``"choice"``: the right one of several continuations (SWAG); ``MultipleChoice``.

A :class:`Task` does five things, so fine-tuning, prediction, the head study and serving never
name a dataset: it (a) reads its files into examples (:meth:`Task.examples`), (b) encodes
examples into numpy arrays for a tokenizer (:meth:`Task.encode`), (c) builds the head it needs
(:meth:`Task.build_head`), (d) turns the head's outputs into one prediction per example
(:meth:`Task.predictions`) and (e) scores predictions with its metrics (:meth:`Task.score`).
For ``predict`` it also reads examples from user lines (:meth:`Task.parse_lines`) and writes a
prediction back as a line (:meth:`Task.format_prediction`). A new task is one small subclass
and one line in ``nlp_tutorials.tasks.TASKS`` (docs/design.md, "Tasks: one seam, four shapes").

This module is numpy only: TensorFlow is imported when a head is built, not before.
"""
from typing import NamedTuple

import numpy as np

from nlp_tutorials.system.errors import UserError

SHAPES = ("sequence", "token", "span", "choice")

SPLITS = ("train", "dev", "test")

# The head class of each shape, by name in nlp_tutorials.models.heads.
HEAD_CLASSES = {"sequence": "SequenceClassifier", "token": "TokenClassifier",
                "span": "SpanExtractor", "choice": "MultipleChoice"}

# Scores written as percentages ("82.1%"); the others (F1, correlations) are written x100 without
# a sign, as GLUE reports them.
PERCENT_SCORES = {"accuracy"}


class ClassPrediction(NamedTuple):
    """One example's class: ``label`` (an index into the task's labels) and ``probabilities``
    (float32 [labels], or [choices] for a multiple-choice task)."""
    label: int
    probabilities: np.ndarray


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis, in float32 (the largest logit is subtracted first, so a
    large logit cannot overflow ``exp``)."""
    logits = np.asarray(logits, np.float32)
    exp = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return exp / exp.sum(axis=-1, keepdims=True)


def split_train_dev(examples: list, dev_size: int) -> tuple[list, list]:
    """(train, dev): the last ``dev_size`` examples are dev (MRPC's 3,668 / 408 as GLUE splits
    it); with ``dev_size`` 0, every example trains and dev is empty."""
    if not 0 <= dev_size < len(examples):
        raise UserError(f"--dev-size {dev_size}: expected 0 to {len(examples) - 1}")
    return examples[:len(examples) - dev_size], examples[len(examples) - dev_size:]


class Task:
    """A downstream task: its files, its arrays, its head, its predictions and its scores.

    Subclasses set the class attributes and override :meth:`read`, :meth:`encode`,
    :meth:`texts`, :meth:`longest`, :meth:`score` and :meth:`parse_lines`; the sequence and
    choice shapes inherit :meth:`predictions` (arg-max of the softmax) and
    :meth:`format_prediction`, the token and span shapes override them (word alignment,
    n-best span decoding).

    Args:
        data_dir: the folder holding the task's files (None: the task's default).
        dev_size: for a task whose files have no dev split, the last train examples held out
            as dev (0: none).
        labels: label names, when they were saved with a model (default: the class's).
    """

    name = ""  # the key in TASKS, e.g. "mrpc"
    title = ""  # how reports name it, e.g. "MRPC"
    shape = ""  # one of SHAPES
    labels: tuple[str, ...] = ()  # names of the classes or tags, in id order
    files: tuple[str, ...] = ()  # the splits the task's files hold; a missing dev is held out
    # (score key, printed name); the first picks the best epoch on dev and the best seed.
    metrics: tuple[tuple[str, str], ...] = (("accuracy", "accuracy"),)

    def __init__(self, data_dir=None, dev_size: int = 0, labels=None):
        self.data_dir = data_dir
        self.dev_size = dev_size
        if labels is not None:
            self.labels = tuple(labels)

    @property
    def num_labels(self) -> int:
        """The width of the head's output layer: one logit per label."""
        return len(self.labels)

    # (a) Reading.

    def examples(self, split: str) -> list:
        """The examples of ``split`` ("train", "dev" or "test").

        When the files hold no dev split, "dev" is the last ``dev_size`` train examples and
        "train" the others (:func:`split_train_dev`).
        """
        if split not in SPLITS:
            raise UserError(f"unknown {self.title} split {split!r}; expected one of "
                            f"{', '.join(SPLITS)}")
        if split in ("train", "dev") and "dev" not in self.files:
            train, dev = split_train_dev(self.read("train"), self.dev_size)
            return train if split == "train" else dev
        if split not in self.files:
            raise UserError(f"{self.title} has no {split} split; expected one of "
                            f"{', '.join(self.files)}")
        return self.read(split)

    def read(self, split: str) -> list:
        """Every example of one of the task's files (a split in ``files``), in file order."""
        raise NotImplementedError

    def texts(self, examples) -> list[str]:
        """Every text of ``examples`` (a word vocabulary is learnt from train's)."""
        raise NotImplementedError

    def longest(self, tokenizer, examples) -> int:
        """Tokens in the longest encoded example: a maximum length that truncates nothing."""
        raise NotImplementedError

    def augment(self, examples) -> list:
        """Train examples with extra ones made from them (fine-tuning's ``swap_augment``);
        the default adds none."""
        return list(examples)

    # (b) Encoding.

    def encode(self, tokenizer, examples, max_len: int) -> dict:
        """numpy int32 arrays for the head, one row per example (or per window of one).

        Always ``input_ids`` and ``token_type_ids``, [n, max_len] ([n, choices, max_len] for
        the choice shape), padded with ``tokenizer.pad_id``; then what the head's
        ``loss_and_metrics`` reads: ``labels`` [n] (sequence, choice), ``tag_ids`` and
        ``tag_weights`` [n, max_len] (token), ``start_positions`` and ``end_positions`` [n]
        (span).
        """
        raise NotImplementedError

    # Arrays with one value per token: batches are trimmed to their longest row along them.
    per_token_arrays = ("input_ids", "token_type_ids")

    # (c) The head.

    def build_head(self, backbone, **options):
        """The head of this task's shape around ``backbone``; ``options`` go to its
        constructor (``dropout``; ``pooling`` for a sequence classifier)."""
        from nlp_tutorials.models import heads

        head_class = getattr(heads, HEAD_CLASSES[self.shape])
        if self.shape in ("sequence", "token"):
            options["num_labels"] = self.num_labels
        return head_class(backbone, **options)

    # (d) Post-processing.

    def predictions(self, outputs, encoded: dict, examples) -> list:
        """One prediction per example from the head's ``outputs`` (numpy logits, float32:
        [n, labels] for the sequence shape, [n, choices] for choice, [n, step, labels] for
        token, ``{"start_logits", "end_logits"}`` [n, step] for span).

        Sequence and choice: a :class:`ClassPrediction` per example (the arg-max of the
        softmax). Token and span tasks override this: they map word pieces back to words, or
        decode the best answer text over every window of an example.
        """
        if self.shape not in ("sequence", "choice"):
            raise NotImplementedError(f"a {self.shape} task defines its own predictions()")
        probabilities = softmax(outputs)  # [n, labels]
        return [ClassPrediction(int(np.argmax(p)), p) for p in probabilities]

    # (e) Scores.

    def score(self, examples, predictions) -> dict:
        """``{score key: float}`` of ``predictions`` against the examples' answers, with a key
        for each of ``metrics``."""
        raise NotImplementedError

    def describe(self, scores: dict) -> str:
        """Scores as a report writes them: ``accuracy 0.812 F1 0.871``."""
        return " ".join(f"{printed} {scores[key]:.3f}" for key, printed in self.metrics)

    def describe_mean_std(self, summary: dict) -> str:
        """``{score key: (mean, std)}`` as a report writes them: ``accuracy 81.2 ± 0.6%, F1
        87.1 ± 0.4`` (x100, accuracy as a percentage)."""
        return ", ".join(
            f"{printed} {100 * summary[key][0]:.1f} ± {100 * summary[key][1]:.1f}"
            f"{'%' if key in PERCENT_SCORES else ''}" for key, printed in self.metrics)

    # Prediction from text.

    def parse_lines(self, lines, source: str):
        """Examples from lines a user gives ``predict``: yields one example per usable line;
        a malformed line raises UserError naming ``source`` and its line number, after the
        examples before it have been yielded, and lines with no example at all (blank ones, or
        none) raise UserError naming ``source`` once they are all read."""
        raise NotImplementedError

    def format_prediction(self, example, prediction) -> str:
        """One output line: ``label<TAB>probability<TAB>texts...``.

        The label is printed by name. With two labels the probability is the second label's
        (the positive class: P(paraphrase) for MRPC), with more it is the predicted label's.
        """
        if self.shape != "sequence":
            raise NotImplementedError(f"a {self.shape} task defines its own format_prediction()")
        shown = 1 if self.num_labels == 2 else prediction.label
        return "\t".join([self.labels[prediction.label],
                          f"{prediction.probabilities[shown]:.3f}", *self.texts([example])])
