"""The optimizer of every run: AdamW with BERT's schedule (linear warm-up, then linear decay).

:func:`make_optimizer` is used by pre-training (:mod:`nlp_tutorials.training`), fine-tuning
(:mod:`nlp_tutorials.training.finetuning`) and the date task (:mod:`nlp_tutorials.training.seq2seq`). The AdamW
itself is :class:`nlp_tutorials.speed.kernels.AdamW` (Keras' AdamW on TensorFlow's fused kernel).
"""
from typing import NamedTuple

import keras
import tensorflow as tf

from nlp_tutorials.speed.kernels import AdamW
from nlp_tutorials.training.config import WARMUP_FRACTION, WEIGHT_DECAY


class Extension(NamedTuple):
    """One lengthening of a schedule: at step ``at`` (rate ``start_rate``) to ``to`` steps; the
    straight climb ends at step ``rejoin_step`` with rate ``rejoin_rate``."""

    at: int
    to: int
    start_rate: float
    rejoin_step: int
    rejoin_rate: float


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's schedule: 0 -> peak linearly over ``warmup`` steps, then linearly to 0 at
    ``total``; ``extensions`` lengthen it for a run continued past ``total``.

    Update t (1 for the first; ``__call__`` takes the optimizer's count, t - 1) gets the rate
    peak * min(t / warmup, (total - t) / (total - warmup)), never below 0.

    Each extension (s0, N) (``train --resume --steps N`` on a run planned for fewer steps,
    resumed at step s0) keeps the schedule as it was up to s0, where the rate was r0 (0 when
    the run had finished). From there the rate runs in a straight line from r0 at s0 to the
    line of a run planned for N steps from the start, peak * (N - t) / (N - warmup), which it
    meets u = min(warmup, (N - s0) // 2) steps later (u at least 1), and then follows that
    line down to 0 at N. Why this rule: the rate is continuous, so Adam's moments never meet
    a jump in the step size; decaying straight from r0 would never train a finished run again
    (r0 is 0), and a climb over a warm-up's length is what the schedule does at the start, for
    the same reason; after the climb the run anneals exactly as one planned for N steps. The
    warm-up already done stays as it was. Extensions apply in order, each to the schedule
    before it, so a run extended twice is rebuilt from the pairs its ``train_config.json``
    records (see :mod:`nlp_tutorials.training`).
    """

    def __init__(self, peak: float, warmup: int, total: int, extensions=()):
        self.peak, self.warmup, self.total = peak, warmup, total
        self.extensions = tuple((int(at), int(to)) for at, to in extensions)
        self.pieces = []  # one Extension per pair, each computed from the schedule before it
        for at, to in self.extensions:
            if not 0 <= at <= self.planned_steps < to:
                raise ValueError(f"extension at step {at} to {to} steps: expected "
                                 f"0 <= step <= {self.planned_steps} < steps")
            rejoin = at + max(1, min(warmup, (to - at) // 2))
            self.pieces.append(Extension(at, to, self.rate_at(at), rejoin,
                                         self._planned_line(to, rejoin)))

    @property
    def planned_steps(self) -> int:
        """Where the rate reaches 0: ``total``, or the last extension's N."""
        return self.pieces[-1].to if self.pieces else self.total

    def _planned_line(self, steps, t):
        """The decay line of a run planned for ``steps`` steps, at update ``t``."""
        return self.peak * (steps - t) / max(steps - self.warmup, 1)

    def _rate(self, t, where, maximum, minimum):
        """The rate of update ``t``, with tf's or Python's where, maximum and minimum."""
        warm = t / max(self.warmup, 1)
        decay = (self.total - t) / max(self.total - self.warmup, 1)
        rate = self.peak * maximum(0.0, minimum(warm, decay))
        for piece in self.pieces:
            climb = piece.start_rate + (t - piece.at) * (
                (piece.rejoin_rate - piece.start_rate) / (piece.rejoin_step - piece.at))
            after = maximum(0.0, self._planned_line(piece.to, t))
            rate = where(t > piece.at, where(t <= piece.rejoin_step, climb, after), rate)
        return rate

    def rate_at(self, step: int) -> float:
        """The rate of update ``step`` (1 for the first), in Python floats."""
        return self._rate(float(step), lambda c, a, b: a if c else b, max, min)

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        return self._rate(step, tf.where, tf.maximum, tf.minimum)

    def extended(self, at: int, to: int) -> "WarmupLinearDecay":
        """This schedule extended at step ``at`` to ``to`` steps (see the class docstring)."""
        return WarmupLinearDecay(self.peak, self.warmup, self.total,
                                 self.extensions + ((at, to),))

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total,
                "extensions": [list(pair) for pair in self.extensions]}


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class HeadsFirst(keras.optimizers.schedules.LearningRateSchedule):
    """A constant ``head_rate`` for the first ``head_steps`` updates, then ``then`` from its
    own first update: ``then`` warms up again when the rest of the model starts training.

    Continued pre-training (:mod:`nlp_tutorials.training.continued`) trains fresh pre-training heads
    alone first; they need a higher rate than a trained encoder tolerates, and the encoder's
    Adam moments start from zero when it joins, so its rate climbs from 0 as at any start.
    """

    def __init__(self, head_rate: float, head_steps: int, then):
        self.head_rate, self.head_steps, self.then = head_rate, head_steps, then

    def __call__(self, step):
        step = tf.cast(step, tf.float32)
        return tf.where(step < self.head_steps, tf.cast(self.head_rate, tf.float32),
                        self.then(tf.maximum(step - self.head_steps, 0.0)))

    def get_config(self):
        return {"head_rate": self.head_rate, "head_steps": self.head_steps,
                "then": keras.saving.serialize_keras_object(self.then)}

    @classmethod
    def from_config(cls, config):
        config = dict(config, then=keras.saving.deserialize_keras_object(config["then"]))
        return cls(**config)


def make_optimizer(learning_rate: float, steps: int, warmup_fraction: float = WARMUP_FRACTION,
                   weight_decay: float = WEIGHT_DECAY):
    """AdamW as BERT (:func:`bert_adamw`), its rate warming up linearly to ``learning_rate``
    over ``warmup_fraction`` of ``steps``, then decaying linearly to 0 at ``steps``."""
    return bert_adamw(WarmupLinearDecay(learning_rate, int(warmup_fraction * steps), steps),
                      weight_decay)


# The weights BERT does not decay, by their own names: LayerNorm's gamma and beta, and every
# bias. Keras matches the pattern against the TensorFlow variable's name, which holds the name
# scopes open when the weight was made: "bert/encoder/layer_0/attention_norm/norm/gamma:0" for
# a layer built inside its model's call, "gamma:0" or "bert/encoder/gamma:0" for one built
# outside it. So the pattern reads the last part only; a layer's name ("norm") may be absent.
NOT_DECAYED = r"(^|/)(gamma|beta|bias)(:\d+)?$"


def bert_adamw(schedule, weight_decay: float = WEIGHT_DECAY):
    """AdamW as BERT, following ``schedule``: beta2 0.999, epsilon 1e-6, no weight decay on
    LayerNorm or biases."""
    optimizer = AdamW(learning_rate=schedule, weight_decay=weight_decay, beta_1=0.9,
                      beta_2=0.999, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=[NOT_DECAYED])
    return optimizer
