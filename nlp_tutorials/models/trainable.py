"""What every trainable model here shares: one ``step()`` that both loops run.

A model (the Transformer family, or a fine-tuning head) defines ``step(batch, training)``: the
loss of one batch and, when ``training``, one optimiser update, returning a dict of scalar
metrics. Everything else is built on it:

- :meth:`TrainableModel.compiled_step` traces it once as a ``tf.function`` (evaluation calls
  that; the training loops call ``distribute.compiled_step``, the same under a strategy);
- Keras' own loop, ``model.fit(dataset)`` / ``model.evaluate(dataset)``, runs the same
  ``step()`` through ``train_step`` / ``test_step``, so Keras callbacks (TensorBoard,
  ModelCheckpoint, EarlyStopping) see its metrics, averaged over the epoch as Keras' own are.
"""
import functools

import keras
import tensorflow as tf


def dense_gradients(grads):
    """Gradients with every ``tf.IndexedSlices`` summed into a dense tensor (None kept).

    An embedding lookup's gradient is IndexedSlices holding one row per use, so a row used
    twice appears twice (segment ids in every sequence; every position once per replica after
    a tf.distribute all-reduce). Keras' Adam squares those rows one by one, which makes its
    second moment a sum of squares instead of the square of the sum; summed first, the update
    is Adam's. Adam's first-moment update (gradient minus a dense slot) densifies it anyway.
    """
    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def batch_signature(batch):
    """tf.function input signature for batches shaped like ``batch`` (a dict of arrays):
    dtypes and batch size fixed, every other axis open, so batches trimmed to different
    lengths share one trace."""
    return {name: tf.TensorSpec([value.shape[0]] + [None] * (len(value.shape) - 1),
                                tf.as_dtype(value.dtype), name=name)
            for name, value in batch.items()}


class TrainableModel(keras.Model):
    """A Keras model trained by its ``step(batch, training)`` method.

    Subclasses define ``step``; they get :meth:`apply_gradients`, :meth:`compiled_step` and
    Keras' ``fit`` / ``evaluate``. Compile with an optimizer only (``model.compile(
    optimizer=...)``): the loss is ``step()``'s.

    Example::

        model.compile(optimizer=keras.optimizers.AdamW(1e-4))
        model.fit(dataset, epochs=2)        # dataset of batch dicts, as step() takes
        model.evaluate(test_dataset)        # {"loss": ..., other step() metrics}
    """

    def step(self, batch, training=True):
        """The loss of ``batch`` (a dict of tensors) and, if ``training``, one update.

        Returns a dict of scalar metrics, ``loss`` among them.
        """
        raise NotImplementedError(f"{type(self).__name__} defines no step()")

    def apply_gradients(self, tape, loss):
        """Back-propagate ``loss`` recorded on ``tape`` and update every weight it reaches.

        Weights the loss does not reach (a backbone's pre-training heads while fine-tuning)
        are left out rather than handed to the optimizer without a gradient, which it would
        warn about.
        """
        variables = self.trainable_variables
        # Recorded on the tape too: under mixed_float16 the loss scale is a real multiplication
        # (outside the tape every gradient would be None); otherwise it returns ``loss``.
        with tape:
            scaled = self.optimizer.scale_loss(loss)
        grads = dense_gradients(tape.gradient(scaled, variables))
        self.optimizer.apply_gradients(
            [(grad, var) for grad, var in zip(grads, variables) if grad is not None])

    def compiled_step(self, batch, jit_compile: bool = False, training: bool = True):
        """``step`` as a ``tf.function`` traced once for every batch shaped like ``batch``.

        The signature fixes each input's dtype and batch size but leaves the other axes open,
        so batches trimmed to their longest sequence reuse the same trace. (Under XLA,
        ``jit_compile=True``, each distinct length still compiles once.)
        """
        if training:
            # Create the optimizer's slots now: variables created inside the first trace
            # would force a second one.
            self.optimizer.build(self.trainable_variables)
        return tf.function(functools.partial(self.step, training=training),
                           input_signature=[batch_signature(batch)], jit_compile=jit_compile)

    def train_step(self, data):
        """Keras' ``fit``: one :meth:`step`, its metrics averaged over the epoch."""
        return self._track(self.step(data, training=True))

    def test_step(self, data):
        """Keras' ``evaluate``: :meth:`step` without an update, averaged over the batches."""
        return self._track(self.step(data, training=False))

    @property
    def metrics(self):
        """The running means Keras resets at each epoch (one per ``step()`` metric)."""
        return list(self.__dict__.get("_step_means", {}).values())

    def _track(self, values):
        """Fold one step's metrics into their running means; return the means so far.

        The means are made when a metric name first appears (``step()`` says which it returns)
        and kept in the instance's ``__dict__``, out of Keras' attribute tracking: a built
        Keras model refuses new tracked state, and they are no weights to save.
        """
        means = self.__dict__.setdefault("_step_means", {})
        # Under tf.distribute each replica's metric is its share of the global batch's (the
        # losses divide by the global batch), so the shares add up to it; the Mean averages
        # what the replicas add, hence the factor.
        context = tf.distribute.get_replica_context()
        replicas = 1 if context is None else context.num_replicas_in_sync
        for name, value in values.items():
            if name not in means:
                # Created eagerly, outside the step being traced, so the trace may use them.
                with tf.init_scope():
                    means[name] = keras.metrics.Mean(name=name)
            means[name].update_state(value * replicas)
        return {name: means[name].result() for name in values}
