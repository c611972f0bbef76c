"""The maths of Transformer, GPT and BERT, checked against numpy and against invariants."""
import functools

import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.bert import BERT
from nlp_tutorials.gpt import GPT
from nlp_tutorials.models.masks import MASK_VALUE, causal_mask, padding_mask
from nlp_tutorials.models.layers import MultiHeadAttention
from nlp_tutorials.models.transformer import Transformer
from support import TINY_MODEL, tiny_config, tiny_model

VOCAB = TINY_MODEL["vocab_size"]


@pytest.fixture(scope="module")
def gpt(tiny_gpt):
    return tiny_gpt  # only read here


@pytest.fixture(scope="module")
def bert():
    return tiny_model("bert", seed=2)


def random_ids(batch, step, seed=0, pad_from=None):
    ids = np.random.default_rng(seed).integers(5, VOCAB, (batch, step)).astype("int32")
    if pad_from is not None:
        ids[:, pad_from:] = 0
    return ids


def run(model, ids):
    outputs = model({"input_ids": ids, "token_type_ids": np.zeros_like(ids)}, training=False)
    return outputs["sequence_output"].numpy(), outputs


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_attention_matches_numpy():
    config = tiny_config("bert")
    layer = MultiHeadAttention(config)
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 5, 32)).astype("float32")
    memory = rng.normal(size=(2, 7, 32)).astype("float32")
    ids = np.array([[3] * 7, [3] * 4 + [0] * 3], "int32")
    output, probs, keys_values = layer(query, memory, padding_mask(ids), training=False)

    def project(x, dense):
        y = x @ dense.kernel.numpy() + dense.bias.numpy()
        return y.reshape(y.shape[0], y.shape[1], 4, 8).transpose(0, 2, 1, 3)

    q, k, v = project(query, layer.query), project(memory, layer.key), project(memory, layer.value)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    scores[1, :, :, 4:] = -np.inf  # padded keys of the second example
    expected_probs = softmax(scores)
    context = (expected_probs @ v).transpose(0, 2, 1, 3).reshape(2, 5, 32)
    expected = context @ layer.output_dense.kernel.numpy() + layer.output_dense.bias.numpy()
    np.testing.assert_allclose(probs.numpy(), expected_probs, atol=1e-6)
    np.testing.assert_allclose(output.numpy(), expected, atol=1e-5)
    np.testing.assert_allclose(keys_values["key"].numpy(), k, atol=1e-5)
    np.testing.assert_allclose(keys_values["value"].numpy(), v, atol=1e-5)


def test_masks_stay_finite_in_half_precision():
    ids = np.array([[4, 5, 0]], "int32")
    for mask in (padding_mask(ids), causal_mask(ids)):
        for dtype in (tf.float16, tf.bfloat16):
            half = tf.cast(mask, dtype)
            assert np.isfinite(tf.cast(half, tf.float32).numpy()).all()
            scores = tf.cast(tf.zeros([1, 1, 3, 3]), dtype) + half
            assert np.isfinite(tf.cast(tf.nn.softmax(scores), tf.float32).numpy()).all()
    expected = np.array([[0, MASK_VALUE, MASK_VALUE], [0, 0, MASK_VALUE], [0, 0, MASK_VALUE]])
    np.testing.assert_array_equal(causal_mask(ids).numpy()[0, 0], expected)


def test_gpt_is_causal(gpt):
    ids = random_ids(2, 10)
    base, _ = run(gpt, ids)
    for j in (0, 4, 9):
        changed = ids.copy()
        changed[:, j] = (changed[:, j] + 1 - 5) % (VOCAB - 5) + 5
        out, _ = run(gpt, changed)
        np.testing.assert_allclose(out[:, :j], base[:, :j], atol=1e-6)
        assert np.abs(out[:, j:] - base[:, j:]).max(axis=-1).min() > 1e-4


def test_bert_is_bidirectional(bert):
    ids = random_ids(2, 10)
    base, _ = run(bert, ids)
    changed = ids.copy()
    changed[:, 9] = (changed[:, 9] + 1 - 5) % (VOCAB - 5) + 5
    out, _ = run(bert, changed)
    assert np.abs(out[:, :9] - base[:, :9]).max(axis=-1).min() > 1e-4


@pytest.mark.parametrize("name", ["gpt", "bert"])
def test_padding_does_not_change_real_positions(name, request):
    model = request.getfixturevalue(name)
    ids = random_ids(3, 8)
    ids[1, 6:] = 0
    padded = np.concatenate([ids, np.zeros((3, 5), "int32")], axis=1)
    short_seq, short = run(model, ids)
    long_seq, long = run(model, padded)
    real = ids != 0
    np.testing.assert_allclose(long_seq[:, :8][real], short_seq[real], atol=1e-5)
    np.testing.assert_allclose(long["pooled_output"].numpy(), short["pooled_output"].numpy(),
                               atol=1e-5)


