"""GLUE (Wang et al., 2018): the benchmark's sentence and sentence-pair tasks, read from the
files GLUE releases, and :class:`SentenceTask`, what every task of one sentence or a pair in and
one label or score out has in common (a user's own table reuses it: :mod:`.table`).

========  =====================  ===========================  =========================
task      input                  answer                       metrics (first picks)
========  =====================  ===========================  =========================
cola      a sentence             acceptable "1" or not "0"    Matthews correlation
sst2      a sentence             positive "1" or negative "0" accuracy
mrpc      a pair (:mod:`.mrpc`)  paraphrase "1" or not "0"    accuracy, F1
stsb      a pair                 similarity, 0 to 5           Pearson, Spearman
qqp       two questions          duplicate "1" or not "0"     accuracy, F1
mnli      premise, hypothesis    entailment, neutral ...      accuracy (matched,
                                                              mismatched as "test")
qnli      question, sentence     entailment / not_entailment  accuracy
rte       a pair                 entailment / not_entailment  accuracy
wnli      a pair                 entailment "1" or not "0"    accuracy
========  =====================  ===========================  =========================

Every file is UTF-8 and tab-separated, and sentences hold literal ``"`` characters: a line is
split on tabs by hand, never with a CSV reader, whose default quoting takes a stray ``"`` for
the start of a quoted field and swallows the lines after it into one row (STS-B's train file
would lose 38 of its 5,749 pairs, QNLI's dev 65 of 5,463). Columns are found by the name the
header gives them; CoLA's files have no header. GLUE's ``test.tsv`` files hold no labels (the
benchmark's server scores them) and are not read.
"""
import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import numbered_lines
from nlp_tutorials.tasks.base import Task, counted, example_lines
from nlp_tutorials.tasks.metrics import (
    accuracy,
    f1_score,
    matthews_correlation,
    pearson_correlation,
    spearman_correlation,
)
from nlp_tutorials.tasks.shapes import SEQUENCE
from nlp_tutorials.text.tokenization import pad_ragged

# The largest score a regression file may give: a float32, which the model computes in, holds
# up to about 3.4e38; STS-B's scores are 0 to 5.
LARGEST_SCORE = 1e30


@dataclass(frozen=True)
class TextExample:
    """One sentence, or one sentence pair, and its answer.

    ``text``: the (first) sentence; ``pair``: the second, None for a single-sentence task;
    ``label``: the label's name as the file writes it ("1", "entailment"), or for a regression
    the score (float); ``id``: the file's own id of the example (GLUE's ``index`` column), or
    None where it has none."""
    text: str
    pair: str | None
    label: str | float
    id: str | None = None


class ScorePrediction(NamedTuple):
    """A regression's answer for one example: the predicted ``score`` (STS-B: 0 to 5)."""
    score: float


# Score key -> function(gold [n], predicted [n]) -> float; f1_score is of label index 1.
SCORERS = {"accuracy": accuracy, "f1": f1_score, "mcc": matthews_correlation,
           "pearson": pearson_correlation, "spearman": spearman_correlation}


