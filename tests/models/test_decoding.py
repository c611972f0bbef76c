"""Cached decoding equals re-running the whole prefix; greedy, top-k and temperature choosers."""
import numpy as np
import pytest

from nlp_tutorials.models.decoding import decode, greedy, gpt_stepper, sampler, seq2seq_stepper
from nlp_tutorials.models.masks import cached_causal_mask
from support import TINY_MODEL, tiny_model

VOCAB = TINY_MODEL["vocab_size"]


def test_cached_causal_mask_continues_the_full_one():
    mask = cached_causal_mask(3, 2).numpy()[0, 0]  # queries at positions 3 and 4
    assert mask.shape == (2, 5)
    np.testing.assert_array_equal(mask == 0, [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]])


@pytest.mark.parametrize("sample", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_gpt_cached_decoding_matches_rerunning_the_prefix(sample):
    model = tiny_model("gpt", seed=1, max_position_embeddings=40)
    prompt = np.random.default_rng(0).integers(5, VOCAB, (2, 6)).astype("int32")
    runs = []
    for cached in (True, False):
        # Sampling runs eagerly: tracing costs more than 20 tokens of a tiny model.
        step, state = gpt_stepper(model, 2, cached=cached, compiled=not sample)
        choose = sampler(temperature=1.5, top_k=10, seed=3) if sample else greedy
        runs.append(decode(step, state, prompt, 20, choose))
    (ids, logits), (ref_ids, ref_logits) = runs
    assert ids.shape == (2, 20) and logits.shape == (2, 20, VOCAB)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5)


@pytest.mark.slow
def test_seq2seq_cached_decoding_matches_rerunning_the_prefix():
    model = tiny_model("transformer", seed=4, max_position_embeddings=40)
    src = np.random.default_rng(1).integers(5, VOCAB, (3, 7)).astype("int32")
    src[2, 5:] = 0  # padding in the source is masked in both ways of decoding
    start = np.full((3, 1), 2, "int32")
    (ids, logits), (ref_ids, ref_logits) = (
        decode(*seq2seq_stepper(model, src, cached=cached, compiled=False), start, 12)
        for cached in (True, False))
    # A re-run prefix masks a generated [PAD] (id 0) as padding, the cache does not: compare
    # on a model that generates none (an untrained one may; a trained one stops first).
    assert (ids != 0).all()
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5)


def test_decoding_stops_each_row_at_the_stop_token():
    # A fake model: row 0 always proposes token 7, row 1 proposes 4, 5, 6, ... (7 at step 3).
    def step(ids, count):
        logits = np.zeros((2, 1, 10), "float32")
        logits[0, 0, 7] = 1
        logits[1, 0, 4 + count] = 1
        return _Tensor(logits), count + 1

    ids, logits = decode(step, 0, np.ones((2, 1), "int32"), 10, stop_id=7)
    np.testing.assert_array_equal(ids, [[7, 0, 0, 0], [4, 5, 6, 7]])
    assert logits.shape == (2, 4, 10)
    ids, _ = decode(step, 0, np.ones((2, 1), "int32"), 2, stop_id=7)
    np.testing.assert_array_equal(ids, [[7, 0], [4, 5]])


class _Tensor(np.ndarray):
    """numpy array with TensorFlow's ``.numpy()``, for the fake model above."""

    def __new__(cls, array):
        return np.asarray(array).view(cls)

    def numpy(self):
        return np.asarray(self)


def test_sampler_is_seeded_and_respects_top_k_and_temperature():
    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]] * 2000))
    draws = sampler(top_k=2, seed=0)(logits)
    assert set(draws) == {0, 1}
    assert abs((draws == 0).mean() - 0.5 / 0.8) < 0.05  # renormalised over the top 2
    np.testing.assert_array_equal(draws, sampler(top_k=2, seed=0)(logits))
    cold = sampler(temperature=0.05, seed=1)(logits)
    assert (cold == 0).mean() > 0.99  # a low temperature approaches greedy
    hot = sampler(temperature=100.0, seed=1)(logits)
    assert abs((hot == 3).mean() - 0.25) < 0.05  # a high one approaches uniform
    np.testing.assert_array_equal(greedy(logits[:1]), [0])