@pytest.mark.parametrize("name", ["gpt", "bert"])
def test_attention_mask_hides_tokens_like_truncation(name, request):
    """An explicit 1/0 attention_mask (HuggingFace's convention) hides keys the way cutting
    them off does, even where the hidden ids are not [PAD]."""
    model = request.getfixturevalue(name)
    ids = random_ids(2, 7, seed=5)
    attention_mask = np.ones_like(ids)
    attention_mask[:, 5:] = 0
    masked = model.encode(ids, np.zeros_like(ids), attention_mask)
    cut, _ = run(model, ids[:, :5])
    np.testing.assert_allclose(masked["sequence_output"].numpy()[:, :5], cut, atol=1e-5)
    assert len(masked["attentions"]) == 2
    assert masked["attentions"][0].shape == (2, 4, 7, 7)
    np.testing.assert_allclose(masked["attentions"][0].numpy()[..., 5:], 0.0, atol=1e-6)


@pytest.mark.parametrize("name", ["gpt", "bert"])
def test_encode_refuses_more_tokens_than_positions(name, request):
    from nlp_tutorials.system.errors import UserError

    model = request.getfixturevalue(name)
    ids = random_ids(1, 25)  # max_position_embeddings is 24
    with pytest.raises(UserError, match="input of 25 tokens .* max_position_embeddings=24"):
        model.encode(ids)


@pytest.mark.parametrize("name", ["gpt", "bert"])
def test_attention_rows_sum_to_one_and_skip_padding(name, request):
    model = request.getfixturevalue(name)
    ids = random_ids(2, 9, pad_from=6)
    outputs = model({"input_ids": ids, "token_type_ids": np.zeros_like(ids)}, training=False)
    layers = outputs["attentions"]["encoder"]
    assert len(layers) == 2
    for probs in layers:
        assert probs.shape == (2, 4, 9, 9) and probs.dtype == tf.float32
        probs = probs.numpy()
        np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-5)
        assert (probs[..., 6:] == 0).all()
        if name == "gpt":
            assert (np.triu(np.ones((9, 9)), 1)[None, None] * probs == 0).all()
        else:
            assert (probs[:, :, :6, :6] > 0).all()


def test_transformer_decoder_is_causal_and_encoder_is_not():
    keras.utils.set_random_seed(3)
    model = Transformer(tiny_config("transformer", target_vocab_size=30))
    src, tgt = random_ids(2, 7), random_ids(2, 6, seed=1) % 30
    base = model({"src_ids": src, "tgt_ids": tgt}, training=False)
    assert base["logits"].shape == (2, 6, 30)
    changed_tgt = tgt.copy()
    changed_tgt[:, 3] = (changed_tgt[:, 3] + 1) % 30
    out = model({"src_ids": src, "tgt_ids": changed_tgt}, training=False)["logits"].numpy()
    np.testing.assert_allclose(out[:, :3], base["logits"].numpy()[:, :3], atol=1e-5)
    changed_src = src.copy()
    changed_src[:, -1] = (changed_src[:, -1] + 1 - 5) % (VOCAB - 5) + 5
    out = model({"src_ids": changed_src, "tgt_ids": tgt}, training=False)["logits"].numpy()
    assert np.abs(out[:, 0] - base["logits"].numpy()[:, 0]).max() > 1e-5
    assert [p.shape for p in base["attentions"]["encoder_decoder"]] == [(2, 4, 6, 7)] * 2


def pretraining_batch(ids, seed=0):
    rng = np.random.default_rng(seed)
    positions = np.tile(np.array([1, 3, 5], "int32"), (len(ids), 1))
    masked = ids.copy()
    np.put_along_axis(masked, positions, 4, axis=1)
    return {"input_ids": masked, "token_type_ids": np.zeros_like(ids),
            "mlm_positions": positions, "mlm_ids": np.take_along_axis(ids, positions, 1),
            "mlm_weights": np.ones(positions.shape, "float32"),
            "nsp_labels": rng.integers(0, 2, len(ids)).astype("int32")}


@pytest.mark.slow  # 150 training steps each
@pytest.mark.parametrize("model_class", [GPT, BERT, Transformer])
def test_small_batch_is_overfitted(model_class):
    keras.utils.set_random_seed(4)
    model = model_class(tiny_config(model_class.__name__.lower()))
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    ids = random_ids(8, 10, seed=5, pad_from=8)
    if model_class is Transformer:
        batch = {"src_ids": ids, "tgt_ids": np.concatenate([np.full((8, 1), 2, "int32"), ids], 1)}
    else:
        batch = pretraining_batch(ids)
        if model_class is GPT:
            del batch["mlm_positions"], batch["mlm_ids"], batch["mlm_weights"]
    step = model.compiled_step(batch)
    first = float(step(batch)["loss"])
    for _ in range(150):
        last = float(step(batch)["loss"])
    assert last < first / 10
    assert step.experimental_get_tracing_count() == 1


