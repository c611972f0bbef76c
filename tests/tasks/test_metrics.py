import subprocess
import sys

import numpy as np
import pytest

from nlp_tutorials.analysis.sentence_baselines import fit_majority
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import get_task
from nlp_tutorials.tasks.metrics import accuracy, f1_score, mean_std
from nlp_tutorials.tasks.glue import TextExample


def test_hand_computed_case():
    labels, predictions = [1, 0, 1, 1], [1, 1, 0, 1]
    # Right at positions 0 and 3: accuracy 2/4. TP=2 (0, 3), FP=1 (1), FN=1 (2):
    # precision 2/3, recall 2/3, so F1 = 2/3.
    assert accuracy(labels, predictions) == 0.5
    assert f1_score(labels, predictions) == pytest.approx(2 / 3)


def test_f1_of_the_other_class():
    labels, predictions = [1, 0, 1, 1, 0], [1, 0, 0, 1, 1]
    # Class 0: TP=1 (1), FP=1 (2), FN=1 (4) -> precision 1/2, recall 1/2, F1 1/2.
    assert f1_score(labels, predictions, positive=0) == pytest.approx(0.5)
    # Class 1: TP=2, FP=1, FN=1 -> F1 = 4/6.
    assert f1_score(labels, predictions) == pytest.approx(4 / 6)


def test_precision_and_recall_differ():
    labels, predictions = [1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0]
    # precision 1/1, recall 1/4: F1 = 2 * 1 * 0.25 / 1.25 = 0.4.
    assert f1_score(labels, predictions) == pytest.approx(0.4)
    assert accuracy(labels, predictions) == pytest.approx(3 / 6)


def test_perfect_and_all_wrong():
    assert accuracy([0, 1, 1], [0, 1, 1]) == 1.0
    assert f1_score([0, 1, 1], [0, 1, 1]) == 1.0
    assert accuracy([0, 1, 1], [1, 0, 0]) == 0.0
    assert f1_score([0, 1, 1], [1, 0, 0]) == 0.0


def test_f1_without_any_positive_is_zero():
    # No true and no predicted positives: 0/0, reported as 0.0 by convention.
    assert f1_score([0, 0, 0], [0, 0, 0]) == 0.0
    # True positives exist but none predicted: recall 0, so F1 0.
    assert f1_score([1, 0], [0, 0]) == 0.0


def test_accepts_numpy_arrays_and_returns_floats():
    labels = np.array([1, 0, 1, 1], dtype=np.int32)
    predictions = np.array([1, 1, 0, 1], dtype=np.int64)
    assert type(accuracy(labels, predictions)) is float
    assert type(f1_score(labels, predictions)) is float


@pytest.mark.parametrize("labels, predictions", [([1, 0], [1]), ([], [])])
def test_bad_lengths_are_user_errors(labels, predictions):
    with pytest.raises(UserError):
        accuracy(labels, predictions)
    with pytest.raises(UserError):
        f1_score(labels, predictions)


def test_mean_std():
    # mean 2; squared deviations 1, 0, 1 -> sample variance 2 / (3 - 1) = 1.
    assert mean_std([1.0, 2.0, 3.0]) == (2.0, 1.0)
    mean, std = mean_std([0.70, 0.74])
    assert mean == pytest.approx(0.72)
    assert std == pytest.approx(0.02 * np.sqrt(2))  # deviations ±0.02, variance 0.0008 / 1
    assert mean_std([0.5]) == (0.5, 0.0)
    with pytest.raises(UserError):
        mean_std([])


def majority_scores(train, scored) -> dict:
    """MRPC's scores of always answering the most frequent label of ``train``."""
    task = get_task("mrpc")
    predict, _ = fit_majority(task, train)
    return task.score(scored, predict(scored))


def pairs(labels) -> list:
    return [TextExample("a", "b", str(label)) for label in labels]


def test_majority_baseline_hand_computed():
    # Train majority is 0: predicting all 0 on [1, 0, 0] is right twice, F1 of class 1 is 0.
    assert majority_scores(pairs([0, 0, 1]), pairs([1, 0, 0])) == {
        "accuracy": pytest.approx(2 / 3), "f1": 0.0}
    # Majority 1: TP=2, FP=1, FN=0 -> F1 = 4/5.
    scores = majority_scores(pairs([1, 1, 0]), pairs([1, 0, 1]))
    assert scores == {"accuracy": pytest.approx(2 / 3), "f1": pytest.approx(4 / 5)}
    # A tie goes to the smaller label.
    assert majority_scores(pairs([1, 0]), pairs([0]))["accuracy"] == 1.0


def test_mrpc_majority_baseline():
    task = get_task("mrpc")
    scores = majority_scores(task.examples("train"), task.examples("test"))
    # 2,753 of 4,076 train pairs are paraphrases, so "paraphrase" is predicted for all 1,725
    # test pairs, of which 1,147 are paraphrases: TP = 1147, FP = 578, FN = 0.
    assert scores["accuracy"] == pytest.approx(1147 / 1725)
    assert scores["f1"] == pytest.approx(2 * 1147 / (2 * 1147 + 578))
    assert round(100 * scores["accuracy"], 2) == 66.49
    assert round(100 * scores["f1"], 2) == 79.87


def test_import_does_not_load_tensorflow():
    code = ("import sys, nlp_tutorials.tasks.metrics, nlp_tutorials.analysis.baseline; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
