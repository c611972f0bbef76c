"""A pretrained folder's weights are numbers the model can use: floating point and finite."""
import shutil
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from nlp_tutorials.bert import BERT
from nlp_tutorials.system.errors import UserError

TINY_HF = Path(__file__).parents[1] / "fixtures" / "bert_tiny_hf"
WORDS = "bert.embeddings.word_embeddings.weight"
QUERY = "bert.encoder.layer.1.attention.self.query.bias"


def folder_with(tmp_path, edit) -> Path:
    folder = Path(shutil.copytree(TINY_HF, tmp_path / "bert"))
    tensors = load_file(folder / "model.safetensors")
    edit(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def refusal(folder) -> str:
    with pytest.raises(UserError) as info:
        BERT.from_pretrained(folder, printer=lambda *_: None)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_tensors_holding_nan_or_infinity_are_named_with_the_place(tmp_path):
    def edit(tensors):
        tensors[WORDS][3, 7] = np.nan
        tensors[QUERY][5] = -np.inf

    folder = folder_with(tmp_path, edit)
    assert refusal(folder) == (f"{folder}: tensors that are not finite floating-point numbers: "
                               f"{WORDS} (nan at [3, 7]), {QUERY} (-inf at [5])")


def test_tensors_of_integers_are_refused(tmp_path):
    def edit(tensors):
        tensors[QUERY] = tensors[QUERY].astype(np.int32)

    folder = folder_with(tmp_path, edit)
    assert refusal(folder) == (f"{folder}: tensors that are not finite floating-point numbers: "
                               f"{QUERY} (int32)")


def test_finite_weights_still_load(tmp_path):
    folder = folder_with(tmp_path, lambda tensors: None)
    model = BERT.from_pretrained(folder, printer=lambda *_: None)
    np.testing.assert_array_equal(np.asarray(model.embeddings.word_embeddings),
                                  load_file(folder / "model.safetensors")[WORDS])
