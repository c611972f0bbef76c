"""The optimizer of every run: AdamW with BERT's schedule (linear warm-up, then linear decay).

:func:`make_optimizer` is used by pre-training (:mod:`nlp_tutorials.training`), fine-tuning
(:mod:`nlp_tutorials.finetune`) and the date task (:mod:`nlp_tutorials.seq2seq`). The AdamW
itself is :class:`nlp_tutorials.kernels.AdamW` (Keras' AdamW on TensorFlow's fused kernel).
"""
import keras
import tensorflow as tf

from nlp_tutorials.kernels import AdamW


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """BERT's schedule: 0 -> peak linearly over ``warmup`` steps, then linearly to 0 at
    ``total``."""

    def __init__(self, peak: float, warmup: int, total: int):
        self.peak, self.warmup, self.total = peak, warmup, total

    def __call__(self, step):
        step = tf.cast(step, tf.float32) + 1.0
        warm = step / max(self.warmup, 1)
        decay = (self.total - step) / max(self.total - self.warmup, 1)
        return self.peak * tf.maximum(0.0, tf.minimum(warm, decay))

    def get_config(self):
        return {"peak": self.peak, "warmup": self.warmup, "total": self.total}


def make_optimizer(learning_rate: float, steps: int, warmup_fraction: float = 0.1,
                   weight_decay: float = 0.01):
    """AdamW as BERT: beta2 0.999, epsilon 1e-6, no weight decay on LayerNorm or biases.

    The rate warms up linearly to ``learning_rate`` over ``warmup_fraction`` of ``steps``,
    then decays linearly to 0 at ``steps``.
    """
    schedule = WarmupLinearDecay(learning_rate, int(warmup_fraction * steps), steps)
    optimizer = AdamW(learning_rate=schedule, weight_decay=weight_decay, beta_1=0.9,
                      beta_2=0.999, epsilon=1e-6)
    optimizer.exclude_from_weight_decay(var_names=["norm", "bias"])
    return optimizer