def test_bert_step_ignores_unweighted_predictions(bert):
    """Padding rows of mlm_positions (weight 0) must not change the loss."""
    ids = random_ids(4, 10, seed=6)
    batch = pretraining_batch(ids)
    batch["mlm_weights"][:, 2] = 0.0
    other = {k: v.copy() for k, v in batch.items()}
    other["mlm_ids"][:, 2] = 7
    bert.compile(optimizer=keras.optimizers.SGD(0.0))
    loss = float(bert.step(batch)["mlm_loss"])
    assert float(bert.step(other)["mlm_loss"]) == pytest.approx(loss, rel=1e-6)
    expected = []
    out = bert({"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"]})
    chosen = np.take_along_axis(out["sequence_output"].numpy(),
                                batch["mlm_positions"][:, :2, None], axis=1)
    logits, _ = bert.pretraining_heads(chosen, out["pooled_output"])
    probs = softmax(logits.numpy().astype("float64"))
    labels = batch["mlm_ids"][:, :2]
    expected = -np.log(np.take_along_axis(probs, labels[..., None], -1)).mean()
    assert loss == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("name", ["gpt", "bert"])
def test_save_and_load_restore_identical_outputs(name, request, tmp_path):
    model = request.getfixturevalue(name)
    path = tmp_path / f"{name}.keras"
    model.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is type(model)
    ids = random_ids(2, 9, seed=7, pad_from=7)
    np.testing.assert_array_equal(run(loaded, ids)[0], run(model, ids)[0])


def test_lm_head_is_tied_to_word_embeddings(bert):
    names = [v.path for v in bert.trainable_variables]
    assert len(names) == len(set(names))
    assert not any("lm_head" in n and "embeddings" in n for n in names)
    x = np.random.default_rng(0).normal(size=(1, 2, 32)).astype("float32")
    head = bert.lm_head
    expected = (head.norm(head.transform(x)).numpy() @ bert.embeddings.word_embeddings.numpy().T
                + head.bias.numpy())
    np.testing.assert_allclose(bert.pretraining_heads(x, x[:, 0])[0].numpy(), expected, atol=1e-5)


@pytest.mark.parametrize("compiled", ["eager", pytest.param("graph", marks=pytest.mark.slow),
                                      pytest.param("xla", marks=pytest.mark.slow)])
def test_gathered_mlm_loss_equals_all_position_reference(bert, compiled):
    """Projecting only the chosen positions changes the cost, never the loss or gradients,
    eagerly, as a tf.function or XLA-compiled (the fast path ``train --jit`` takes)."""
    ids = random_ids(4, 10, seed=8, pad_from=9)
    batch = pretraining_batch(ids)
    batch["mlm_weights"][1, 2] = 0.0  # a padded prediction slot
    inputs = {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"]}

    def reference_loss():
        out = bert(inputs, training=False)
        logits, _ = bert.pretraining_heads(out["sequence_output"], out["pooled_output"])
        # Every position projected; a [batch, step] mask keeps the chosen ones.
        mask = np.zeros(ids.shape, "float32")
        labels = np.zeros(ids.shape, "int32")
        for row in range(len(ids)):
            for slot, position in enumerate(batch["mlm_positions"][row]):
                if batch["mlm_weights"][row, slot] > 0:
                    mask[row, position] = 1.0
                    labels[row, position] = batch["mlm_ids"][row, slot]
        per_token = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
        return tf.reduce_sum(per_token * mask) / mask.sum()

    def gathered_loss():
        return bert.step(batch, training=False)["mlm_loss"]

    variables = bert.trainable_variables

    def loss_and_gradients(loss_fn):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        return loss, [tf.convert_to_tensor(g) if g is not None else None
                      for g in tape.gradient(loss, variables)]

    ref_loss, ref_grads = loss_and_gradients(reference_loss)
    fast = functools.partial(loss_and_gradients, gathered_loss)
    if compiled != "eager":
        fast = tf.function(fast, jit_compile=compiled == "xla")
    loss, grads = fast()
    ref_loss, loss = float(ref_loss), float(loss)
    ref_grads = [g.numpy() if g is not None else None for g in ref_grads]
    grads = [g.numpy() if g is not None else None for g in grads]
    assert loss == pytest.approx(ref_loss, abs=1e-5)
    for name, expected, actual in zip([v.path for v in variables], ref_grads, grads):
        if expected is None:
            continue
        np.testing.assert_allclose(actual, expected, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("name", ["gpt", "bert"])
def test_fresh_weights_are_drawn_independently(name, request):
    # A Keras initialiser shared between layers draws the same values for each: query, key,
    # value and output would start equal, and positions would copy the first word rows.
    model = request.getfixturevalue(name)
    matrices = [w for w in model.weights if len(w.shape) == 2]
    values = {w.path: w.numpy() for w in matrices}
    assert len(values) > 10
    for first, a in values.items():
        assert a.std() > 0, first
        for second, b in values.items():
            rows, columns = min(a.shape[0], b.shape[0]), min(a.shape[1], b.shape[1])
            if first < second:
                assert not np.allclose(a[:rows, :columns], b[:rows, :columns]), (first, second)