class SentenceTask(Task):
    """A sentence (``pair = False``) or a sentence pair in, a label out, or with ``regression``
    a score (one output, squared error; ``labels`` is then ``("score",)``).

    Examples are :class:`TextExample`. Subclasses read their files (:meth:`Task.read_file`,
    checking labels with :meth:`read_label`); the rest is here: encoding ``[CLS] text [SEP]``
    or ``[CLS] text [SEP] pair [SEP]``, predictions, scores and ``predict``'s lines.
    """

    shape = SEQUENCE
    pair = False  # two texts an example, or one
    regression = False  # a score (float) per example instead of a label
    # Baselines: also a threshold on the words the two sentences share (MRPC's yardstick).
    overlap_baseline = False

    @property
    def unit(self) -> str:
        """What one example is, in reports: "sentence" or "sentence pair"."""
        return "sentence pair" if self.pair else "sentence"

    def read_label(self, path, number: int, value: str) -> str | float:
        """The answer written as ``value`` on line ``number`` of ``path``: a score for a
        regression, else a label name, which must be one of ``self.labels`` once they are set
        (a label train never saw is a UserError naming the line and the known labels)."""
        if self.regression:
            try:
                score = float(value)
            except ValueError:
                score = math.nan
            if not math.isfinite(score):
                raise UserError(f"{path}:{number}: score {value[:50]!r} is not a number; "
                                f"expected a score such as 3.8")
            if abs(score) > LARGEST_SCORE:  # beyond float32, where the model computes
                raise UserError(f"{path}:{number}: score {value[:50]!r} is too large; expected "
                                f"a score from -{LARGEST_SCORE:.0e} to {LARGEST_SCORE:.0e}")
            return score
        if self.labels and value not in self.labels:
            raise UserError(f"{path}:{number}: unknown label {value[:50]!r}; {self.known_labels} "
                            f"{', '.join(self.labels)}")
        return value

    @property
    def known_labels(self) -> str:
        """How an unknown label's error introduces the known ones."""
        return f"{self.title}'s labels are"

    def summarize(self, examples) -> str:
        """``8,551 sentences (0: 2,528, 1: 6,023)`` or ``5,749 sentence pairs, scores 0.00 to
        5.00``."""
        found = counted(len(examples), self.unit)
        if self.regression:
            scores = [e.label for e in examples]
            return f"{found}, scores {min(scores):.2f} to {max(scores):.2f}"
        names = self.labels or sorted({e.label for e in examples})
        counts = {name: 0 for name in names}
        for example in examples:
            counts[example.label] += 1
        return f"{found} ({', '.join(f'{name}: {count:,}' for name, count in counts.items())})"

    def learn_labels(self, train) -> list[str]:
        """The label names of ``train``, sorted."""
        return sorted({e.label for e in train})

    def texts(self, examples) -> list[str]:
        return [t for e in examples for t in ((e.text, e.pair) if self.pair else (e.text,))]

    def tokens(self, tokenizer, examples) -> tuple[list, list | None]:
        """The tokens of every first sentence, and of every second (None without pairs)."""
        firsts = [tokenizer.tokenize(e.text) for e in examples]
        if not self.pair:
            return firsts, None
        return firsts, [tokenizer.tokenize(e.pair) for e in examples]

    def longest(self, tokenizer, examples) -> int:
        firsts, seconds = self.tokens(tokenizer, examples)
        if seconds is None:
            return max(map(len, firsts)) + 2  # [CLS] text [SEP]
        return max(len(a) + len(b) for a, b in zip(firsts, seconds)) + 3

    def label_array(self, examples) -> np.ndarray:
        """The answers as the head's loss reads them: label ids int32 [n], or scores float32
        [n] for a regression."""
        if self.regression:
            return np.array([e.label for e in examples], np.float32)
        ids = {name: index for index, name in enumerate(self.labels)}
        return np.array([ids[e.label] for e in examples], np.int32)

    def encode(self, tokenizer, examples, max_len: int) -> dict:
        """``input_ids``, ``token_type_ids`` int32 [n, max_len] of ``[CLS] text [SEP]`` (or
        ``[CLS] text [SEP] pair [SEP]``, truncated longest-first; see
        :meth:`~nlp_tutorials.text.tokenization.Tokenizer.pack`) and ``labels`` [n] (int32
        label ids, or float32 scores)."""
        firsts, seconds = self.tokens(tokenizer, examples)
        ids_a, len_a = pad_ragged([tokenizer.convert_tokens_to_ids(t) for t in firsts])
        ids_b = len_b = None
        if seconds is not None:
            ids_b, len_b = pad_ragged([tokenizer.convert_tokens_to_ids(t) for t in seconds])
        input_ids, token_type_ids = tokenizer.pack(ids_a, len_a, ids_b, len_b, max_len)
        return {"input_ids": input_ids, "token_type_ids": token_type_ids,
                "labels": self.label_array(examples)}

    def predictions(self, outputs, encoded: dict, examples) -> list:
        """A regression's :class:`ScorePrediction` per example from its one output ([n, 1]);
        a classification's arg-max (:meth:`Task.predictions`)."""
        if not self.regression:
            return super().predictions(outputs, encoded, examples)
        return [ScorePrediction(float(score)) for score in np.asarray(outputs)[:, 0]]

    def score(self, examples, predictions) -> dict:
        """Each of ``metrics`` of the predictions against the examples' answers (F1 is of the
        second label, "1")."""
        gold = self.label_array(examples)
        if self.regression:
            predicted = np.array([p.score for p in predictions], np.float64)
        else:
            predicted = np.array([p.label for p in predictions], np.int32)
        return {key: SCORERS[key](gold, predicted) for key, _ in self.metrics}

    def format_prediction(self, example, prediction) -> str:
        """``score<TAB>texts`` for a regression (``3.817<TAB>s1<TAB>s2``), else
        ``label<TAB>probability<TAB>texts`` (:meth:`Task.format_prediction`)."""
        if not self.regression:
            return super().format_prediction(example, prediction)
        return "\t".join([f"{prediction.score:.3f}", *self.texts([example])])

    def prediction_file(self, examples, predictions) -> tuple[str, str]:
        """``.tsv``: a header, then ``index<TAB>prediction`` a line, the index being the
        file's own (GLUE's ``index`` column) where it has one, else the example's from 0; the
        prediction a label's name, or a score."""
        lines = ["index\tprediction"]
        for index, (example, prediction) in enumerate(zip(examples, predictions)):
            answer = (f"{prediction.score:.3f}" if self.regression
                      else self.labels[prediction.label])
            lines.append(f"{index if example.id is None else example.id}\t{answer}")
        return ".tsv", "\n".join(lines) + "\n"

    def parse_lines(self, lines, source: str):
        """Examples from ``predict``'s lines: one sentence a line, or for a pair task two
        tab-separated sentences; blank lines are skipped. Each gets the first label (or score
        0) as a stand-in answer and its line number as its id."""
        expected = "two tab-separated sentences" if self.pair else "one sentence (no tab)"
        stand_in = 0.0 if self.regression else self.labels[0]
        found_none = f"no {self.unit}s found (only blank lines); expected {expected} a line"
        for number, line in example_lines(lines, source, found_none):
            fields = line.split("\t")
            if len(fields) != (2 if self.pair else 1):
                raise UserError(f"{source}, line {number}: expected {expected} a line, got "
                                f"{len(fields)} tab-separated fields")
            if not all(field.strip() for field in fields):
                raise UserError(f"{source}, line {number}: expected {expected} a line, got an "
                                f"empty sentence")
            yield TextExample(fields[0], fields[1] if self.pair else None, stand_in, str(number))

    def text_inputs(self) -> tuple[str, ...]:
        return ("sentence1", "sentence2") if self.pair else ("sentence",)

    def shown_answer(self, example, prediction, row=None) -> dict:
        if self.regression:
            return {"score": round(float(prediction.score), 4)}
        return super().shown_answer(example, prediction, row)


