"""Every number taken from an attention pickle or a head_importance.json is checked: real
numbers, finite, attention weights in [0, 1]; the error names the file, the array and where the
bad value sits, and nothing is drawn or written."""
import json
import pickle
import warnings

import numpy as np
import pytest

from nlp_tutorials.analysis import explorer, visual
from nlp_tutorials.cli import main
from nlp_tutorials.system.errors import UserError

LAYERS, HEADS, STEP, SIZE = 2, 3, 5, 4


def softmax_rows(rng, shape):
    scores = rng.normal(size=shape)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)).astype(np.float32)


def bert_pickle_data(seed: int = 0) -> dict:
    """The contents of a BERT attention pickle: 2 examples, 2 layers, 3 heads, 5 tokens."""
    rng = np.random.default_rng(seed)
    vectors = {kind: {"encoder": [rng.normal(size=(2, HEADS, STEP, SIZE)).astype(np.float32)
                                  for _ in range(LAYERS)]} for kind in ("queries", "keys")}
    return {"model": "bert", "src": [["[CLS]", "a", "b", "[SEP]", "[PAD]"]] * 2,
            "attentions": {"encoder": [softmax_rows(rng, (2, HEADS, STEP, STEP))
                                       for _ in range(LAYERS)]},
            "segments": [[0, 0, 0, 0, 0], [0, 0, 1, 1, 1]], **vectors}


def pickled(tmp_path, change=None, name="attention.pkl"):
    data = bert_pickle_data()
    if change:
        change(data)
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data))
    return path


def set_value(kind, layer, index, value):
    def change(data):
        data[kind]["encoder"][layer][index] = value
    return change


def refusal(path) -> str:
    with pytest.raises(UserError) as info:
        visual.load_attention_pickle(path)
    assert "\n" not in str(info.value)
    return str(info.value)


WEIGHTS = "expected finite attention weights in [0, 1]"


@pytest.mark.parametrize("value, shown", [(np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "-inf"),
                                          (1.5, "1.5"), (-0.25, "-0.25")])
def test_an_attention_weight_that_is_no_weight_is_named_with_its_place(tmp_path, value, shown):
    path = pickled(tmp_path, set_value("attentions", 1, (1, 2, 3, 0), value))
    assert refusal(path) == (f"{path}: attentions['encoder'] layer 1 holds {shown} at "
                             f"[example 1, head 2, query 3, key 0]; {WEIGHTS}")


def test_rounding_past_one_is_not_refused(tmp_path):
    path = pickled(tmp_path, set_value("attentions", 0, (0, 0, 0, 0), np.float32(1 + 1e-6)))
    assert visual.load_attention_pickle(path)["attentions"]["encoder"][0][0, 0, 0, 0] > 1


def test_attention_that_is_not_real_numbers_is_refused(tmp_path):
    def change(data):
        data["attentions"]["encoder"][0] = np.ones((2, HEADS, STEP, STEP), complex)
    path = pickled(tmp_path, change)
    assert refusal(path) == (f"{path}: attentions['encoder'] layer 0 is not a numeric array (it "
                             f"holds complex numbers); {WEIGHTS}")


def test_a_query_that_is_not_finite_is_named(tmp_path):
    path = pickled(tmp_path, set_value("queries", 1, (0, 1, 2, 3), np.nan))
    assert refusal(path) == (f"{path}: queries['encoder'] layer 1 holds NaN at [example 0, "
                             f"head 1, position 2, unit 3]; expected [2, 3, 5, head_size] "
                             f"finite numbers")


def test_keys_that_are_text_are_one_line(tmp_path):
    def change(data):
        data["keys"]["encoder"][0] = "oops"
    path = pickled(tmp_path, change)
    assert refusal(path) == (f"{path}: keys['encoder'] layer 0 is not a numeric array (it holds "
                             f"text); expected [2, 3, 5, head_size] finite numbers")


def test_layers_of_different_head_sizes_are_refused(tmp_path):
    def change(data):
        for kind in ("queries", "keys"):
            data[kind]["encoder"][1] = np.zeros((2, HEADS, STEP, SIZE + 2), np.float32)
    path = pickled(tmp_path, change)
    assert refusal(path) == (f"{path}: queries and keys of 'encoder' have head sizes [4, 6]; "
                             f"expected one head_size for every layer")


