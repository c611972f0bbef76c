import subprocess
import sys

import numpy as np
import pytest

from nlp_tutorials.analysis.baseline import (
    feature_names, fit_overlap_baseline, numbers, overlap_features, pair_features, words)
from nlp_tutorials.analysis.sentence_baselines import fit_mrpc_overlap
from nlp_tutorials.baseline import main
from nlp_tutorials.tasks import get_task
from nlp_tutorials.tasks.glue import TextExample
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.system.errors import UserError


def features(s1, s2) -> dict:
    return dict(zip(feature_names(), overlap_features(s1, s2)))


@pytest.fixture(scope="module")
def train():
    return load_mrpc("train")


@pytest.fixture(scope="module")
def test():
    return load_mrpc("test")


def test_feature_names_match_the_vector():
    names = feature_names()
    assert len(names) == len(set(names)) == overlap_features("a b", "c").shape[0]
    assert overlap_features("a b", "c").dtype == np.float64


def test_words_lower_case_drop_punctuation_keep_numbers():
    assert words("He paid $1,520.15, in 2003.") == ["he", "paid", "1,520.15", "in", "2003"]
    assert numbers("Up 12th-largest, 3km and 2.5 in 1970s") == {"12", "3", "2.5", "1970"}


def test_identical_sentences():
    f = features("The cat sat on the mat in 2003.", "the cat sat on the mat in 2003")
    for n in (1, 2, 3):
        assert f[f"{n}gram_overlap_min"] == f[f"{n}gram_overlap_max"] == 1.0
    assert f["length_diff"] == f["length_diff_relative"] == 0.0
    assert f["numbers_equal"] == f["numbers_shared"] == 1.0


def test_disjoint_sentences():
    f = features("Shares fell 5 percent", "A dog barked 7 times")
    for n in (1, 2, 3):
        assert f[f"{n}gram_overlap_min"] == f[f"{n}gram_overlap_max"] == 0.0
    assert f["length_diff"] == 1.0                 # 4 words against 5
    assert f["length_diff_relative"] == 1 / 5
    assert f["numbers_equal"] == f["numbers_shared"] == 0.0


def test_partial_overlap_hand_computed():
    # A = {the, cat, sat}, B = {the, cat, ran, away}: 2 shared -> 2/3 and 2/4.
    # Bigrams A = {the cat, cat sat}, B = {the cat, cat ran, ran away}: 1 shared -> 1/2, 1/3.
    # Trigrams A = {the cat sat}, B = {the cat ran, cat ran away}: none shared.
    f = features("The cat sat.", "The cat ran away.")
    assert f["1gram_overlap_min"] == pytest.approx(2 / 4)
    assert f["1gram_overlap_max"] == pytest.approx(2 / 3)
    assert f["2gram_overlap_min"] == pytest.approx(1 / 3)
    assert f["2gram_overlap_max"] == pytest.approx(1 / 2)
    assert f["3gram_overlap_min"] == f["3gram_overlap_max"] == 0.0
    assert f["length_diff"] == 1.0
    assert f["length_diff_relative"] == pytest.approx(1 / 4)


def test_number_mismatch_is_detected():
    # Same words, one number differs: {2, 19} against {2, 20} share 1 of 3.
    f = features("Profit rose 19 percent in 2 years", "Profit rose 20 percent in 2 years")
    assert f["numbers_equal"] == 0.0
    assert f["numbers_shared"] == pytest.approx(1 / 3)
    # No numbers on either side: nothing disagrees.
    f = features("Profit rose", "Profit fell")
    assert f["numbers_equal"] == f["numbers_shared"] == 1.0


def test_features_are_symmetric_and_handle_empty_text():
    s1, s2 = "Stocks rose 3 percent on Monday.", "On Monday, stocks climbed 3.5 percent."
    np.testing.assert_array_equal(overlap_features(s1, s2), overlap_features(s2, s1))
    f = features("", "...")
    assert all(np.isfinite(v) for v in f.values())
    assert f["1gram_overlap_max"] == 0.0


def test_baseline_on_mrpc(train, test):
    task = get_task("mrpc")
    predict, _ = fit_mrpc_overlap(task, train)  # as `python -m nlp_tutorials.baseline` fits it
    scores = task.score(test, predict(test))
    # Reference for such a baseline: about 74% / 82; the majority class scores 66.5% / 79.9.
    assert scores["accuracy"] >= 0.72
    assert scores["f1"] >= 0.80


def test_baseline_is_deterministic(train, test):
    # Two fits, even with different seeds, give the same probabilities to the last bit.
    X = pair_features(test)
    labels = get_task("mrpc").label_array(train)
    first = fit_overlap_baseline(train, labels, seed=0).predict_proba(X)
    second = fit_overlap_baseline(train, labels, seed=1).predict_proba(X)
    np.testing.assert_array_equal(first, second)


def test_fit_needs_both_labels():
    with pytest.raises(UserError):
        fit_overlap_baseline([], [])
    with pytest.raises(UserError):
        fit_overlap_baseline([TextExample("a b", "a b", "1"), TextExample("c", "d", "1")], [1, 1])


@pytest.mark.slow
def test_main_prints_the_three_baselines(capsys):
    """Also chooses the bag of words' C by cross-validation on all of MRPC train (seconds).
    `python -m nlp_tutorials.baseline` reaches this main: test_runs_as_a_module."""
    assert main([]) == 0
    scored = " on test (msr_paraphrase_test.txt, 1,725 examples)"
    assert capsys.readouterr().out.splitlines() == [
        "majority: accuracy 66.5% F1 79.9" + scored,
        "word overlap: accuracy 74.0% F1 81.7" + scored,
        "bag of words (C 0.1): accuracy 70.6% F1 80.2" + scored]


def test_main_reports_a_missing_data_dir(tmp_path, capsys):
    assert main(["--data-dir", str(tmp_path / "nowhere")]) == 2
    assert "error:" in capsys.readouterr().err


def test_runs_as_a_module(tmp_path):
    # `python -m` reaches main() and its exit status; the missing folder keeps this fast.
    result = subprocess.run(
        [sys.executable, "-m", "nlp_tutorials.baseline", "--data-dir", str(tmp_path / "nowhere")],
        capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "MRPC data folder not found" in result.stderr
