"""SQuAD's official metrics on cases worked out by hand: normalisation, exact match, F1 as a
multiset of words, the best over gold answers, v1.1's and v2.0's differences, and v2.0's
HasAns / NoAns parts and best-threshold sweep."""
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.answers import (best_threshold, exact_match, f1_score,
                                         normalize_answer, question_scores, squad2_scores,
                                         squad_scores)


@pytest.mark.parametrize("text, normalized", [
    ("The  Broncos!", "broncos"),
    ("A man, a plan; an ISLAND.", "man plan island"),
    ("the-the", "thethe"),  # the hyphen goes first, so no article is left to remove
    ("Theme of the anthem", "theme of anthem"),  # articles only as whole words
    ("  $1,520.15\n", "152015"),
    ("", ""),
])
def test_normalisation_lowers_drops_punctuation_articles_and_extra_spaces(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_compares_normalised_texts():
    assert exact_match("Denver Broncos", "the denver broncos.") == 1.0
    assert exact_match("Denver", "Denver Broncos") == 0.0


def test_f1_counts_shared_words_as_a_multiset():
    # prediction words: cat sat on mat (4); gold: cat on mat (3); shared 3.
    # precision 3/4, recall 1, F1 = 2 * 3/4 / (7/4) = 6/7.
    assert f1_score("the cat sat on the mat", "cat on mat") == pytest.approx(6 / 7)
    # x x y against x y y: shared min(2, 1) + min(1, 2) = 2; precision = recall = 2/3.
    assert f1_score("x x y", "x y y") == pytest.approx(2 / 3)
    assert f1_score("dog", "cat") == 0.0


def test_a_question_scores_its_best_gold_answer_and_ties_score_once():
    # "Denver Broncos" vs "Broncos": precision 1/2, recall 1 -> 2/3;
    # vs "Denver Broncos team": precision 1, recall 2/3 -> 4/5. Best: 4/5, no exact match.
    assert question_scores(["Broncos", "Denver Broncos team"], "Denver Broncos") == \
        pytest.approx((0.0, 0.8))
    # "y" against "x y" and "y z": 2/3 both; the best is 2/3, not a sum.
    assert question_scores(["x y", "y z"], "y") == pytest.approx((0.0, 2 / 3))
    assert question_scores(["Broncos", "The Broncos!"], "broncos") == (1.0, 1.0)


def test_v2_scores_empty_answers_against_the_empty_gold_and_v1_does_not():
    assert f1_score("", "", version="2.0") == 1.0
    assert f1_score("", "", version="1.1") == 0.0
    assert f1_score("", "Broncos", version="2.0") == 0.0
    assert question_scores([], "", "2.0") == (1.0, 1.0)
    assert question_scores([], "Broncos", "2.0") == (0.0, 0.0)
    # A gold "." normalises to nothing: v2.0 drops it (the gold becomes ""), v1.1 keeps it,
    # so an empty prediction matches it exactly but shares no word for F1.
    assert question_scores(["."], "", "2.0") == (1.0, 1.0)
    assert question_scores(["."], "", "1.1") == (1.0, 0.0)
    assert question_scores([".", "Broncos"], "", "2.0") == (0.0, 0.0)


def test_squad_scores_are_means_over_questions_as_fractions():
    golds = [["Denver Broncos"], ["Santa Clara, California", "Santa Clara"], ["2016"]]
    predictions = ["the Denver Broncos", "Santa Clara", "February 7, 2016"]
    # exact: 1, 1, 0; F1: 1, 1, and "february 7 2016" vs "2016": precision 1/3, recall 1 -> 1/2.
    scores = squad_scores(golds, predictions, version="1.1")
    assert list(scores) == ["exact_match", "f1"]
    assert scores["exact_match"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx((1 + 1 + 0.5) / 3)
    with pytest.raises(UserError, match="3 questions but 2 predictions"):
        squad_scores(golds, predictions[:2])


def test_v2_scores_split_answerable_and_unanswerable_and_sweep_the_threshold():
    golds = [["Paris"], ["blue sky"], [], []]
    best_spans = ["Paris", "sky", "foo", "bar"]
    no_answer = [-2.0, 1.0, 2.0, 3.0]  # null score minus best span score
    given = ["Paris", "", "", ""]  # at threshold 0: "" where the no-answer score is above 0
    scores = squad2_scores(golds, given, best_spans, no_answer)
    # exact and F1 per question: 1, 0, 1, 1.
    assert scores["exact_match"] == scores["f1"] == pytest.approx(3 / 4)
    assert scores["HasAns_exact"] == scores["HasAns_f1"] == pytest.approx(1 / 2)
    assert scores["NoAns_exact"] == scores["NoAns_f1"] == 1.0
    # F1 sweep from all empty (2 right): +1 (Paris) = 3 at -2, +2/3 ("sky" in "blue sky") =
    # 11/3 at 1.0, -1 (foo) = 8/3, -1 (bar) = 5/3. Best 11/3 of 4 at threshold 1.0.
    assert scores["best_f1"] == pytest.approx(11 / 12)
    assert scores["best_threshold"] == 1.0
    # Exact sweep: 3 at -2, still 3 at 1.0 ("sky" is not exact): best 3/4 at -2.
    assert scores["best_exact"] == pytest.approx(3 / 4)
    assert scores["best_exact_threshold"] == -2.0


def test_a_best_of_every_answer_empty_keeps_a_threshold_that_empties_them():
    # No-answer scores -0.5 and -2.0, both questions unanswerable but predicted: answering
    # nothing is best (2/2). The script would report 0.0, at which both are answered; the
    # threshold kept must lie below -2.0, where "answer '' when above it" empties both.
    best, threshold = best_threshold([0.0, 0.0], [False, False], ["a", "b"], [-0.5, -2.0])
    assert best == 1.0 and threshold < -2.0


def test_threshold_sweep_takes_tied_no_answer_scores_in_question_order():
    # Both questions have no-answer score 1.0. Unanswerable first: 1 right with all empty,
    # -1 -> 0, +1 -> 1, never above 1: best 1/2 at the starting threshold 0.0.
    assert best_threshold([0.0, 1.0], [False, True], ["y", "x"], [1.0, 1.0]) == (0.5, 0.0)
    # Answerable first: +1 -> 2 at threshold 1.0, as the official script reports it, although
    # at 1.0 the unanswerable question would be answered too.
    assert best_threshold([1.0, 0.0], [True, False], ["x", "y"], [1.0, 1.0]) == (1.0, 1.0)


def test_v2_without_unanswerable_questions_has_no_noans_part():
    scores = squad2_scores([["a dog"]], ["dog"])
    assert scores == {"exact_match": 1.0, "f1": 1.0, "HasAns_exact": 1.0, "HasAns_f1": 1.0}
