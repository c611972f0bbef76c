"""Keras' own loop, fit and evaluate, runs the same step() as the project's loops: one fit
step updates the weights as one step of training/loop.py's train_steps does, and reports the
loss computed here in numpy."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.bert import BERT
from nlp_tutorials.gpt import GPT
from nlp_tutorials.models.task_heads import SequenceClassifier
from nlp_tutorials.training.loop import train_steps
from support import TINY_MODEL, tiny_model

VOCAB = TINY_MODEL["vocab_size"]
BERT_METRICS = {"loss", "mlm_loss", "mlm_accuracy", "nsp_loss", "nsp_accuracy"}


def tiny(model_class):
    return tiny_model(model_class.__name__.lower(), seed=1, max_position_embeddings=16)


def pretraining_batches(count, batch=4, step=10, seed=0):
    """``count`` batch dicts as BERT's step() takes them: three masked positions per row."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(count):
        ids = rng.integers(5, VOCAB, (batch, step)).astype("int32")
        positions = np.tile(np.array([1, 4, 7], "int32"), (batch, 1))
        masked = ids.copy()
        np.put_along_axis(masked, positions, 4, axis=1)
        batches.append({"input_ids": masked, "token_type_ids": np.zeros_like(ids),
                        "mlm_positions": positions,
                        "mlm_ids": np.take_along_axis(ids, positions, 1),
                        "mlm_weights": np.ones(positions.shape, "float32"),
                        "nsp_labels": rng.integers(0, 2, batch).astype("int32")})
    return batches


def as_dataset(batches):
    return tf.data.Dataset.from_tensor_slices(
        {name: np.stack([b[name] for b in batches]) for name in batches[0]})


class BatchLogs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.logs = []

    def on_train_batch_end(self, batch, logs=None):
        self.logs.append(dict(logs))


def classifier_batch(seed=3):
    """One batch of four pairs as a SequenceClassifier's step() takes it."""
    rng = np.random.default_rng(seed)
    return {"input_ids": rng.integers(5, VOCAB, (4, 6)).astype("int32"),
            "token_type_ids": np.zeros((4, 6), "int32"), "labels": np.array([0, 1, 1, 0], "int32")}


def gpt_batch():
    """One GPT batch; the last two positions of row 0 are padding, which the loss skips."""
    batch = pretraining_batches(1, seed=2)[0]
    del batch["mlm_positions"], batch["mlm_ids"], batch["mlm_weights"]
    batch["input_ids"][0, -2:] = 0
    return batch


def cross_entropy(logits, labels, weights):
    """Weighted mean of -log softmax(logits)[label] in numpy, and the weighted accuracy."""
    logits = logits.astype("float64")
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    hits = logits.argmax(-1) == labels
    return -(picked * weights).sum() / weights.sum(), (hits * weights).sum() / weights.sum()


def expected_metrics(kind, model, batch):
    """The metrics step() should report for ``batch``, from the model's outputs and numpy:
    the pre-training losses are the token loss + 0.2 x the next-sentence loss."""
    if kind == "classifier":
        loss, accuracy = cross_entropy(model(batch).numpy(), batch["labels"], np.ones(4))
        return {"loss": loss, "accuracy": accuracy}
    outputs = model(batch)
    nsp_loss, nsp_accuracy = cross_entropy(
        model.nsp_head(outputs["pooled_output"]).numpy(), batch["nsp_labels"], np.ones(4))
    words = model.embeddings.word_embeddings
    if kind == "bert":
        chosen = np.take_along_axis(outputs["sequence_output"].numpy(),
                                    batch["mlm_positions"][..., None], 1)
        token_loss, token_accuracy = cross_entropy(
            model.lm_head(chosen, words).numpy(), batch["mlm_ids"], batch["mlm_weights"])
        names = "mlm_loss", "mlm_accuracy"
    else:  # gpt: position i predicts token i + 1; padding is no target
        targets = batch["input_ids"][:, 1:]
        token_loss, token_accuracy = cross_entropy(
            model.lm_head(outputs["sequence_output"][:, :-1], words).numpy(), targets,
            (targets != 0).astype("float64"))
        names = "lm_loss", "lm_accuracy"
    return {"loss": token_loss + 0.2 * nsp_loss, names[0]: token_loss,
            names[1]: token_accuracy, "nsp_loss": nsp_loss, "nsp_accuracy": nsp_accuracy}


