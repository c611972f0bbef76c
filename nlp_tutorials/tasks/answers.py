"""SQuAD's metrics, written from the definitions of the official evaluation scripts.

An answer is compared with each gold answer after **normalisation**: lower case, every ASCII
punctuation character removed, the articles "a", "an" and "the" removed as whole words, runs of
whitespace collapsed to one space. Two scores per question, each the best over its gold answers:

- **exact match**: 1 when the normalised texts are equal, else 0;
- **F1**: the harmonic mean of precision and recall of the answer's words against the gold
  answer's words, counted as a multiset (each shared word counts as often as both hold it).

The scores of a file are the means over its questions, as fractions in [0, 1] (the official
scripts print them x100).

SQuAD v2.0 adds questions with no answer. Their gold is the empty answer ``""``: an empty
prediction scores 1 on them, anything else 0. Its script differs from v1.1's in two details,
kept here through ``version``: gold answers that normalise to nothing (dev v1.1 has three
answers ".") are dropped, the empty answer standing in when none is left; and F1 of two empty
answers is 1 (v1.1: 0, as any pair with no word in common). It reports the answerable
("HasAns") and unanswerable ("NoAns") questions apart, and, given each question's
**no-answer score** (how much more the model believes in no answer than in its best span),
the best exact match and F1 any threshold on that score reaches, and that threshold
(:func:`best_threshold`).
"""
import collections
import re
import string

import numpy as np

from nlp_tutorials.system.errors import UserError

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)
VERSIONS = ("1.1", "2.0")


def normalize_answer(text: str) -> str:
    """``text`` as the official scripts compare it: ``"The  Broncos!"`` -> ``"broncos"``."""
    text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def exact_match(prediction: str, gold: str) -> float:
    """1.0 when both normalise to the same text, else 0.0."""
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1_score(prediction: str, gold: str, version: str = "2.0") -> float:
    """F1 of the prediction's normalised words against the gold answer's.

    With ``shared`` words in common (a multiset intersection), precision is ``shared /
    len(prediction words)`` and recall ``shared / len(gold words)``. When one side has no
    word, v2.0 scores 1.0 if both have none and 0.0 otherwise; v1.1 scores 0.0 whenever no
    word is shared, two empty answers included.
    """
    predicted_words = normalize_answer(prediction).split()
    gold_words = normalize_answer(gold).split()
    if version == "2.0" and not (predicted_words and gold_words):
        return float(predicted_words == gold_words)
    shared = sum((collections.Counter(predicted_words)
                  & collections.Counter(gold_words)).values())
    if shared == 0:
        return 0.0
    precision = shared / len(predicted_words)
    recall = shared / len(gold_words)
    return 2 * precision * recall / (precision + recall)


def scored_gold(golds, version: str) -> list[str]:
    """The gold answers a question is scored against: as given for v1.1; for v2.0 those that
    normalise to some text, or ``[""]`` when none does (an unanswerable question)."""
    golds = list(golds)
    if version == "1.1":
        return golds
    return [gold for gold in golds if normalize_answer(gold)] or [""]


def question_scores(golds, prediction: str, version: str = "2.0") -> tuple[float, float]:
    """(exact match, F1) of one question: each the best over its gold answers."""
    golds = scored_gold(golds, version)
    return (max(exact_match(prediction, gold) for gold in golds),
            max(f1_score(prediction, gold, version) for gold in golds))


def _check_version(version: str):
    if version not in VERSIONS:
        raise UserError(f"SQuAD version {version!r}: expected one of {', '.join(VERSIONS)}")


def squad_scores(golds, predictions, version: str = "1.1") -> dict:
    """``{"exact_match", "f1"}``: the means over questions, fractions in [0, 1].

    Args:
        golds: per question, its gold answer texts (``[]`` for an unanswerable one).
        predictions: per question, the answer text given (``""``: no answer).
        version: "1.1" or "2.0", whose script's details to follow (see the module).
    """
    _check_version(version)
    golds, predictions = list(golds), list(predictions)
    if len(golds) != len(predictions):
        raise UserError(f"{len(golds)} questions but {len(predictions)} predictions: "
                        "expected one prediction per question")
    if not golds:
        raise UserError("no questions to score")
    pairs = np.array([question_scores(gold, predicted, version)
                      for gold, predicted in zip(golds, predictions)])  # [questions, 2]
    return {"exact_match": float(pairs[:, 0].mean()), "f1": float(pairs[:, 1].mean())}


