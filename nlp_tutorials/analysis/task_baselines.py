"""Simple baselines for every task, scored by the task's own ``score`` on the splits a
fine-tuned model is scored on: what BERT buys is its distance from these.

    python -m nlp_tutorials.baseline --task rte --data glue/RTE
    python -m nlp_tutorials.baseline --task squad --data squad --train-articles 38

Each baseline is fitted on train only (any setting it has is chosen by cross-validation on
train only) and scored on every labelled split a model is scored on: dev, and test when the
task has a test file (CoNLL-2003's eng.testb, MNLI's mismatched dev, MRPC's shipped test).
One line each: ``name (setting): the task's metrics on split (file, examples)``.

=====================  =====================================================================
task (shape)           baselines
=====================  =====================================================================
classification         ``majority``: train's most frequent label; ``bag of words``: logistic
(GLUE, MRPC)           regression on the words of the sentence, or of each sentence of a pair
                       and the words they share (:func:`~nlp_tutorials.analysis.sentence_baselines.fit_bag_of_words`). MRPC keeps its
                       ``word overlap`` (:mod:`nlp_tutorials.analysis.baseline`).
STS-B (a score)        ``train mean`` (a constant: both correlations are 0 by the metrics'
                       convention); ``ridge``: ridge regression on the pair's bag of words and
                       MRPC's ten overlap features (:func:`~nlp_tutorials.analysis.sentence_baselines.fit_ridge`).
CoNLL-2003 (tags)      ``most frequent tag``: each word's most frequent train tag, "O" for a
                       word train never saw (:func:`fit_most_frequent_tag`).
SQuAD (spans)          ``sliding window``: the sentence sharing most question words, and the run
                       of its words nearest them (:func:`sliding_window_answer`); v2.0 adds
                       ``always no answer``.
multiple choice        ``majority position``: train's most frequent answer position; ``word
                       overlap``: the ending sharing most words with the context.
=====================  =====================================================================

SQuAD's training files are large and not always at hand: with only a dev file,
``--train-articles N`` splits it by article (:func:`split_by_article`). Importing this module
imports neither TensorFlow nor scikit-learn (fitting imports scikit-learn).
"""
import math
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import NamedTuple

import numpy as np

from nlp_tutorials.analysis.baseline import word_spans, words
from nlp_tutorials.analysis.sentence_baselines import (
    chosen,
    fit_bag_of_words,
    fit_majority,
    fit_mrpc_overlap,
    fit_ridge,
    fit_train_mean,
)
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.base import Task, counted
from nlp_tutorials.tasks.shapes import (
    CHOICE,
    SEQUENCE,
    SHAPES,
    SPAN,
    TOKEN,
    ClassPrediction,
    check_baselines,
)
from nlp_tutorials.tasks.entities import OUTSIDE, to_iob2
from nlp_tutorials.tasks.squad import SpanPrediction
from nlp_tutorials.tasks.squad_split import split_by_title

# Function words, left out where words are matched across texts (question and context, context
# and ending): a shared "the" or "of" says nothing about which sentence or ending is meant.
STOPWORDS = frozenset("""
    a an the of in on at to for from by with as and or but if than then that this these those
    is are was were be been being am do does did has have had it its he she they them his her
    their we you i what which who whom whose when where why how there here not no so such into
    about over under after before during between through up down out off can could would
    should will shall may might must also""".split())

# A sentence ends at ".", "!" or "?" before white space (crude: "U.S. Army" is cut too).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


class BaselineScore(NamedTuple):
    """One baseline on one split: its ``name`` (and setting), the ``split`` scored (in words,
    with its file and size) and the task's ``scores`` (``Task.score``'s dict)."""
    name: str
    split: str
    scores: dict


def content_words(text: str) -> set[str]:
    """The distinct words of ``text`` (:func:`~nlp_tutorials.analysis.baseline.words`) that
    are not :data:`STOPWORDS`."""
    return set(words(text)) - STOPWORDS


# CoNLL-2003: a tag per word.

