"""GLUE's metrics against scikit-learn and scipy, on hand-worked cases and on degenerate input:
Matthews correlation (CoLA), Pearson and Spearman correlations (STS-B), accuracy and F1."""
import warnings

import numpy as np
import pytest
from scipy.stats import pearsonr, rankdata, spearmanr
from sklearn.metrics import accuracy_score, f1_score as sklearn_f1, matthews_corrcoef

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.metrics import (
    accuracy,
    average_ranks,
    f1_score,
    matthews_correlation,
    pearson_correlation,
    spearman_correlation,
)


def test_matthews_hand_worked():
    labels, predictions = [1, 1, 1, 0, 0, 1], [1, 0, 1, 0, 1, 1]
    # TP 3 (0, 2, 5), TN 1 (3), FP 1 (4), FN 1 (1):
    # (3·1 - 1·1) / sqrt((3+1)(3+1)(1+1)(1+1)) = 2 / sqrt(64) = 0.25.
    assert matthews_correlation(labels, predictions) == pytest.approx(0.25)


@pytest.mark.parametrize("classes, size", [(2, 40), (2, 7), (3, 50), (5, 200)])
def test_matthews_matches_scikit_learn(classes, size):
    rng = np.random.default_rng(classes * size)
    for _ in range(20):
        labels = rng.integers(classes, size=size)
        predictions = np.where(rng.random(size) < 0.6, labels, rng.integers(classes, size=size))
        assert matthews_correlation(labels, predictions) == pytest.approx(
            matthews_corrcoef(labels, predictions), abs=1e-12)


def test_matthews_of_a_constant_guess_is_zero_as_scikit_learn_says():
    labels = [0, 1, 1, 1, 0, 1]
    for constant in ([1] * 6, [0] * 6):
        assert matthews_correlation(labels, constant) == 0.0 == matthews_corrcoef(labels,
                                                                                  constant)
    # One gold class and every prediction right: 0/0 too, and 0.0 as scikit-learn.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn warns that it found one label only
        assert matthews_corrcoef([1, 1, 1], [1, 1, 1]) == 0.0
    assert matthews_correlation([1, 1, 1], [1, 1, 1]) == 0.0
    assert matthews_correlation([0, 1], [0, 1]) == 1.0
    assert matthews_correlation([0, 1], [1, 0]) == -1.0


def test_matthews_takes_label_names_as_well_as_ids():
    labels = np.array(["entailment", "neutral", "neutral", "contradiction", "entailment"])
    predictions = np.array(["entailment", "neutral", "entailment", "contradiction", "neutral"])
    assert matthews_correlation(labels, predictions) == pytest.approx(
        matthews_corrcoef(labels, predictions))


def test_pearson_hand_worked():
    # x - mean(x) = [-1, 0, 1], y - mean(y) = [-2, 1, 1]: 3 / sqrt(2 · 6) = sqrt(3) / 2.
    assert pearson_correlation([1, 2, 3], [0, 3, 3]) == pytest.approx(np.sqrt(3) / 2)
    assert pearson_correlation([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert pearson_correlation([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


def test_average_ranks_share_ties_as_scipy():
    # Sorted: 10 (rank 1), the two 20s (ranks 2 and 3: 2.5 each), 30 (4).
    np.testing.assert_array_equal(average_ranks([20, 10, 30, 20]), [2.5, 1, 4, 2.5])
    rng = np.random.default_rng(1)
    values = rng.integers(6, size=300).astype(np.float32) / 2  # many ties
    np.testing.assert_array_equal(average_ranks(values), rankdata(values))


def test_spearman_hand_worked_with_ties():
    # Ranks of x: [1, 2, 3, 4]; of y = [1, 5, 5, 9]: [1, 2.5, 2.5, 4].
    # Centred: [-1.5, -0.5, 0.5, 1.5] and [-1.5, 0, 0, 1.5]: 4.5 / sqrt(5 · 4.5) = 0.9487.
    assert spearman_correlation([1, 2, 3, 4], [1, 5, 5, 9]) == pytest.approx(4.5 / np.sqrt(22.5))
    assert spearman_correlation([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)


def test_correlations_match_scipy_on_sts_b_like_scores_with_ties():
    rng = np.random.default_rng(0)
    for size in (5, 50, 1500):
        gold = np.round(rng.uniform(0, 5, size) * 5) / 5  # STS-B's fifths: many ties
        predicted = (gold + rng.normal(0, 1.5, size)).astype(np.float32)
        predicted[: size // 5] = np.round(predicted[: size // 5])  # ties among predictions too
        assert pearson_correlation(gold, predicted) == pytest.approx(
            pearsonr(gold, predicted)[0], abs=1e-9)
        assert spearman_correlation(gold, predicted) == pytest.approx(
            spearmanr(gold, predicted)[0], abs=1e-9)


def test_a_constant_side_gives_zero_where_scipy_gives_nan():
    gold, constant = [0.0, 2.5, 5.0, 4.0], [3.1, 3.1, 3.1, 3.1]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy warns that the input is constant
        assert np.isnan(pearsonr(gold, constant)[0]) and np.isnan(spearmanr(gold, constant)[0])
    assert pearson_correlation(gold, constant) == 0.0
    assert spearman_correlation(gold, constant) == 0.0
    assert pearson_correlation(constant, gold) == 0.0
    assert pearson_correlation([2.0], [3.0]) == 0.0  # one pair: no spread at all


def test_accuracy_and_f1_match_scikit_learn():
    rng = np.random.default_rng(5)
    labels = rng.integers(2, size=500)
    predictions = np.where(rng.random(500) < 0.7, labels, 1 - labels)
    assert accuracy(labels, predictions) == pytest.approx(accuracy_score(labels, predictions))
    assert f1_score(labels, predictions) == pytest.approx(sklearn_f1(labels, predictions))


@pytest.mark.parametrize("metric", [matthews_correlation, pearson_correlation,
                                    spearman_correlation])
def test_bad_lengths_are_user_errors(metric):
    with pytest.raises(UserError, match="3 labels but 2 predictions"):
        metric([1, 0, 1], [1, 0])
    with pytest.raises(UserError, match="no labels to score"):
        metric([], [])
