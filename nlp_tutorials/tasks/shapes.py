"""The four shapes of a downstream task in the BERT paper (section 4, figure 4), one object each.

What differs by shape and not by data set is said here once, so that no other module asks a
task which shape it has:

- the head built around the backbone (:mod:`nlp_tutorials.models.task_heads`), and which
  fine-tuning settings it takes (``pooling`` for a sentence classifier);
- the raw texts one example is made of: the string inputs of an exported model;
- for the shapes whose answer is a class (sequence, choice): the predictions (arg-max of the
  softmax), how ``predict`` writes one and how the attention explorer shows one; the token and
  span tasks decode their own (word alignment, n-best spans);
- which encoded row of an example the explorer shows;
- what the upper floors provide for the shape, named as ``"module:attribute"`` and loaded by
  the floor that uses it (:func:`nlp_tutorials.system.references.load_reference`): the module
  that serves it (``export-model``), its baselines (``python -m nlp_tutorials.baseline``).
  Named, not imported: this floor sits below them.

A task names its shape (``shape = SEQUENCE``); a new shape is a subclass of :class:`Shape` in a
module of its own, and its tasks name it. This module is numpy only: TensorFlow comes in with
the head.
"""
from typing import NamedTuple

import numpy as np


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


class Shape:
    """What a shape of task names. Subclasses set the attributes and override what differs."""

    name = ""  # how messages call it
    described_as = ""  # what its tasks answer, in --task's help
    head_name = ""  # the head's class in nlp_tutorials.models.task_heads
    head_settings: tuple[str, ...] = ()  # fine-tuning settings the head's constructor takes
    labels_sized = False  # the head has one output per label (num_labels)
    text_inputs: tuple[str, ...] = ()  # the raw texts of one example, in encoding order
    serving_module = ""  # "module:Class" serving it as a SavedModel; "" for none yet
    # Serving can compile the head with XLA when its answer has no step axis: padding to a
    # bucket of lengths then cannot show in it.
    compiles_with_xla = False
    # (name, "module:fit function") of each baseline (nlp_tutorials.analysis.task_baselines)
    baselines: tuple[tuple[str, str], ...] = ()

    def __repr__(self) -> str:
        return f"<{self.name} shape>"

    def head_class(self):
        """The class of this shape's head (imported here: it brings TensorFlow)."""
        from nlp_tutorials.models import task_heads

        return getattr(task_heads, self.head_name)

    def build_head(self, task, backbone, **options):
        """This shape's head around ``backbone``; ``options`` go to its constructor
        (``dropout``, and the :attr:`head_settings`)."""
        if self.labels_sized:
            options["num_labels"] = task.num_labels
        return self.head_class()(backbone, **options)

    def predictions(self, task, outputs, encoded: dict, examples) -> list:
        """One prediction per example (see :meth:`nlp_tutorials.tasks.base.Task.predictions`);
        a shape whose answer is not a class leaves this to its tasks."""
        raise NotImplementedError(f"a {self.name} task defines its own predictions()")

    def format_prediction(self, task, example, prediction) -> str:
        """``predict``'s line for one example; a shape leaves this to its tasks by default."""
        raise NotImplementedError(f"a {self.name} task defines its own format_prediction()")

    def shown_answer(self, task, example, prediction, row: dict | None) -> dict:
        """What the explorer writes beside an example; by default the task says."""
        raise NotImplementedError(f"a {self.name} task defines its own shown_answer()")

    def shown_rows(self, arrays: dict, predictions) -> list:
        """Where each example's row shown by the explorer is: (row of ``arrays``, choice or
        None) per example: for tasks that cut long inputs into windows (``window_example``
        [rows]: each row's example) an example's first window, else its own row."""
        if "window_example" in arrays:
            _, first = np.unique(arrays["window_example"], return_index=True)
            return [(int(row), None) for row in first]
        return [(index, None) for index in range(len(arrays["input_ids"]))]

    def example_noun(self, task, examples) -> str:
        """What ``examples`` are called in a report."""
        return "examples"