def test_a_negative_segment_is_refused(tmp_path):
    def change(data):
        data["segments"][1][3] = -1
    path = pickled(tmp_path, change)
    assert refusal(path) == (f"{path}: 'segments' holds -1 at [example 1, position 3]; expected "
                             f"segment ids >= 0, one per source token")


def test_explore_refuses_a_nan_pickle_without_writing_or_warning(tmp_path, capsys):
    path = pickled(tmp_path, set_value("attentions", 0, (0, 1, 2, 0), np.nan))
    output = tmp_path / "page.html"
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # numpy's "invalid value in cast"
        status = main("bert", ["explore", "--input", str(path), "--output", str(output)])
    error = capsys.readouterr().err
    assert status == 2 and error == (f"python -m nlp_tutorials.bert explore: error: {path}: "
                                     f"attentions['encoder'] layer 0 holds NaN at [example 0, "
                                     f"head 1, query 2, key 0]; {WEIGHTS}\n")
    assert not output.exists()


def test_plot_refuses_an_out_of_range_pickle_without_drawing(tmp_path, capsys):
    path = pickled(tmp_path, set_value("attentions", 1, (0, 0, 4, 4), 5.0))
    pictures = tmp_path / "pictures"
    assert main("bert", ["plot", "--input", str(path), "--output-dir", str(pictures)]) == 2
    assert "layer 1 holds 5 at [example 0, head 0, query 4, key 4]" in capsys.readouterr().err
    assert not pictures.exists()


# --- head_importance.json ---

IMPORTANCE = (f"expected [{LAYERS}, {HEADS}] finite numbers >= 0 (layers x heads of this "
              f"model), as `bert heads` writes")


def importance_file(tmp_path, values) -> str:
    path = tmp_path / explorer.IMPORTANCE_FILE
    path.write_text(json.dumps(values))
    return path


@pytest.mark.parametrize("importance, holds", [
    ([[0.1, 0.2, 0.3], [float("nan"), 0.5, 0.5]], "holds NaN at [layer 1, head 0]"),
    ([[0.1, 0.2, float("inf")], [0.4, 0.5, 0.5]], "holds inf at [layer 0, head 2]"),
    ([[0.1, 0.2, -0.5], [0.4, 0.5, 0.5]], "holds -0.5 at [layer 0, head 2]"),
    ([["0.1", "0.2", "0.3"], ["0.4", "0.5", "0.5"]], "is not a numeric array (it holds text)"),
    ([[True, False, True], [True, True, True]], "is not a numeric array (it holds booleans)"),
    ([[0.1, 0.2, 0.3], [0.4]], "is not a numeric array (it holds nulls, ragged lists or "
                               "objects)"),
    ([[0.1, 0.2], [0.3, 0.4]], "holds shape [2, 2]"),
])
def test_head_importance_says_what_is_wrong(tmp_path, importance, holds):
    path = importance_file(tmp_path, {"importance": importance})
    with pytest.raises(UserError) as info:
        explorer.read_importance(path, LAYERS, HEADS)
    assert str(info.value) == f"{path}: 'importance' {holds}; {IMPORTANCE}"


def test_head_importance_without_the_field_is_named(tmp_path):
    path = importance_file(tmp_path, {"entropy": [[1.0] * HEADS] * LAYERS})
    with pytest.raises(UserError) as info:
        explorer.read_importance(path, LAYERS, HEADS)
    assert str(info.value) == f"{path}: no importance; {IMPORTANCE}"


def test_explore_refuses_nan_importance_beside_the_pickle(tmp_path, capsys):
    source = pickled(tmp_path)
    path = importance_file(tmp_path, {"importance": [[0.1, 0.2, 0.3], [0.4, None, 0.5]]})
    output = tmp_path / "page.html"
    assert main("bert", ["explore", "--input", str(source), "--output", str(output)]) == 2
    assert capsys.readouterr().err == (f"python -m nlp_tutorials.bert explore: error: {path}: "
                                       f"'importance' is not a numeric array (it holds nulls, "
                                       f"ragged lists or objects); {IMPORTANCE}\n")
    assert not output.exists()


def test_good_importance_reaches_the_page_unchanged(tmp_path):
    values = np.random.default_rng(1).random((LAYERS, HEADS))
    path = importance_file(tmp_path, {"importance": values.tolist()})
    assert explorer.read_importance(path, LAYERS, HEADS) == values.tolist()
