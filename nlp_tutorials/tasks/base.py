"""The task seam: what fine-tuning needs to know about a downstream task, in one class.

The BERT paper (Devlin et al., 2019, section 4) fine-tunes one backbone on four shapes of task
(:mod:`nlp_tutorials.tasks.shapes`): a label per sentence or pair (sequence), per word (token),
an answer span in a passage (span), or one of several endings (choice). A task names its shape,
and the shape its head.

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
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.frozen import Frozen
from nlp_tutorials.tasks.shapes import Shape

SPLITS = ("train", "dev", "test")

# Scores written as percentages ("82.1%"); the others (F1, correlations) are written x100 without
# a sign, as GLUE reports them.
PERCENT_SCORES = {"accuracy"}


def reported(key: str, value: float, std: float | None = None) -> str:
    """The score ``key`` as reports print it, x100: ``79.9``, ``81.2 ± 0.6`` with ``std``, and
    a ``%`` after an accuracy (``66.5%``)."""
    spread = "" if std is None else f" ± {100 * std:.1f}"
    return f"{100 * value:.1f}{spread}{'%' if key in PERCENT_SCORES else ''}"


def counted(number: int, noun: str) -> str:
    """``1 article``, ``2,067 paragraphs``: a count and its noun, plural unless one."""
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def example_lines(lines, source: str, found_none: str, skip=None):
    """(line number from 1, the line without its ending) of each line a user gives ``predict``
    that holds something (blank lines, and lines ``skip`` returns True for, are passed over).
    Once every line is read and none was given, a UserError ``"{source}: {found_none}"``.

    Every task's :meth:`Task.parse_lines` reads its lines through this, so a malformed line
    is reported after the examples before it, and an input with none is one line."""
    given = 0
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if not line.strip() or (skip is not None and skip(line)):
            continue
        given += 1
        yield number, line
    if not given:
        raise UserError(f"{source}: {found_none}")


# What the commands hold out as dev of a task whose files have no dev split (--dev-size's
# default): a tenth of the train examples, at most 408: MRPC's 408 of 4,076, as GLUE holds out.
HELD_OUT_DEV = 408
HELD_OUT_SHARE = 0.1
DEV_SIZE_HELP = f"a tenth of train, at most {HELD_OUT_DEV} (GLUE's MRPC dev)"  # --dev-size's
DEFAULT_STRIDE = 128  # tokens between the starts of two windows of one input (--stride)


def default_dev_size(train_examples: int) -> int:
    """The dev examples held out of ``train_examples`` when --dev-size is not given: a tenth,
    rounded, at most :data:`HELD_OUT_DEV` (0 for fewer than 5: every example trains)."""
    return min(HELD_OUT_DEV, round(HELD_OUT_SHARE * train_examples))


def split_train_dev(examples: list, dev_size: int, source: str = "train") -> tuple[list, list]:
    """(train, dev): the last ``dev_size`` examples are dev (MRPC's 3,668 / 408 as GLUE splits
    it); with ``dev_size`` 0, every example trains and dev is empty. ``source`` names the
    examples' file in a refusal."""
    if not 0 <= dev_size < len(examples):
        held = counted(len(examples), "example")
        raise UserError(f"--dev-size {dev_size}: {source} holds {held}; expected 0 to "
                        f"{len(examples) - 1}")
    return examples[:len(examples) - dev_size], examples[len(examples) - dev_size:]


# Constructor arguments that say where a task's files are: a copy changing one reads its own.
FILE_ARGUMENTS = ("data_dir", "paths")


