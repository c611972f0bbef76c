"""Keras' own loop, fit and evaluate, runs the same step() as the project's loops."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.bert import BERT
from nlp_tutorials.gpt import GPT
from nlp_tutorials.models.heads import SequenceClassifier
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
