"""Classification metrics for MRPC, in plain numpy (no TensorFlow).

MRPC is reported as accuracy and F1 of the paraphrase class (label 1), as in GLUE. These helpers
also give the majority-class baseline that any model must beat, and mean ± std over seeds.
"""
import numpy as np

from nlp_tutorials.system.errors import UserError


def _as_label_arrays(labels, predictions):
    """Both as 1-D numpy arrays of the same, non-zero length."""
    labels = np.asarray(labels).ravel()
    predictions = np.asarray(predictions).ravel()
    if labels.shape != predictions.shape:
        raise UserError(f"{labels.size} labels but {predictions.size} predictions: "
                        "expected one prediction per label")
    if labels.size == 0:
        raise UserError("no labels to score")
    return labels, predictions


def accuracy(labels, predictions) -> float:
    """Fraction of predictions equal to their label."""
    labels, predictions = _as_label_arrays(labels, predictions)
    return float(np.mean(labels == predictions))


def f1_score(labels, predictions, positive=1) -> float:
    """F1 of the ``positive`` class: 2·TP / (2·TP + FP + FN), the harmonic mean of precision
    and recall.

    Convention: when there are no true and no predicted positives (TP + FP + FN = 0) precision
    and recall are both 0/0; we return 0.0 there, as scikit-learn's default
    (``zero_division="warn"``, which scores 0.0), rather than raise.
    """
    labels, predictions = _as_label_arrays(labels, predictions)
    true_pos = np.sum((predictions == positive) & (labels == positive))
    false_pos = np.sum((predictions == positive) & (labels != positive))
    false_neg = np.sum((predictions != positive) & (labels == positive))
    denominator = 2 * true_pos + false_pos + false_neg
    return float(2 * true_pos / denominator) if denominator else 0.0


def mean_std(values) -> tuple[float, float]:
    """(mean, sample standard deviation with ddof=1) of e.g. one score per seed.

    A single value has no spread to estimate: its std is reported as 0.0 rather than NaN.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        raise UserError("no values to average")
    std = float(np.std(values, ddof=1)) if values.size > 1 else 0.0
    return float(np.mean(values)), std


def majority_baseline(train_labels, test_labels) -> dict:
    """Scores of always predicting the most frequent train label (the smaller label on a tie).

    Returns ``{"accuracy": float, "f1": float}`` on ``test_labels``; F1 is of class 1.
    """
    train_labels = np.asarray(train_labels).ravel()
    test_labels = np.asarray(test_labels).ravel()
    if train_labels.size == 0:
        raise UserError("no train labels to find the majority class in")
    values, counts = np.unique(train_labels, return_counts=True)
    majority = values[np.argmax(counts)]  # np.unique sorts, argmax takes the first: smaller wins
    predictions = np.full(test_labels.shape, majority)
    return {"accuracy": accuracy(test_labels, predictions),
            "f1": f1_score(test_labels, predictions)}