def fit_most_frequent_tag(task: Task, train):
    """(predict, "") tagging each word with its most frequent tag in ``train`` (IOB2, as the
    task reads them; on a tie the tag first in ``task.labels``), "O" for a word train never
    saw; words match exactly, case and all. Each sentence's tags are then written as IOB2, as
    the task writes a model's: a stray ``I-`` that starts an entity becomes ``B-``."""
    counts = defaultdict(Counter)  # word -> tag -> count
    for sentence in train:
        for word, tag in zip(sentence.words, sentence.tags):
            counts[word][tag] += 1
    rank = {tag: index for index, tag in enumerate(task.labels)}
    best = {word: min(tags, key=lambda tag: (-tags[tag], rank[tag]))
            for word, tags in counts.items()}
    return lambda sentences: [to_iob2([best.get(word, OUTSIDE) for word in s.words])
                              for s in sentences], ""


# SQuAD: an answer span, or none.

def sentence_of_words(context: str, spans) -> np.ndarray:
    """The sentence (from 0) each of ``spans``' words is in: int [words]."""
    ends = [match.start() for match in _SENTENCE_END.finditer(context)]
    return np.searchsorted(ends, [start for _, start, _ in spans], side="right")


def runs_between(indexes, is_question_word, spans) -> list[list[int]]:
    """The runs of consecutive word indexes between the question's words, each stripped of
    stopwords at both ends; empty runs are dropped."""
    runs, run = [], []
    for index in list(indexes) + [None]:  # None closes the last run
        if index is not None and not is_question_word[index]:
            run.append(index)
            continue
        while run and spans[run[0]][0] in STOPWORDS:
            run.pop(0)
        while run and spans[run[-1]][0] in STOPWORDS:
            run.pop()
        if run:
            runs.append(run)
        run = []
    return runs


def sliding_window_answer(question: str, context: str) -> tuple[str, int, int, float]:
    """(answer, first character, one past the last, overlap) by word overlap.

    After Rajpurkar et al. (2016, section 5), without their parser's constituents:

    1. The window is a sentence of the context (cut after ".", "!" or "?").
    2. Its overlap is the sum, over the question's words (less :data:`STOPWORDS`) it holds, of
       ``log(1 + 1 / count)``, count being the word's occurrences in the context (Richardson
       et al.'s 2013 inverse count: a rare shared word says more). The best sentence wins,
       the earlier on a tie.
    3. Candidate answers are the runs of its words between the question's words, stripped of
       stopwords at both ends. The answer is the run nearest (in words) to a question word in
       the sentence, then the shorter, then the earlier; with no question word in the context
       at all, the first sentence's first run.

    Words match lower-cased, punctuation left out (``analysis.baseline.words``); the answer is
    the context's own characters from the run's first word to its last; ("", -1, -1,
    overlap) when the sentence holds no run.

    Chosen on the 38 train articles of SQuAD v1.1 dev (``--train-articles 38``), F1 / exact
    match: this 21.3 / 8.1; the longest run instead of the nearest 21.7 / 4.0 (the nearest is
    kept: half a point of F1 for twice the exact matches); the first run 19.9 / 6.9; runs
    also cut at stopwords 16.8 / 10.2; plain counts instead of inverse counts 20.6 / 7.9; the
    whole sentence 20.4 / 0.3.
    """
    spans = word_spans(context)  # [(word, start, end)]
    if not spans:
        return "", -1, -1, 0.0
    asked = content_words(question)
    count = Counter(word for word, _, _ in spans)
    sentence = sentence_of_words(context, spans)  # [words]
    weights = defaultdict(list)  # sentence -> the weight of each question word it holds, once
    for s, word in {(s, word) for (word, _, _), s in zip(spans, sentence) if word in asked}:
        weights[s].append(math.log(1 + 1 / count[word]))
    # fsum is exact whatever the order (a set's order changes from run to run), so equal
    # overlaps tie exactly and the earlier sentence wins in every run.
    overlap = np.array([math.fsum(weights[s]) for s in range(sentence[-1] + 1)])
    best = int(np.argmax(overlap))  # the first of equal overlaps
    indexes = np.flatnonzero(sentence == best)
    is_question_word = [word in asked for word, _, _ in spans]
    runs = runs_between(indexes, is_question_word, spans)
    if not runs:
        return "", -1, -1, float(overlap[best])
    matched = [i for i in indexes if is_question_word[i]]
    run = runs[0]
    if matched:  # min keeps the first of equals: the earlier run
        run = min(runs, key=lambda r: (min(abs(i - j) for i in r for j in matched), len(r)))
    start, end = spans[run[0]][1], spans[run[-1]][2]
    return context[start:end], start, end, float(overlap[best])