def tsv_rows(path) -> list[tuple[int, list[str]]]:
    """(line number, fields) of every line of a GLUE file, split on tabs with no quoting;
    trailing blank lines (a final newline, or none as in CoLA's dev.tsv) are dropped."""
    return [(number, line.split("\t")) for number, line in numbered_lines(path)]


class GlueTask(SentenceTask):
    """A GLUE task read from its folder's ``train.tsv`` and ``dev.tsv``.

    ``columns`` names the header's columns that hold each part of an example: ``"text"``,
    ``"pair"`` (pair tasks), ``"label"`` and, where the file has one, ``"id"``. Every line
    must have as many tab-separated fields as the header.
    """

    file_names = {"train": ("train.tsv",), "dev": ("dev.tsv",)}
    columns: dict = {}

    def locate(self, path, rows) -> tuple[dict, int, list]:
        """({part: column index}, the number of columns, the rows after the header)."""
        if not rows:
            return {}, 0, []
        header = rows[0][1]
        missing = [name for name in self.columns.values() if name not in header]
        if missing:
            unlabelled = missing[0] == self.columns["label"]
            hint = " (GLUE's test.tsv files have none)" if unlabelled else ""
            raise UserError(f"{path}:1: no column {missing[0]!r} in the header{hint}; expected "
                            f"{self.title}'s columns {', '.join(self.columns.values())}, found "
                            f"{', '.join(header)[:200]}")
        return ({part: header.index(name) for part, name in self.columns.items()},
                len(header), rows[1:])

    def read_file(self, path) -> list[TextExample]:
        """Every example of a GLUE file, in file order."""
        at, width, rows = self.locate(path, tsv_rows(path))
        examples = []
        for number, fields in rows:
            if len(fields) != width:
                raise UserError(f"{path}:{number}: expected {width} tab-separated columns, "
                                f"found {len(fields)}")
            examples.append(TextExample(
                fields[at["text"]], fields[at["pair"]] if self.pair else None,
                self.read_label(path, number, fields[at["label"]]),
                fields[at["id"]] if "id" in at else None))
        return examples


class ColaTask(GlueTask):
    """CoLA, the Corpus of Linguistic Acceptability (Warstadt et al., 2019): is a sentence
    grammatical? "1" acceptable, "0" not.

    Its files have no header and four columns: the source (a book or paper's code), the
    label, the mark the source gave an unacceptable sentence (``*``, ``?``, or empty), and the
    sentence. Scored by the Matthews correlation, which a constant guess cannot raise (70% of
    the sentences are acceptable). Train 8,551 sentences, dev 1,043.
    """

    name = "cola"
    title = "CoLA"
    labels = ("0", "1")
    metrics = (("mcc", "Matthews correlation"), ("accuracy", "accuracy"))
    COLUMNS = ("source", "label", "original mark", "sentence")

    def locate(self, path, rows) -> tuple[dict, int, list]:
        return {"label": 1, "text": 3}, len(self.COLUMNS), rows


