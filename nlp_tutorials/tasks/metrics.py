"""GLUE's metrics, in plain numpy (no TensorFlow).

MRPC and QQP are reported as accuracy and F1 of the positive class (label 1), CoLA as the
Matthews correlation, STS-B as the Pearson and Spearman correlations of predicted and gold
scores, the other GLUE tasks as accuracy (Wang et al., 2018). Also mean ± std over seeds; the
majority-class baseline is :func:`nlp_tutorials.analysis.sentence_baselines.fit_majority`.
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


def matthews_correlation(labels, predictions) -> float:
    """The Matthews correlation coefficient of class labels (CoLA's metric), in [-1, 1].

    With ``C`` the confusion matrix (rows gold, columns predicted), ``t`` its row sums, ``p``
    its column sums, ``c`` the right predictions and ``s`` all of them:

        MCC = (c·s - p·t) / sqrt((s² - p·p) · (s² - t·t))

    which for two classes is (TP·TN - FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)), and for more
    Gorodkin's (2004) generalisation, as scikit-learn computes it. Unlike accuracy it is 0 for
    any constant guess however skewed the classes. Convention: when every prediction (or every
    label) is one class the denominator is 0; we return 0.0 there, as scikit-learn does.
    """
    labels, predictions = _as_label_arrays(labels, predictions)
    classes, codes = np.unique(np.concatenate([labels, predictions]), return_inverse=True)
    gold, predicted = codes[:labels.size], codes[labels.size:]
    confusion = np.zeros((classes.size, classes.size), np.float64)
    np.add.at(confusion, (gold, predicted), 1.0)
    true_counts, predicted_counts = confusion.sum(axis=1), confusion.sum(axis=0)
    right, total = np.trace(confusion), float(labels.size)
    covariance = right * total - predicted_counts @ true_counts
    spread = ((total ** 2 - predicted_counts @ predicted_counts)
              * (total ** 2 - true_counts @ true_counts))
    return float(covariance / np.sqrt(spread)) if spread > 0 else 0.0


def pearson_correlation(scores, predicted_scores) -> float:
    """Pearson's r of gold and predicted scores (STS-B's first metric), in [-1, 1]: their
    covariance over the product of their standard deviations.

    Convention: when either side is constant (a model that predicts one score for every
    pair) r is 0/0; scipy's ``pearsonr`` returns nan there with a warning, we return 0.0 (no
    linear relation can be seen), so that choosing the best epoch still compares numbers.
    """
    scores, predicted_scores = _as_label_arrays(scores, predicted_scores)
    gold = scores.astype(np.float64) - scores.mean(dtype=np.float64)
    predicted = predicted_scores.astype(np.float64) - predicted_scores.mean(dtype=np.float64)
    spread = np.sqrt((gold @ gold) * (predicted @ predicted))
    return float(np.clip(gold @ predicted / spread, -1.0, 1.0)) if spread > 0 else 0.0


def average_ranks(values) -> np.ndarray:
    """Ranks from 1 of ``values`` [n] (float64 [n]); tied values share the mean of the ranks
    they span: [10, 20, 20, 30] -> [1, 2.5, 2.5, 4] (scipy's ``rankdata``, "average")."""
    values = np.asarray(values).ravel()
    order = np.argsort(values, kind="stable")
    in_order = values[order]
    starts_run = np.concatenate([[True], in_order[1:] != in_order[:-1]])  # [n]
    run = np.cumsum(starts_run) - 1  # each sorted value's run of equal values
    first = np.flatnonzero(starts_run)  # 0-based position where each run starts
    last = np.append(first[1:], values.size) - 1  # ... and ends
    ranks = np.empty(values.size, np.float64)
    ranks[order] = (first + last)[run] / 2 + 1
    return ranks


def spearman_correlation(scores, predicted_scores) -> float:
    """Spearman's rho (STS-B's second metric): Pearson's r of the two sides' ranks, tied
    values taking their average rank (as scipy's ``spearmanr``). A constant side gives 0.0,
    as in :func:`pearson_correlation`."""
    scores, predicted_scores = _as_label_arrays(scores, predicted_scores)
    return pearson_correlation(average_ranks(scores), average_ranks(predicted_scores))


def mean_std(values) -> tuple[float, float]:
    """(mean, sample standard deviation with ddof=1) of e.g. one score per seed.

    A single value has no spread to estimate: its std is reported as 0.0 rather than NaN.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size == 0:
        raise UserError("no values to average")
    std = float(np.std(values, ddof=1)) if values.size > 1 else 0.0
    return float(np.mean(values)), std