class Task(Frozen):
    """A downstream task: its files, its arrays, its head, its predictions and its scores.

    Subclasses set the class attributes and override :meth:`read_file`, :meth:`summarize`,
    :meth:`encode`, :meth:`texts`, :meth:`longest`, :meth:`score` and :meth:`parse_lines`;
    :meth:`build_head`, :meth:`predictions`, :meth:`format_prediction`, :meth:`shown_answer`
    and :meth:`text_inputs` are the shape's (:mod:`~nlp_tutorials.tasks.shapes`), and the
    token and span tasks override the predictions and their writing (word alignment, n-best
    span decoding).

    Where the files are: ``paths`` (``--train``/``--dev``/``--test``) name a split's file
    outright; otherwise the split's first name in ``file_names`` found in ``data_dir``.

    A task never changes once built (:mod:`~nlp_tutorials.tasks.frozen`; :meth:`replace`
    copies it changed); it only keeps what its files hold as it reads them.

    Args:
        data_dir: the folder holding the task's files (None: the task's default, if any).
        dev_size: for a task whose files have no dev split, the last train examples held out
            as dev (0: none; None: :func:`default_dev_size`, what the commands hold out
            without ``--dev-size``).
        labels: label names, when they were saved with a model (default: the class's, or for
            a task that learns them, those of its train file).
        paths: ``{split: file}`` given outright, overriding ``data_dir``.
        max_len: tokens per encoded example (None: ``default_max_len``), kept with a model so
            ``predict`` and ``evaluate`` encode as fine-tuning did.
        stride: for tasks that cut long inputs into windows (token tagging, spans), the
            tokens between the starts of two windows of one input.
        printer: where reading reports what it found (None: nowhere).
        examples_given: ``{split: examples}`` given outright instead of files (what a recipe
            search's trials read); a split not given is empty.
    """

    name = ""  # the key in TASKS, e.g. "mrpc"
    title = ""  # how reports name it, e.g. "MRPC"
    shape: Shape = Shape()  # what differs by shape (nlp_tutorials.tasks.shapes)
    # labels = (names of the classes or tags, in id order); a class declaring none learns them
    # {split: file names tried in data_dir, first found wins}; a missing dev is held out
    file_names: dict = {}
    default_data_dir = None  # the folder used without --data (MRPC's shipped copy), or None
    default_max_len = 128  # tokens per encoded example (BERT's recipes; SQuAD 384)
    # finetune's defaults: BERT's GLUE recipe (Devlin et al., 2019, section 4.1 and A.3)
    recipe = {"epochs": 3, "batch_size": 32, "learning_rate": 5e-5}
    # (score key, printed name); the first picks the best epoch on dev and the best seed.
    metrics: tuple[tuple[str, str], ...] = (("accuracy", "accuracy"),)
    # The baseline may split the dev file by article into train and scored (SQuAD, whose
    # train file is large): --train-articles.
    splits_by_article = False
    # A token task that encodes as CoNLL-2003 does: each word cut into pieces on its own, its
    # tag on its first piece, a long sentence in windows window_step(max_len) pieces apart.
    # export-model's tagging graph (nlp_tutorials.serving.tagging) serves such a task.
    tags_first_pieces = False

    def __init__(self, data_dir=None, dev_size: int | None = 0, labels=None, paths=None,
                 max_len: int | None = None, stride: int = DEFAULT_STRIDE, printer=None,
                 examples_given: dict | None = None):
        self._read = {}  # split -> examples, each file read once
        self._learnt = {}  # from train: "labels" (when learnt), "dev_size" (when defaulted)
        self.data_dir = data_dir
        self.dev_size = dev_size
        if labels is not None:
            self.labels = tuple(labels)
        self.paths = {split: path for split, path in (paths or {}).items() if path}
        self.max_len = max_len or self.default_max_len
        self.stride = stride
        self.printer = printer
        self.examples_given = examples_given

    def __init_subclass__(cls, **options):
        super().__init_subclass__(**options)
        if cls.__dict__.get("labels") == ():  # declares none: learns them, as the base does
            cls.labels = Task.labels

    @property
    def labels(self) -> tuple[str, ...]:
        """For a class declaring no labels: those given (saved with a model), else train's
        once :meth:`examples` has read it (() before)."""
        return self.__dict__.get("_labels") or self._learnt.get("labels", ())

    @labels.setter
    def labels(self, names) -> None:
        self._labels = tuple(names)

    def replace(self, **changes) -> "Task":
        """A copy built with ``changes`` to the constructor's arguments (``max_len=64``),
        keeping what this task has read unless they move its files (:data:`FILE_ARGUMENTS`)."""
        task = super().replace(**changes)
        if not changes.keys() & set(FILE_ARGUMENTS):
            task._read.update(self._read)
            task._learnt.update(self._learnt)
        return task

    @property
    def num_labels(self) -> int:
        """The width of the head's output layer: one logit per label."""
        return len(self.labels)

    def settings(self) -> dict:
        """What ``task.json`` keeps beside a fine-tuned model so that ``get_task(name,
        **settings)`` rebuilds this task for ``predict`` and ``evaluate``: the label names,
        the encoding's length and stride, and in subclasses what else reading or decoding needs (columns, a tuned threshold)."""
        return {"labels": list(self.labels), "max_len": self.max_len, "stride": self.stride}

    def tuned(self, dev_scores: dict) -> "Task":
        """This task keeping what the best epoch's dev scores chose, for ``settings`` to save
        (SQuAD v2.0: a copy with the no-answer threshold); by default this task unchanged."""
        return self

    def selection_score(self, dev_scores: dict) -> float:
        """The dev score that chooses the epoch and the seed to keep: the task's first metric."""
        return dev_scores[self.metrics[0][0]]

    # (a) Reading.

    def path(self, split: str):
        """The file holding ``split``: given outright, or found in the data folder; None
        when there is none."""
        if split in self.paths:
            return Path(self.paths[split])
        folder = self.data_dir if self.data_dir is not None else self.default_data_dir
        if folder is None:
            return None
        for name in self.file_names.get(split, ()):
            if (Path(folder) / name).is_file():
                return Path(folder) / name
        return None

    def missing(self, split: str) -> UserError:
        """The error for a split whose file is needed but not there."""
        folder = self.data_dir if self.data_dir is not None else self.default_data_dir
        names = " or ".join(self.file_names.get(split, ())) or "a file"
        if folder is not None and not Path(folder).is_dir():
            return UserError(f"{folder}: {self.title} data folder not found; expected {names} "
                             f"in it")
        where = f"{folder}: no {split} file" if folder is not None else f"no {split} file given"
        return UserError(f"{where} for {self.title}; expected {names} in --data DIR, or "
                         f"--{split} FILE")

    def examples(self, split: str) -> list:
        """The examples of ``split`` ("train", "dev" or "test").

        When there is no dev file, "dev" is the last ``dev_size`` train examples and "train"
        the others (:func:`split_train_dev`; ``dev_size`` None: :func:`default_dev_size`'s,
        said in one line when under :data:`HELD_OUT_DEV`). A split with no file is empty,
        except train, which every task needs. Labels a task learns are learnt from train first.
        With ``examples_given``, its examples of ``split``, as they are.
        """
        if split not in SPLITS:
            raise UserError(f"unknown {self.title} split {split!r}; expected one of "
                            f"{', '.join(SPLITS)}")
        if self.examples_given is not None:
            return self.examples_given.get(split, [])
        if not self.labels:
            self._learnt["labels"] = tuple(self.learn_labels(self.read("train")))
        if split in ("train", "dev") and self.path("dev") is None:
            train, dev = split_train_dev(self.read("train"), self.held_out(),
                                         self.train_name())
            return train if split == "train" else dev
        if split != "train" and self.path(split) is None:
            return []
        return self.read(split)

    def train_name(self) -> str:
        """The train file's name, for a message; "train" for examples given without a file."""
        path = self.path("train")
        return path.name if path is not None else "train"

    def held_out(self) -> int:
        """The train examples held out as dev when there is no dev file: ``dev_size``, or
        when it is None :meth:`held_out_by_default`'s (worked out, and said, once)."""
        if self.dev_size is not None:
            return self.dev_size
        if "dev_size" not in self._learnt:
            self._learnt["dev_size"] = self.held_out_by_default()
        return self._learnt["dev_size"]

    def held_out_by_default(self) -> int:
        """:func:`default_dev_size` of the train file; under :data:`HELD_OUT_DEV`, one line
        saying so to ``printer``."""
        train = self.read("train")
        size = default_dev_size(len(train))
        if size < HELD_OUT_DEV and self.printer is not None:
            held = (f"the last {size:,} (a tenth) held out as dev" if size
                    else "too few to hold out a tenth as dev: none is")
            self.printer(f"{self.train_name()}: {counted(len(train), 'example')}, fewer "
                         f"than {10 * HELD_OUT_DEV:,}; {held}")
        return size

    def read_splits(self) -> None:
        """Read every split there is, so that a missing or broken file, or a dev label train
        never saw, stops a run before it starts."""
        for split in SPLITS:
            self.examples(split)

    def read(self, split: str) -> list:
        """Every example in the file of ``split``, in file order; read once, reported once
        (``eng.train: 14,041 sentences, ...``). No file, or one with no examples, is a
        UserError naming it."""
        if split not in self._read:
            path = self.path(split)
            if path is None:
                raise self.missing(split)
            if not path.is_file():
                raise UserError(f"{path}: no such file; expected the {self.title} {split} file")
            examples = self.read_file(path)
            if not examples:
                raise UserError(f"{path}: holds no {self.title} examples")
            if self.printer is not None:
                self.printer(f"{path.name}: {self.summarize(examples)}")
            self._read[split] = examples
        return self._read[split]

    def read_file(self, path: Path) -> list:
        """Every example of one of the task's files, in file order. A line that breaks the
        format, or a label outside ``self.labels`` (when it is set), is a UserError naming
        ``path`` and the line."""
        raise NotImplementedError

    def learn_labels(self, train) -> list[str]:
        """For a task with no fixed ``labels``: the label names of its train examples, in a
        fixed order (sorted)."""
        raise UserError(f"{self.title} has no labels")

    def summarize(self, examples) -> str:
        """What reading found, after the file's name: ``8,551 sentences (0: 2,528, 1:
        6,023)``."""
        return f"{len(examples):,} examples"

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
        (span). Tasks that cut an input into windows (``self.stride`` tokens apart) return a
        row per window, and may add arrays only decoding reads (the window's example, its
        pieces' words or character offsets). Each array is one the shape declares, in its
        ``model_arrays`` or its ``decoding_arrays``: ``shape.for_model`` refuses any other.
        """
        raise NotImplementedError

    # (c) The head.

    def build_head(self, backbone, **options):
        """The head of this task's shape around ``backbone``; ``options`` go to its
        constructor (``dropout``; the shape's ``head_settings``, e.g. ``pooling``)."""
        return self.shape.build_head(self, backbone, **options)

    # (d) Post-processing.

    def predictions(self, outputs, encoded: dict, examples) -> list:
        """One prediction per example from the head's ``outputs`` (numpy logits, float32:
        [n, labels] for the sequence shape, [n, choices] for choice, [n, step, labels] for
        token, ``{"start_logits", "end_logits"}`` [n, step] for span).

        Sequence and choice: a :class:`ClassPrediction` per example (the arg-max of the
        softmax). Token and span tasks override this: they map word pieces back to words, or
        decode the best answer text over every window of an example.
        """
        return self.shape.predictions(self, outputs, encoded, examples)

    # (e) Scores.

    def score(self, examples, predictions) -> dict:
        """``{score key: float}`` of ``predictions`` against the examples' answers, with a key
        for each of ``metrics``."""
        raise NotImplementedError

    def describe(self, scores: dict) -> str:
        """Scores as every report writes them, on the scale of :meth:`describe_mean_std` and
        docs' tables: ``accuracy 81.2% F1 87.1`` (x100, accuracy as a percentage)."""
        return " ".join(f"{printed} {reported(key, scores[key])}" for key, printed in self.metrics)

    def describe_mean_std(self, summary: dict, seeds: int) -> str:
        """``{score key: (mean, std)}`` over ``seeds`` runs as a report writes them: ``accuracy
        81.2 ± 0.6%, F1 87.1 ± 0.4`` (x100, accuracy as a percentage); one run has no spread
        to show (``accuracy 81.2%, F1 87.1``)."""
        return ", ".join(f"{printed} {reported(key, mean, std if seeds > 1 else None)}"
                         for key, printed in self.metrics for mean, std in [summary[key]])

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
        return self.shape.format_prediction(self, example, prediction)

    def prediction_file(self, examples, predictions) -> tuple[str, str]:
        """(file suffix, text) of ``evaluate``'s predictions file: here ``.tsv``, a header
        line, then ``index<TAB>label`` a line (the example's ``id`` where it has one, else its
        index from 0). The token and span tasks write their official formats instead."""
        lines = ["index\tprediction"]
        for index, (example, prediction) in enumerate(zip(examples, predictions)):
            lines.append(f"{getattr(example, 'id', index)}\t{self.labels[prediction.label]}")
        return ".tsv", "\n".join(lines) + "\n"

    # What the tools show and serve.

    def text_inputs(self) -> tuple[str, ...]:
        """The raw texts one example is made of, named, in encoding order: the string inputs of
        the model ``export-model`` writes (:mod:`nlp_tutorials.serving.savedmodel`).

        By shape: sequence ``("sentence1", "sentence2")``, a sentence pair as MRPC's (a task
        of single sentences returns ``("sentence",)``); choice ``("context", "endings")``,
        each ending read after the context; token ``("sentence",)``; span ``("question",
        "context")``.
        """
        return self.shape.text_inputs

    def shown_answer(self, example, prediction, row: dict | None = None) -> dict:
        """The model's answer to ``example``, as the attention explorer writes it beside the
        example (JSON values); ``row`` holds the arrays of the encoded row the explorer shows
        ({name: array [max_len] or a number}), for answers placed on its tokens.

        Sequence and choice (a :class:`ClassPrediction`): ``{"label": name, "probability":
        p}``, the predicted label's name (the chosen ending's number from 1, for choice) and
        its probability; a regression's prediction is its score (a number): ``{"score": s}``.
        Token and span tasks override it: ``{"tags": [tag or "" per token of the example's
        first encoded row]}`` (a word's tag under its first piece), or ``{"answer": text,
        "tokens": [first, last]}`` (the answer's pieces in that row, to be marked).
        """
        return self.shape.shown_answer(self, example, prediction, row)
