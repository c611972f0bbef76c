"""Model folders written by nlp_tutorials 0.1.0 still load, into the same numbers.

``tests/fixtures/legacy_0_1/`` holds what 0.1.0's command lines wrote, and ``expected.json``
what 0.1.0 computed from them (its README.md gives the commands and the snippet). Each test
makes the snippet's calls under today's module names and compares: floats within 1e-5 (the
file keeps 6 decimals), ids, tokens, shapes and translations exactly. The folders are copied
to a temporary folder first, so nothing today's code might write lands in the fixtures.
"""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.analysis.visual import load_attention_pickle
from nlp_tutorials.tasks import dates
from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc
from nlp_tutorials.training.checkpoints import (
    newest_intact_checkpoint,
    restore_checkpoint,
    restore_model,
    training_checkpoint,
)
from nlp_tutorials.finetuned.folders import load_finetuned
from nlp_tutorials.training.seq2seq import load, translate

LEGACY = Path(__file__).parent / "fixtures" / "legacy_0_1"
EXPECTED = json.loads((LEGACY / "expected.json").read_text())
TOLERANCE = 1e-5


@pytest.fixture
def legacy(tmp_path) -> Path:
    """A copy of the 0.1.0 fixtures, so loading cannot change the originals."""
    return Path(shutil.copytree(LEGACY, tmp_path / "legacy_0_1"))


def first8(values) -> np.ndarray:
    return np.asarray(values, np.float64).ravel()[:8]


def assert_close(actual, expected):
    np.testing.assert_allclose(np.asarray(actual, np.float64), np.asarray(expected, np.float64),
                               rtol=0, atol=TOLERANCE)


def pretrained_outputs(model, tokenizer) -> dict:
    """The 0.1.0 snippet's figures for BERT or GPT on the first MRPC test pair."""
    arrays = MrpcTask().encode(tokenizer, load_mrpc("test")[:1],
                               model.config.max_position_embeddings)
    out = model.encode(arrays["input_ids"], arrays["token_type_ids"])
    lm_logits, nsp_logits = model.pretraining_heads(out["sequence_output"], out["pooled_output"])
    return {"input_ids": arrays["input_ids"][0].tolist(),
            "token_type_ids": arrays["token_type_ids"][0].tolist(),
            "sequence_output_token0_first8": first8(out["sequence_output"][0, 0]),
            "pooled_output_first8": first8(out["pooled_output"][0]),
            "lm_logits_token0_first8": first8(lm_logits[0, 0]),
            "nsp_logits": np.asarray(nsp_logits[0])}


def assert_pretrained_outputs(actual: dict, expected: dict):
    assert actual["input_ids"] == expected["input_ids"]
    assert actual["token_type_ids"] == expected["token_type_ids"]
    for key in ("sequence_output_token0_first8", "pooled_output_first8",
                "lm_logits_token0_first8", "nsp_logits"):
        assert_close(actual[key], expected[key])


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_pretrained_folder_restores_the_newest_checkpoint_into_the_same_outputs(legacy, name):
    folder = legacy / f"{name}_pretrain"
    prefix, step = newest_intact_checkpoint(folder, report=pytest.fail)
    assert (Path(prefix).name, step) == ("ckpt-4", 4)

    model, tokenizer = restore_model(folder, name, report=pytest.fail)
    assert model.config.model_type == name
    expected = EXPECTED[f"{name}_pretrain"]
    assert_pretrained_outputs(pretrained_outputs(model, tokenizer), expected)

    # ckpt-2 differs from ckpt-4 by about 1e-3: the comparison above tells them apart.
    restore_checkpoint(training_checkpoint(model), str(folder / "checkpoints" / "ckpt-2"),
                       partial=True)
    older = pretrained_outputs(model, tokenizer)["sequence_output_token0_first8"]
    assert np.abs(older - expected["sequence_output_token0_first8"]).max() > 10 * TOLERANCE


def test_finetuned_folder_gives_the_same_logits_and_probabilities(legacy):
    expected = EXPECTED["bert_finetuned"]
    head, tokenizer, _ = load_finetuned(legacy / "bert_finetuned")
    arrays = MrpcTask().encode(tokenizer, load_mrpc("test")[:2],
                          head.backbone.config.max_position_embeddings)
    assert arrays["input_ids"].tolist() == expected["input_ids"]
    assert arrays["token_type_ids"].tolist() == expected["token_type_ids"]

    inputs = {k: arrays[k] for k in ("input_ids", "token_type_ids")}
    logits = np.asarray(head(inputs, training=False), np.float64)  # [2, 2]
    assert_close(logits, expected["logits"])
    # P(paraphrase) is the softmax's second column, computed here from the logits.
    exponentials = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities = exponentials[:, 1] / exponentials.sum(axis=1)
    assert_close(probabilities, expected["paraphrase_probabilities"])

    backbone = head.backbone.encode(arrays["input_ids"], arrays["token_type_ids"])
    assert_close(first8(backbone["sequence_output"][0, 0]),
                 expected["backbone_sequence_output_token0_first8"])


def test_attention_pickle_reads_into_the_same_arrays(legacy):
    expected = EXPECTED["bert_attention.pkl"]
    data = load_attention_pickle(legacy / "bert_attention.pkl", "bert")
    first = data["attentions"]["encoder"][0]
    assert sorted(data) == expected["keys"]
    assert data["model"] == expected["model"]
    assert len(data["attentions"]["encoder"]) == expected["layers"]
    assert list(first.shape) == expected["first_attention_shape"]
    assert list(data["src"][0]) == expected["src0"]
    assert_close(np.asarray(first[0, 0, 0]).ravel(), expected["first_attention_row"])


def test_transformer_folder_translates_the_same_dates(legacy):
    expected = EXPECTED["transformer"]
    model = load(legacy / "transformer")
    assert translate(model, expected["dates"]) == expected["translations"]

    sources = dates.encode_sources([dates.parse_source(t) for t in expected["dates"]])
    start = np.full((len(expected["dates"]), 1), dates.IDS[dates.BOS], np.int32)
    logits = model({"src_ids": sources, "tgt_ids": start}, training=False)["logits"]
    assert_close([first8(row[0]) for row in logits], expected["first_step_logits_first8"])
