"""The one training loop: its steps, hooks, logs and Ctrl-C, and the sources that feed it.

The loop's own behaviour is checked on a one-weight-per-feature linear model trained by plain
gradient descent, whose losses numpy computes step by step; that it trains a BERT from every
pre-training source as a hand-written loop does is checked on the project's tiny BERT.
"""
import itertools
import os
import signal
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.models.trainable import TrainableModel
from nlp_tutorials.training.loop import Hook, Logs, epoch_batches, train_steps
from support import tiny_model

RATE = 0.1


class Line(TrainableModel):
    """y = x . w + b, trained on the mean squared error by gradient descent."""

    def __init__(self, features: int):
        super().__init__()
        self.dense = keras.layers.Dense(1, kernel_initializer="zeros")
        self.dense.build((None, features))

    def step(self, batch, training=True):
        with tf.GradientTape() as tape:
            error = self.dense(batch["x"])[:, 0] - batch["y"]  # [batch]
            loss = tf.reduce_mean(error ** 2)
        if training:
            self.apply_gradients(tape, loss)
        return {"loss": loss}


def line_batches(count: int, rows: int = 4, features: int = 3, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    return [{"x": rng.normal(size=(rows, features)).astype("float32"),
             "y": rng.normal(size=rows).astype("float32")} for _ in range(count)]


def numpy_losses(batches) -> list:
    """Each step's loss (before its update) under plain gradient descent from zero weights."""
    w, b, losses = np.zeros(batches[0]["x"].shape[1]), 0.0, []
    for batch in batches:
        x, y = batch["x"].astype(np.float64), batch["y"].astype(np.float64)
        error = x @ w + b - y
        losses.append(float(np.mean(error ** 2)))
        w = w - RATE * 2 * x.T @ error / len(y)
        b = b - RATE * 2 * error.mean()
    return losses


def line_model() -> Line:
    model = Line(3)
    model.compile(optimizer=keras.optimizers.SGD(RATE))
    return model


class Counted:
    """An iterator over ``batches`` that counts what was taken from it."""

    def __init__(self, batches):
        self.batches, self.taken = iter(batches), 0

    def __iter__(self):
        return self

    def __next__(self):
        batch = next(self.batches)
        self.taken += 1
        return batch


def test_losses_are_those_of_plain_gradient_descent():
    batches = line_batches(8)
    seen = []
    interrupted = train_steps(line_model(), iter(batches), 1, 8,
                              hooks=(Hook(1, lambda step, batch, m: seen.append(m["loss"])),))
    assert not interrupted
    np.testing.assert_allclose(seen, numpy_losses(batches), rtol=1e-5)


def test_steps_hooks_and_checkpoints_come_at_their_cadence():
    """Steps 4-9 of a 9-step run (a resumed one): six batches taken, six updates, the
    evaluation hook after steps 6 and 9 with those steps' losses, a checkpoint after step 6
    but not 9, the run's last, which the caller saves."""
    batches = Counted(line_batches(20))
    model = line_model()
    evaluated, saved = [], []
    interrupted = train_steps(
        model, batches, 4, 9, total=9,
        hooks=(Hook(3, lambda step, batch, m: evaluated.append((step, m["loss"]))),),
        checkpoint=Hook(3, lambda step, batch, m: saved.append(step)))
    assert not interrupted and batches.taken == 6
    assert int(model.optimizer.iterations.numpy()) == 6
    losses = numpy_losses(line_batches(20)[:6])  # steps 4..9 are the loop's 1st..6th
    assert [step for step, _ in evaluated] == [6, 9]
    np.testing.assert_allclose([loss for _, loss in evaluated], [losses[2], losses[5]],
                               rtol=1e-5)
    assert saved == [6]


def test_hooks_get_the_batch_of_their_step():
    batches = line_batches(5)
    seen = []
    train_steps(line_model(), iter(batches), 1, 5,
                hooks=(Hook(2, lambda step, batch, m: seen.append((step, batch))),))
    assert [step for step, _ in seen] == [2, 4]
    for step, batch in seen:
        np.testing.assert_array_equal(batch["x"], batches[step - 1]["x"])


def test_ctrl_c_between_steps_stops_after_the_current_step():
    """Ctrl-C during step 3 (its hook): the loop finishes step 3's hooks, takes no more
    batches, returns True, and the Ctrl-C handler is the one it found."""
    batches = Counted(line_batches(10))
    model = line_model()
    after = []

    def press_ctrl_c(step, batch, metrics):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs between bytecodes

    before = signal.getsignal(signal.SIGINT)
    interrupted = train_steps(model, batches, 1, 10,
                              hooks=(Hook(3, press_ctrl_c),
                                     Hook(1, lambda step, batch, m: after.append(step))))
    assert interrupted and batches.taken == 3 and after == [1, 2, 3]
    assert int(model.optimizer.iterations.numpy()) == 3
    assert signal.getsignal(signal.SIGINT) is before


def test_tensorboard_scalars_every_n_steps_and_at_the_runs_end(tmp_path):
    batches = line_batches(5)
    train_steps(line_model(), iter(batches), 1, 5, logs=Logs(str(tmp_path), 2))
    logged = {}
    for path in tmp_path.iterdir():
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                logged[event.step] = float(tf.make_ndarray(value.tensor))
    assert sorted(logged) == [2, 4, 5]
    losses = numpy_losses(batches)
    np.testing.assert_allclose([logged[s] for s in (2, 4, 5)],
                               [losses[1], losses[3], losses[4]], rtol=1e-5)


def test_epoch_batches_draws_each_epoch_only_when_the_one_before_is_done():
    drawn = []

    def epoch():
        drawn.append(len(drawn))
        return iter([len(drawn)] * 2)

    every = epoch_batches(epoch, 3)
    assert next(every) == 1 and drawn == [0]
    assert list(every) == [1, 2, 2, 3, 3] and drawn == [0, 1, 2]


# The pre-training sources: the same interface, the same loop.

def tiny_bert(vocab_size: int):
    model = tiny_model("bert", seed=3, vocab_size=vocab_size, hidden_size=16,
                       num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       max_position_embeddings=32)
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    return model


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The three sources over the same sentences: MRPC pairs, those pairs as a corpus file
    (a document each), and that corpus in two shards."""
    from nlp_tutorials.sources.corpus import CorpusData
    from nlp_tutorials.sources.mrpc import MrpcPretrainingData
    from nlp_tutorials.sources.shard_batches import ShardData
    from nlp_tutorials.sources.shards import prepare_shards
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.text.tokenization import WordTokenizer

    folder = tmp_path_factory.mktemp("sources")
    pairs = load_mrpc("train")[:120]
    tokenizer = WordTokenizer.build([s for p in pairs for s in (p.text, p.pair)])
    corpus = folder / "corpus.txt"
    corpus.write_text("".join(f"{p.text}\n{p.pair}\n\n" for p in pairs), encoding="utf-8")
    quiet = {"printer": lambda _: None}
    prepare_shards(str(corpus), folder / "shards", 2, tokenizer, 32, 1, **quiet)
    return tokenizer, {
        "mrpc": MrpcPretrainingData(tokenizer, pairs, max_len=32, seed=1),
        "corpus": CorpusData(str(corpus), tokenizer, max_len=32, seed=1, **quiet),
        "shards": ShardData(folder / "shards", tokenizer, seed=1)}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mrpc", "corpus", "shards"])
def test_the_loop_trains_bert_from_any_source_as_a_plain_loop_does(sources, name):
    tokenizer, all_sources = sources
    source = all_sources[name]
    assert source.input_pipelines == 1 and "per epoch" in source.describe_epoch(8)
    # The model first: seeding it sets TensorFlow's global seed, which tf.data's shuffle of the
    # shards combines with the source's own, so both reads must come after it.
    plain = tiny_bert(tokenizer.vocab_size)
    batches = list(itertools.islice(source.batches(8, masked=True), 4))
    assert all(b["input_ids"].shape[1] <= 32 for b in batches)
    step = plain.compiled_step(batches[0])
    expected = [float(step(batch)["loss"]) for batch in batches]
    looped, losses = tiny_bert(tokenizer.vocab_size), []
    train_steps(looped, source.batches(8, masked=True), 1, 4,
                hooks=(Hook(1, lambda s, b, m: losses.append(m["loss"])),))
    np.testing.assert_allclose(losses, expected, rtol=1e-5)
    for a, b in zip(plain.weights, looped.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-6, err_msg=a.path)


@pytest.mark.parametrize("name", ["mrpc", "corpus", "shards"])
def test_every_source_resumes_with_the_batches_and_masking_it_would_have_had(sources, name):
    source = sources[1][name]
    whole = list(itertools.islice(source.batches(8, masked=True), 5))
    resumed = list(itertools.islice(source.batches(8, masked=True, start=3), 2))
    for expected, batch in zip(whole[3:], resumed):
        assert expected.keys() == batch.keys()
        for key in expected:
            np.testing.assert_array_equal(expected[key], batch[key], err_msg=key)
    rounded = next(source.batches(8, masked=True, length_multiple=16))
    longest = int(np.count_nonzero(whole[0]["input_ids"], axis=1).max())
    assert whole[0]["input_ids"].shape[1] == longest  # trimmed to the longest row
    assert rounded["input_ids"].shape[1] == min(-(-longest // 16) * 16, 32)