def fit_sliding_window(task: Task, train):
    """(predict, "") answering each question with :func:`sliding_window_answer` (nothing is
    learnt). Its overlap is the prediction's ``score`` and the null score is 0, so v2.0's
    no-answer score is minus the overlap."""
    def predict(questions):
        found = []
        for q in questions:
            text, start, end, overlap = sliding_window_answer(q.question, q.context)
            found.append(SpanPrediction(text, start, end, overlap, 0.0, text))
        return found

    return predict, ""


def fit_no_answer(task: Task, train):
    """(predict, "") answering no question (SQuAD v2.0's "always no answer")."""
    return lambda questions: [SpanPrediction("", -1, -1, -math.inf, 0.0, "")
                              for _ in questions], ""


# Multiple choice: the right ending.

def answer_positions_by_frequency(task: Task, train) -> list[int]:
    """The answer positions (ending indexes), the most frequent in ``train`` first (the
    earlier on a tie)."""
    counts = np.bincount([e.label for e in train], minlength=task.num_labels)
    return [int(position) for position in np.argsort(-counts, kind="stable")]


def fit_majority_position(task: Task, train):
    """(predict, "") always choosing the ending at train's most frequent answer position."""
    position = answer_positions_by_frequency(task, train)[0]
    return lambda examples: [chosen(position, len(e.endings)) for e in examples], ""


def fit_word_overlap_choice(task: Task, train):
    """(predict, "") choosing the ending that shares the most distinct words (less
    :data:`STOPWORDS`) with the context; among endings that share as many, the one at the
    answer position most frequent in train."""
    rank = {position: order for order, position
            in enumerate(answer_positions_by_frequency(task, train))}

    def choose(example) -> ClassPrediction:
        context = content_words(example.context)
        shared = [len(context & content_words(ending)) for ending in example.endings]
        best = min(range(len(shared)), key=lambda i: (-shared[i], rank.get(i, i)))
        return chosen(best, len(shared))

    return lambda examples: [choose(e) for e in examples], ""


# Each shape's baselines, in the order they are printed; some only for the tasks they fit.

def scores_a_number(task: Task) -> bool:
    """A sentence task answering a score (STS-B, a table with --regression)."""
    return getattr(task, "regression", False)


def classifies(task: Task) -> bool:
    return not scores_a_number(task)


def compares_word_overlap(task: Task) -> bool:
    """A sentence-pair task that asks for the word-overlap baseline (MRPC)."""
    return getattr(task, "overlap_baseline", False)


def may_have_no_answer(task: Task) -> bool:
    """SQuAD v2.0, a third of whose dev questions have no answer."""
    return task.version == "2.0"


SEQUENCE.register_baseline("majority", fit_majority, classifies)
SEQUENCE.register_baseline("word overlap", fit_mrpc_overlap, compares_word_overlap)
SEQUENCE.register_baseline("bag of words", fit_bag_of_words, classifies)
SEQUENCE.register_baseline("train mean", fit_train_mean, scores_a_number)
SEQUENCE.register_baseline("ridge", fit_ridge, scores_a_number)
TOKEN.register_baseline("most frequent tag", fit_most_frequent_tag)
SPAN.register_baseline("sliding window", fit_sliding_window)
SPAN.register_baseline("always no answer", fit_no_answer, may_have_no_answer)
CHOICE.register_baseline("majority position", fit_majority_position)
CHOICE.register_baseline("word overlap", fit_word_overlap_choice)
check_baselines(SHAPES.values())


