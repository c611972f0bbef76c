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
- the arrays an encoding of the shape holds: those its head reads (:attr:`Shape.model_arrays`)
  and those only decoding reads (:attr:`Shape.decoding_arrays`); an array neither names is an
  error (:meth:`Shape.for_model`), never dropped without a word;
- what the upper floors provide for the shape, registered by them on the shape object, since
  this floor sits below them: the module that serves it (``export-model``; the serving module
  calls :meth:`Shape.register_server`) and its baselines (``python -m nlp_tutorials.baseline``;
  :meth:`Shape.register_baseline`). Each floor checks its registrations when it is imported
  (:func:`check_served`, :func:`check_baselines`).

A task names its shape (``shape = SEQUENCE``); a new shape is a subclass of :class:`Shape` in a
module of its own, and its tasks name it. This module is numpy only: TensorFlow comes in with
the head.
"""
from typing import Callable, NamedTuple

import numpy as np

from nlp_tutorials.system.errors import UserError


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
    head_settings: tuple[str, ...] = ()  # fine-tuning settings the head's constructor takes
    labels_sized = False  # the head has one output per label (num_labels)
    text_inputs: tuple[str, ...] = ()  # the raw texts of one example, in encoding order
    # The arrays of an encoding the head reads (its inputs and answers), and those only
    # decoding reads (a window's example, its pieces' words or character offsets).
    model_arrays: tuple[str, ...] = ("input_ids", "token_type_ids")
    decoding_arrays: tuple[str, ...] = ()
    # export-model serves it: a serving module registers itself (register_server), checked
    # when nlp_tutorials.serving is imported.
    served = False
    # Serving can compile the head with XLA when its answer has no step axis: padding to a
    # bucket of lengths then cannot show in it.
    compiles_with_xla = False

    def __init__(self):
        self.server = None  # the serving module's class, once registered
        self._baselines = []  # (name, fit, applies) in the order they are printed

    def __repr__(self) -> str:
        return f"<{self.name} shape>"

    def head_class(self):
        """The class of this shape's head (imported when asked for: it brings TensorFlow)."""
        raise NotImplementedError(f"the {self.name} shape names no head class")

    def register_server(self, module_class: type) -> type:
        """Make ``module_class`` the module ``export-model`` serves this shape's tasks with
        (a decorator: returns the class)."""
        if self.server is not None and self.server.__qualname__ != module_class.__qualname__:
            raise ValueError(f"the {self.name} shape is served by {self.server.__qualname__}; "
                             f"{module_class.__qualname__} cannot serve it too")
        self.server = module_class
        return module_class

    def register_baseline(self, name: str, fit: Callable, applies: Callable = None) -> None:
        """Add the baseline ``name``, fitted by ``fit(task, train)``, to this shape's; with
        ``applies(task)``, only for the tasks it returns True for. Baselines are printed in
        the order they are registered."""
        self._baselines = [entry for entry in self._baselines if entry[0] != name]
        self._baselines.append((name, fit, applies))

    def baselines(self, task) -> list[tuple[str, Callable]]:
        """(name, fit) of each baseline registered for this shape that applies to ``task``."""
        return [(name, fit) for name, fit, applies in self._baselines
                if applies is None or applies(task)]

    def for_model(self, arrays: dict) -> dict:
        """The arrays of an encoding that the head reads (:attr:`model_arrays`); an array the
        shape declares neither there nor in :attr:`decoding_arrays` is a UserError naming it."""
        declared = (*self.model_arrays, *self.decoding_arrays)
        for name in arrays:
            if name not in declared:
                raise UserError(f"array {name!r}: the {self.name} shape declares it neither in "
                                f"model_arrays ({', '.join(self.model_arrays)}) nor in "
                                f"decoding_arrays ({', '.join(self.decoding_arrays) or 'none'})")
        return {name: value for name, value in arrays.items() if name in self.model_arrays}

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
    head_settings = ("pooling",)
    labels_sized = True
    # A sentence pair as MRPC's; a task of single sentences answers ("sentence",) itself.
    text_inputs = ("sentence1", "sentence2")
    model_arrays = ("input_ids", "token_type_ids", "labels")  # labels: a score for a regression
    served = True

    def head_class(self):
        from nlp_tutorials.models.task_heads import SequenceClassifier

        return SequenceClassifier

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
    text_inputs = ("context", "endings")  # each ending read after the context
    model_arrays = ("input_ids", "token_type_ids", "labels")  # [n, choices, max_len], [n]
    decoding_arrays = ("choice_counts",)  # an example's endings, fewer than the row's
    served = True

    def head_class(self):
        from nlp_tutorials.models.task_heads import MultipleChoice

        return MultipleChoice

    def class_name(self, task, label: int) -> str:
        return f"ending {label + 1}"

    def shown_rows(self, arrays: dict, predictions) -> list:
        """An example's row, and the chosen ending in it."""
        return [(index, p.label) for index, p in enumerate(predictions)]


class TokenShape(Shape):
    """One label per word (CoNLL-2003 NER)."""

    name = "token"
    described_as = "a tag per word"
    labels_sized = True
    text_inputs = ("sentence",)
    model_arrays = ("input_ids", "token_type_ids", "tag_ids", "tag_weights")
    decoding_arrays = ("window_example", "word_index", "word_context")
    served = True

    def head_class(self):
        from nlp_tutorials.models.task_heads import TokenClassifier

        return TokenClassifier


class SpanShape(Shape):
    """An answer's first and last token in a passage (SQuAD)."""

    name = "span"
    described_as = "answer spans"
    text_inputs = ("question", "context")
    model_arrays = ("input_ids", "token_type_ids", "start_positions", "end_positions")
    decoding_arrays = ("window_example", "token_word", "token_char_start", "token_char_end",
                       "token_max_context")
    served = True

    def head_class(self):
        from nlp_tutorials.models.task_heads import SpanExtractor

        return SpanExtractor


SEQUENCE, TOKEN, SPAN, CHOICE = SequenceShape(), TokenShape(), SpanShape(), ChoiceShape()
# The package's shapes, by name (in the paper's order); messages list them.
SHAPES = {shape.name: shape for shape in (SEQUENCE, TOKEN, SPAN, CHOICE)}


def check_served(shapes) -> None:
    """Fail loudly, naming it, when one of ``shapes`` says it is served and no serving module
    registered itself for it (run when :mod:`nlp_tutorials.serving` is imported)."""
    unserved = [shape.name for shape in shapes if shape.served and shape.server is None]
    if unserved:
        raise RuntimeError(f"the {unserved[0]} shape is served (served = True) but no serving "
                           f"module registered itself for it (shape.register_server)")


def check_baselines(shapes) -> None:
    """Fail loudly, naming it, when one of ``shapes`` has no baseline registered (run when
    :mod:`nlp_tutorials.analysis.task_baselines` is imported)."""
    bare = [shape.name for shape in shapes if not shape._baselines]
    if bare:
        raise RuntimeError(f"the {bare[0]} shape has no baseline registered "
                           f"(shape.register_baseline)")