class Sst2Task(GlueTask):
    """SST-2, the Stanford Sentiment Treebank's sentences (Socher et al., 2013): "1"
    positive, "0" negative. Header ``sentence<TAB>label``; every sentence ends with a space.
    Train 67,349 sentences, dev 872."""

    name = "sst2"
    title = "SST-2"
    labels = ("0", "1")
    columns = {"text": "sentence", "label": "label"}


class StsbTask(GlueTask):
    """STS-B, the Semantic Textual Similarity Benchmark (Cer et al., 2017): how alike two
    sentences are, a score from 0 (unrelated) to 5 (the same meaning), learnt as a regression
    (one output, squared error) and scored by the Pearson and Spearman correlations.

    Ten columns, the sentences in ``sentence1`` and ``sentence2`` and the score in ``score``
    (written ``5.000`` or ``0.8``). Train 5,749 pairs, dev 1,500.
    """

    name = "stsb"
    title = "STS-B"
    labels = ("score",)
    pair = True
    regression = True
    columns = {"id": "index", "text": "sentence1", "pair": "sentence2", "label": "score"}
    metrics = (("pearson", "Pearson"), ("spearman", "Spearman"))


class QqpTask(GlueTask):
    """QQP, Quora Question Pairs: do two questions ask the same thing? "1" duplicate, "0"
    not. Columns ``id qid1 qid2 question1 question2 is_duplicate``; scored by accuracy and F1
    of the duplicates, as MRPC. Train 363,846 pairs, dev 40,430."""

    name = "qqp"
    title = "QQP"
    labels = ("0", "1")
    pair = True
    columns = {"id": "id", "text": "question1", "pair": "question2", "label": "is_duplicate"}
    metrics = (("accuracy", "accuracy"), ("f1", "F1"))


class MnliTask(GlueTask):
    """MNLI, Multi-Genre Natural Language Inference (Williams et al., 2018): does a premise
    entail a hypothesis, contradict it, or neither?

    Labels in google-research/bert's order: contradiction, entailment, neutral (the
    ``gold_label`` column; the sentences in ``sentence1`` and ``sentence2``). Dev is
    ``dev_matched.tsv`` (genres seen in training, 9,815 pairs) and the "test" split is
    ``dev_mismatched.tsv`` (other genres, 9,832 pairs), so that fine-tuning reports both, as
    the BERT paper does (MNLI-m, MNLI-mm). Train 392,702 pairs.
    """

    name = "mnli"
    title = "MNLI"
    labels = ("contradiction", "entailment", "neutral")
    pair = True
    file_names = {"train": ("train.tsv",), "dev": ("dev_matched.tsv",),
                  "test": ("dev_mismatched.tsv",)}
    columns = {"id": "index", "text": "sentence1", "pair": "sentence2", "label": "gold_label"}


class QnliTask(GlueTask):
    """QNLI, question answering as inference (from SQuAD): does the sentence hold the
    question's answer? Columns ``index question sentence label``, labels entailment and
    not_entailment. Train 104,743 pairs, dev 5,463."""

    name = "qnli"
    title = "QNLI"
    labels = ("entailment", "not_entailment")
    pair = True
    columns = {"id": "index", "text": "question", "pair": "sentence", "label": "label"}


class RteTask(GlueTask):
    """RTE, Recognizing Textual Entailment: does the first sentence entail the second?
    Columns ``index sentence1 sentence2 label``, labels entailment and not_entailment. Train
    2,490 pairs, dev 277."""

    name = "rte"
    title = "RTE"
    labels = ("entailment", "not_entailment")
    pair = True
    columns = {"id": "index", "text": "sentence1", "pair": "sentence2", "label": "label"}


class WnliTask(GlueTask):
    """WNLI, the Winograd Schema Challenge as inference: with the pronoun replaced, does the
    second sentence follow from the first? "1" yes, "0" no; columns as RTE's.

    Train and dev share sentences with opposite labels, so a model that fits train does worse
    on dev than always answering "0" (40 of the 71 dev pairs: 56.3%); report it beside that.
    Train 635 pairs, dev 71.
    """

    name = "wnli"
    title = "WNLI"
    labels = ("0", "1")
    pair = True
    columns = {"id": "index", "text": "sentence1", "pair": "sentence2", "label": "label"}


GLUE_TASKS = (ColaTask, Sst2Task, StsbTask, QqpTask, MnliTask, QnliTask, RteTask, WnliTask)