class ClassShape(Shape):
    """A shape whose answer is one class per example: the arg-max of a softmax."""

    compiles_with_xla = True

    def predictions(self, task, outputs, encoded: dict, examples) -> list:
        """A :class:`ClassPrediction` per example from logits [n, classes]."""
        probabilities = softmax(outputs)  # [n, classes]
        return [ClassPrediction(int(np.argmax(p)), p) for p in probabilities]

    def class_name(self, task, label: int) -> str:
        """How the explorer names the class ``label``."""
        raise NotImplementedError

    def shown_answer(self, task, example, prediction, row: dict | None) -> dict:
        """``{"label": name, "probability": p}`` of the predicted class; a regression's
        prediction is its score (a number): ``{"score": s}``."""
        if not isinstance(prediction, ClassPrediction):
            return {"score": float(prediction)}
        return {"label": self.class_name(task, prediction.label),
                "probability": round(float(prediction.probabilities[prediction.label]), 4)}


class SequenceShape(ClassShape):
    """One label per sentence or sentence pair (GLUE: MRPC, SST-2, MNLI ...)."""

    name = "sequence"
    described_as = "a label or score of a sentence or pair"
    head_name = "SequenceClassifier"
    head_settings = ("pooling",)
    labels_sized = True
    # A sentence pair as MRPC's; a task of single sentences answers ("sentence",) itself.
    text_inputs = ("sentence1", "sentence2")
    serving_module = "nlp_tutorials.serving.savedmodel:SequenceModule"
    baselines = (("majority", "nlp_tutorials.analysis.sentence_baselines:fit_majority"),
                 ("bag of words", "nlp_tutorials.analysis.sentence_baselines:fit_bag_of_words"))

    def class_name(self, task, label: int) -> str:
        return task.labels[label]

    def format_prediction(self, task, example, prediction) -> str:
        """``label<TAB>probability<TAB>texts...``, the label by name. With two labels the
        probability is the second label's (the positive class: P(paraphrase) for MRPC), with
        more it is the predicted label's."""
        shown = 1 if task.num_labels == 2 else prediction.label
        return "\t".join([task.labels[prediction.label],
                          f"{prediction.probabilities[shown]:.3f}", *task.texts([example])])

    def example_noun(self, task, examples) -> str:
        return "pairs" if len(task.texts(examples[:1])) == 2 else "sentences"


class ChoiceShape(ClassShape):
    """The right one of several endings (SWAG, CommonsenseQA)."""

    name = "choice"
    described_as = "multiple choice"
    head_name = "MultipleChoice"
    text_inputs = ("context", "endings")  # each ending read after the context
    serving_module = "nlp_tutorials.serving.savedmodel:ChoiceModule"
    baselines = (("majority position",
                  "nlp_tutorials.analysis.task_baselines:fit_majority_position"),
                 ("word overlap", "nlp_tutorials.analysis.task_baselines:fit_word_overlap_choice"))

    def class_name(self, task, label: int) -> str:
        return f"ending {label + 1}"

    def shown_rows(self, arrays: dict, predictions) -> list:
        """An example's row, and the chosen ending in it."""
        return [(index, p.label) for index, p in enumerate(predictions)]


class TokenShape(Shape):
    """One label per word (CoNLL-2003 NER)."""

    name = "token"
    described_as = "a tag per word"
    head_name = "TokenClassifier"
    labels_sized = True
    text_inputs = ("sentence",)
    serving_module = "nlp_tutorials.serving.tagging:TaggingModule"
    baselines = (("most frequent tag",
                  "nlp_tutorials.analysis.task_baselines:fit_most_frequent_tag"),)


class SpanShape(Shape):
    """An answer's first and last token in a passage (SQuAD)."""

    name = "span"
    described_as = "answer spans"
    head_name = "SpanExtractor"
    text_inputs = ("question", "context")
    serving_module = "nlp_tutorials.serving.spans:SpanModule"
    baselines = (("sliding window", "nlp_tutorials.analysis.task_baselines:fit_sliding_window"),)


SEQUENCE, TOKEN, SPAN, CHOICE = SequenceShape(), TokenShape(), SpanShape(), ChoiceShape()
# The package's shapes, by name (in the paper's order); messages list them.
SHAPES = {shape.name: shape for shape in (SEQUENCE, TOKEN, SPAN, CHOICE)}