def twin_models(kind):
    """Two models of ``kind`` with the same weights, each compiled with a new Adam."""
    models = []
    for _ in range(2):
        model = (SequenceClassifier(tiny(BERT), num_labels=2, dropout=0.0) if kind == "classifier"
                 else tiny({"bert": BERT, "gpt": GPT}[kind]))
        model(classifier_batch() if kind == "classifier" else pretraining_batches(1)[0])
        model.compile(optimizer=keras.optimizers.Adam(3e-3))
        models.append(model)
    models[1].set_weights(models[0].get_weights())
    return models


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["bert", "gpt", "classifier"])
def test_one_fit_step_is_one_step_of_the_training_loop_and_reports_its_loss(kind):
    batch = {"bert": pretraining_batches(1, seed=4)[0], "gpt": gpt_batch(),
             "classifier": classifier_batch()}[kind]
    fitted, looped = twin_models(kind)
    before = [weight.numpy() for weight in fitted.weights]
    expected = expected_metrics(kind, fitted, batch)

    history = fitted.fit(as_dataset([batch]), epochs=1, verbose=0, shuffle=False)
    train_steps(looped, iter([{name: tf.constant(value) for name, value in batch.items()}]), 1, 1)

    # Adam's first step moves a weight by about the rate (3e-3) whatever its gradient's size,
    # so where a gradient is near Adam's epsilon the kernels' rounding shows (2e-6 seen); a
    # step missed or taken twice would differ by the rate itself.
    moved = 0
    for start, by_fit, by_loop in zip(before, fitted.weights, looped.weights, strict=True):
        np.testing.assert_allclose(by_fit.numpy(), by_loop.numpy(), rtol=0, atol=1e-4,
                                   err_msg=by_fit.path)
        moved += not np.array_equal(by_fit.numpy(), start)
    assert moved > len(before) // 2  # the step did update the weights the loss reaches
    assert int(fitted.optimizer.iterations) == int(looped.optimizer.iterations) == 1
    assert set(history.history) == set(expected)
    for name, value in expected.items():
        assert history.history[name] == [pytest.approx(value, rel=1e-5, abs=1e-6)], name


@pytest.mark.slow  # 30 training steps through Keras fit
def test_fit_trains_bert_with_its_step_and_logs_its_metrics():
    model = tiny(BERT)
    model.compile(optimizer=keras.optimizers.Adam(3e-3))
    batches = pretraining_batches(2)
    recorder = BatchLogs()
    history = model.fit(as_dataset(batches).repeat(), steps_per_epoch=10, epochs=3,
                        verbose=0, shuffle=False, callbacks=[recorder])
    assert set(history.history) == BERT_METRICS
    assert set(recorder.logs[0]) == BERT_METRICS
    losses = history.history["loss"]
    assert losses[-1] < losses[0] * 0.8, losses
    assert int(model.optimizer.iterations) == 30


@pytest.mark.slow
def test_evaluate_averages_step_over_the_batches():
    model = tiny(BERT)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    batches = pretraining_batches(3, seed=1)
    expected = {name: np.mean([float(model.step({k: tf.constant(v) for k, v in b.items()},
                                                training=False)[name]) for b in batches])
                for name in BERT_METRICS}
    result = model.evaluate(as_dataset(batches), return_dict=True, verbose=0)
    assert set(result) == BERT_METRICS
    for name in BERT_METRICS:
        assert result[name] == pytest.approx(expected[name], rel=1e-5, abs=1e-6), name
    assert int(model.optimizer.iterations) == 0  # evaluating updates nothing


@pytest.mark.slow
def test_fit_trains_gpt_and_a_classifier_head():
    gpt = tiny(GPT)
    gpt.compile(optimizer=keras.optimizers.Adam(3e-3))
    batches = pretraining_batches(2, seed=2)
    for batch in batches:
        del batch["mlm_positions"], batch["mlm_ids"], batch["mlm_weights"]
    history = gpt.fit(as_dataset(batches).repeat(), steps_per_epoch=10, epochs=2, verbose=0,
                      shuffle=False)
    assert {"lm_loss", "lm_accuracy"} <= set(history.history)
    assert history.history["loss"][-1] < history.history["loss"][0]

    head = SequenceClassifier(tiny(BERT), num_labels=2, dropout=0.0)
    head.compile(optimizer=keras.optimizers.Adam(3e-3))
    rng = np.random.default_rng(3)
    pairs = {"input_ids": rng.integers(5, VOCAB, (8, 6)).astype("int32"),
             "token_type_ids": np.zeros((8, 6), "int32"),
             "labels": np.array([0, 1] * 4, "int32")}
    history = head.fit(tf.data.Dataset.from_tensor_slices(pairs).batch(4).repeat(),
                       steps_per_epoch=10, epochs=3, verbose=0, shuffle=False)
    assert set(history.history) == {"loss", "accuracy"}
    assert history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize("precision", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("kind", ["bert", "gpt"])
def test_step_reports_the_token_loss_plus_a_fifth_of_the_next_sentence_loss(kind, precision):
    """step()'s losses as numpy computes them from the model's own outputs, and its loss the
    token loss + 0.2 x the next-sentence loss, in float32 and under mixed bfloat16 (no update:
    quick where the fit test above is slow)."""
    keras.mixed_precision.set_global_policy(precision)
    try:
        model = tiny({"bert": BERT, "gpt": GPT}[kind])
        batch = pretraining_batches(1, seed=4)[0] if kind == "bert" else gpt_batch()
        reported = {name: float(value)
                    for name, value in model.step(batch, training=False).items()}
        expected = expected_metrics(kind, model, batch)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    token = "mlm_loss" if kind == "bert" else "lm_loss"
    # The weight, worked by hand: any other fails here in either precision.
    assert reported["loss"] == pytest.approx(reported[token] + 0.2 * reported["nsp_loss"],
                                             rel=1e-6)
    # bfloat16 keeps 8 bits of a logit: the accuracies may flip on a near tie, so losses only.
    compared = expected if precision == "float32" else ("loss", token, "nsp_loss")
    tolerance = 1e-5 if precision == "float32" else 1e-2
    for name in compared:
        assert reported[name] == pytest.approx(expected[name], rel=tolerance), name