def best_threshold(scores, answerable, predictions, no_answer_scores) -> tuple[float, float]:
    """(best mean score, its threshold) over thresholds on the no-answer score, as v2.0's
    script finds them.

    At threshold ``t`` a question whose no-answer score is above ``t`` is answered "" (scoring
    1 if it is unanswerable, 0 if not), the others keep their prediction (its ``score``). The
    sweep starts from every answer empty (reported threshold: 0.0 as in the script, or, where
    some no-answer score is not above 0.0, one below them all, so that the threshold kept with
    a model does make every answer empty), then takes the questions
    in increasing no-answer score (ties in question order) and adds each one's change: its
    score if answerable, -1 if unanswerable with a non-empty prediction, else 0; the
    threshold is the no-answer score of the question after which the running total is
    highest (first reached). As in the script, a threshold inside a run of tied no-answer
    scores can be reported, where the questions after it in the run would in fact change too.

    Args:
        scores: per question, its exact match or F1 (float in [0, 1]).
        answerable: per question, whether it has a gold answer.
        predictions: per question, the predicted text.
        no_answer_scores: per question, the null score minus the best span's score.
    """
    answerable = [bool(a) for a in answerable]
    total = best = float(answerable.count(False))
    lowest = min(no_answer_scores, default=1.0)
    threshold = 0.0 if lowest > 0.0 else float(lowest) - 1.0
    for q in sorted(range(len(scores)), key=lambda q: no_answer_scores[q]):
        if answerable[q]:
            total += scores[q]
        elif predictions[q]:
            total -= 1
        if total > best:
            best, threshold = total, float(no_answer_scores[q])
    return float(best) / len(scores), threshold


def squad2_scores(golds, predictions, best_spans=None, no_answer_scores=None) -> dict:
    """v2.0's scores: ``exact_match``, ``f1`` (means over all questions), then
    ``HasAns_exact``, ``HasAns_f1`` over the answerable questions and ``NoAns_exact``,
    ``NoAns_f1`` over the others (each pair only when there are such questions), all fractions.

    With ``no_answer_scores`` (per question) also ``best_exact``, ``best_exact_threshold``,
    ``best_f1`` and ``best_threshold`` (F1's, the one to keep): :func:`best_threshold` swept
    over ``best_spans`` (per question, the best non-empty span's text; default
    ``predictions``), so that any threshold can win, not only those above the one that made
    ``predictions``.
    """
    scores = squad_scores(golds, predictions, version="2.0")
    golds = [list(gold) for gold in golds]
    answerable = [bool(scored_gold(gold, "2.0")[0]) for gold in golds]
    pairs = np.array([question_scores(gold, predicted) for gold, predicted
                      in zip(golds, predictions)]).reshape(-1, 2)  # [questions, exact & F1]
    for part, keep in (("HasAns", np.array(answerable)), ("NoAns", ~np.array(answerable))):
        if keep.any():
            scores[f"{part}_exact"] = float(pairs[keep, 0].mean())
            scores[f"{part}_f1"] = float(pairs[keep, 1].mean())
    if no_answer_scores is not None:
        spans = list(predictions if best_spans is None else best_spans)
        span_pairs = np.array([question_scores(gold, span) for gold, span
                               in zip(golds, spans)]).reshape(-1, 2)
        for column, key, threshold_key in ((0, "best_exact", "best_exact_threshold"),
                                           (1, "best_f1", "best_threshold")):
            scores[key], scores[threshold_key] = best_threshold(
                span_pairs[:, column], answerable, spans, list(no_answer_scores))
    return scores