# Which baselines, on which splits.

def baselines_for(task: Task) -> list[tuple[str, object]]:
    """(name, fit) of each baseline registered for ``task``'s shape that applies to it
    (:meth:`~nlp_tutorials.tasks.shapes.Shape.register_baseline`); ``fit(task, train)``
    returns ``(predict, setting)``: ``predict(examples)`` gives one prediction per example,
    as the task's ``score`` reads them, and ``setting`` says what was chosen on train ("" for
    nothing)."""
    return task.shape.baselines(task)


def split_by_article(task: Task, train_articles: int) -> tuple[list, tuple[str, list]]:
    """(train questions, (what is scored, its questions)) from SQuAD's dev file alone, split by
    article as :func:`~nlp_tutorials.tasks.squad_split.split_by_title` splits it (the articles
    sorted by title, the first ``train_articles`` train)."""
    path = task.path("dev")
    if path is None:
        raise task.missing("dev")
    questions = task.examples("dev")  # checked: an article is a dict, with paragraphs
    training, scored_articles = split_by_title(path, train_articles)
    training = set(training)
    train = [q for q in questions if q.article in training]
    scored = [q for q in questions if q.article not in training]
    articles = len(training) + len(scored_articles)
    return train, (f"{path.name}, the last {len(scored_articles)} of {articles} "
                   f"articles by title ({counted(len(scored), 'question')})", scored)


def scored_splits(task: Task) -> list[tuple[str, list]]:
    """(what is scored, its examples) of each labelled split the task has a file for: dev,
    then test. None at all is the task's own error for a missing dev file."""
    found = []
    for split in ("dev", "test"):
        path = task.path(split)
        if path is not None:
            examples = task.examples(split)
            found.append((f"{split} ({Path(path).name}, {counted(len(examples), 'example')})",
                          examples))
    if not found:
        raise task.missing("dev")
    return found


def train_and_scored(task: Task, train_articles: int | None) -> tuple[list, list]:
    """(train examples, [(what is scored, its examples)]): the task's files, or with
    ``train_articles`` (SQuAD only) :func:`split_by_article`'s split of its dev file."""
    if train_articles is None:
        if task.splits_by_article and task.path("train") is None:
            raise UserError(f"{task.missing('train')}; or --train-articles N to split the dev "
                            f"file by article")
        return task.examples("train"), scored_splits(task)
    if not task.splits_by_article:
        raise UserError(f"--train-articles {train_articles}: only SQuAD (squad, squad2) is "
                        f"split by article; {task.name} has its own train file")
    train, scored = split_by_article(task, train_articles)
    return train, [scored]


def run_baselines(task: Task, train_articles: int | None = None) -> list[BaselineScore]:
    """Each of :func:`baselines_for` the task, fitted on train and scored on each split
    scored (:func:`train_and_scored`), a :class:`BaselineScore` per baseline and split.

    Fitting uses one BLAS thread: these sparse fits are small, and OpenBLAS's idle threads
    spinning for work made them 10 to 20 times slower on a 2-core machine with other jobs."""
    from threadpoolctl import threadpool_limits

    train, splits = train_and_scored(task, train_articles)
    results = []
    for name, fit in baselines_for(task):
        with threadpool_limits(limits=1, user_api="blas"):
            predict, setting = fit(task, train)
        shown = f"{name} ({setting})" if setting else name
        results += [BaselineScore(shown, split, task.score(examples, predict(examples)))
                    for split, examples in splits]
    return results


def report_line(task: Task, result: BaselineScore) -> str:
    """``majority: accuracy 66.5% F1 79.9 on test (msr_paraphrase_test.txt, 1,725
    examples)``."""
    return f"{result.name}: {task.describe(result.scores)} on {result.split}"
