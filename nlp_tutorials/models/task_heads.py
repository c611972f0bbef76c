"""Task heads, what fine-tuning adds on a backbone: one per task shape of the BERT paper
(Devlin et al., 2019, section 4). Not to be confused with attention heads (the ``heads`` command,
:mod:`nlp_tutorials.analysis.bertology`).

Each head wraps a backbone (a :class:`~nlp_tutorials.bert.BERT`, or a
:class:`~nlp_tutorials.gpt.GPT`) and adds one small dense layer; fine-tuning trains the head and
the whole backbone together.

- :class:`SequenceClassifier`: ``pooled_output`` -> [batch, num_labels]; GLUE (MRPC, SST-2 ...),
  and with ``num_labels=1`` a regression score (STS-B).
- :class:`TokenClassifier`: ``sequence_output`` -> [batch, step, num_labels]; CoNLL-2003 NER.
- :class:`SpanExtractor`: ``sequence_output`` -> start and end logits [batch, step]; SQuAD,
  decoded by :func:`best_span`.
- :class:`MultipleChoice`: ``pooled_output`` of each (context, choice) pair -> [batch, choices];
  SWAG.

A head is used like the backbone: ``head(inputs)`` gives logits, ``head.loss_and_metrics(batch,
training)`` gives the loss and scalar metrics, ``head.step(batch)`` is one optimisation step
(after ``head.compile(optimizer=...)``) and ``head.compiled_step(batch)`` traces it once.
``inputs`` are ``input_ids`` and ``token_type_ids`` (optional: zeros) and, optionally, a
``head_mask`` for the backbone; a ``batch`` adds the labels each head documents. Heads save
with ``head.save("x.keras")``, backbone included.
"""
import keras
import numpy as np
import tensorflow as tf

from nlp_tutorials.speed.kernels import Dropout
from nlp_tutorials.models.config import POOLINGS
from nlp_tutorials.models.losses import global_sum, sparse_cross_entropy
from nlp_tutorials.models.masks import MASK_VALUE
from nlp_tutorials.models.trainable import TrainableModel
from nlp_tutorials.models.layers import truncated_normal


def default_dropout(backbone, dropout):
    """The dropout before an output layer: ``dropout``, or (None) the backbone's hidden one."""
    return backbone.config.hidden_dropout_prob if dropout is None else dropout


class Head(TrainableModel):
    """What every head shares: the backbone, the training step and the saved config.

    Subclasses create their layers, then call :meth:`build_weights`; they define ``call`` and
    :meth:`loss_and_metrics`.
    """

    # [batch, step] of the dummy input that creates the weights; MultipleChoice adds choices.
    dummy_shape = (1, 2)
    # Whether the outputs have a step axis (one answer per token): batches trimmed to
    # different lengths are then padded back before they are joined.
    per_position = False

    def __init__(self, backbone, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone

    def build(self, input_shape=None):
        # Sub-layers create their weights on their first call; build_weights() makes that call.
        self.built = True

    def build_weights(self):
        """Create every weight by running a tiny input, so the head saves and loads at once."""
        ids = tf.ones(self.dummy_shape, tf.int32)
        self({"input_ids": ids, "token_type_ids": tf.zeros_like(ids)}, training=False)

    def dense(self, units: int, name: str):
        """An output layer initialised as BERT's: truncated normal, std ``initializer_range``."""
        return keras.layers.Dense(units, kernel_initializer=truncated_normal(self.backbone.config),
                                  name=name)

    def encode(self, ids, segments, training, head_mask=None):
        """The backbone's outputs for ids and segments [batch, step] (segments None: zeros);
        ``head_mask`` ([heads] or [layers, heads], or None) as the backbone takes it."""
        if segments is None:
            segments = tf.zeros_like(ids)
        inputs = {"input_ids": ids, "token_type_ids": segments}
        if head_mask is not None:
            inputs["head_mask"] = head_mask
        return self.backbone(inputs, training=training)

    def is_real(self, ids):
        """Bool, True where ``ids`` is not padding."""
        return tf.not_equal(ids, self.backbone.config.pad_token_id)

    def loss_and_metrics(self, batch, training=False):
        """(scalar loss, dict of scalar metrics including ``loss``) on one batch."""
        raise NotImplementedError

    def step(self, batch, training=True):
        """One optimisation step on :meth:`loss_and_metrics`; ``training=False`` only evaluates.

        Returns the dict of scalar metrics. Compile it with :meth:`compiled_step`.
        """
        with tf.GradientTape() as tape:
            loss, metrics = self.loss_and_metrics(batch, training=training)
        if training:
            self.apply_gradients(tape, loss)
        return metrics

    def get_config(self):
        return {"backbone": keras.saving.serialize_keras_object(self.backbone)}

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class SequenceClassifier(Head):
    """One label (or score) per sequence or sentence pair, read from one summary vector.

    ``pooling="cls"`` (BERT's way) reads the backbone's pooled [CLS] vector; ``"mean"`` averages
    the final token vectors over the real (non-padding) tokens, the summary sentence-embedding
    models such as all-MiniLM-L6-v2 were trained to produce.
    ``call(inputs)`` -> logits [batch, num_labels]. ``num_labels=1`` is regression (STS-B's
    similarity score): the single logit is the prediction.
    Batch for :meth:`loss_and_metrics`: ``input_ids``, ``token_type_ids`` [batch, step];
    ``labels`` [batch]: int class ids, or float targets when ``num_labels=1``.
    """

    def __init__(self, backbone, num_labels: int = 2, dropout=None, pooling: str = POOLINGS[0],
                 **kwargs):
        super().__init__(backbone, **kwargs)
        if pooling not in POOLINGS:
            raise ValueError(f"pooling={pooling!r}: expected one of {POOLINGS}")
        self.num_labels = num_labels
        self.pooling = pooling
        self.dropout_rate = default_dropout(backbone, dropout)
        self.dropout = Dropout(self.dropout_rate)
        self.classifier = self.dense(num_labels, "classifier")
        self.build_weights()

    def call(self, inputs, training=False):
        summary = self.summary(inputs, training)  # [batch, hidden]
        return self.classifier(self.dropout(summary, training=training))  # [batch, num_labels]

    def summary(self, inputs, training=False):
        """The vector the classifier reads, [batch, hidden]: the pooled ``[CLS]`` vector, or
        the mean of the final token vectors over the real tokens (``pooling``)."""
        ids = inputs["input_ids"]
        outputs = self.encode(ids, inputs.get("token_type_ids"), training, inputs.get("head_mask"))
        if self.pooling == "cls":
            return outputs["pooled_output"]  # [batch, hidden]
        x = outputs["sequence_output"]  # [batch, step, hidden]
        real = tf.expand_dims(tf.cast(self.is_real(ids), x.dtype), -1)  # [batch, step, 1]
        return tf.reduce_sum(x * real, axis=1) / tf.maximum(
            tf.reduce_sum(real, axis=1), 1.0)  # [batch, hidden]

    def loss_and_metrics(self, batch, training=False):
        """Sparse cross-entropy and accuracy; mean squared error when ``num_labels=1``."""
        logits = self(batch, training=training)
        labels = batch["labels"]
        if self.num_labels == 1:
            error = tf.cast(logits[:, 0], tf.float32) - tf.cast(labels, tf.float32)
            # The mean over the global batch (see sparse_cross_entropy), not this replica's.
            count = global_sum(tf.cast(tf.size(error), tf.float32))
            loss = tf.reduce_sum(tf.square(error)) / count
            return loss, {"loss": loss}
        loss, accuracy = sparse_cross_entropy(labels, logits, tf.ones_like(labels))
        return loss, {"loss": loss, "accuracy": accuracy}

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout": self.dropout_rate, "pooling": self.pooling}


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class TokenClassifier(Head):
    """One label per token (named-entity tags as B/I/O), read from each token's vector.

    ``call(inputs)`` -> logits [batch, step, num_labels] (padded positions hold meaningless
    values: the loss skips them).
    Batch for :meth:`loss_and_metrics`: ``input_ids``, ``token_type_ids`` [batch, step];
    ``tag_ids`` [batch, step] int; optional ``tag_weights`` [batch, step] float, 1 where a tag
    counts (default: every real token; with WordPiece, BERT tags only a word's first piece).
    """

    per_position = True

    def __init__(self, backbone, num_labels: int, dropout=None, **kwargs):
        super().__init__(backbone, **kwargs)
        self.num_labels = num_labels
        self.dropout_rate = default_dropout(backbone, dropout)
        self.dropout = Dropout(self.dropout_rate)
        self.classifier = self.dense(num_labels, "classifier")
        self.build_weights()

    def call(self, inputs, training=False):
        sequence = self.encode(inputs["input_ids"], inputs.get("token_type_ids"), training,
                               inputs.get("head_mask"))["sequence_output"]  # [batch, step, hidden]
        return self.classifier(self.dropout(sequence, training=training))  # [batch, step, labels]

    def loss_and_metrics(self, batch, training=False):
        """Cross-entropy and accuracy over the weighted (by default: real) tokens."""
        logits = self(batch, training=training)
        weights = batch.get("tag_weights")
        if weights is None:
            weights = self.is_real(batch["input_ids"])
        loss, accuracy = sparse_cross_entropy(batch["tag_ids"], logits, weights)
        return loss, {"loss": loss, "accuracy": accuracy}

    def get_config(self):
        return {**super().get_config(), "num_labels": self.num_labels,
                "dropout": self.dropout_rate}


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class SpanExtractor(Head):
    """The answer span inside a passage: a start and an end score for every token.

    As BERT's SQuAD model: one dense(2) on the token vectors, no dropout of its own.
    ``call(inputs)`` -> ``{"start_logits", "end_logits"}``, float32 [batch, step]; padded
    positions get ``MASK_VALUE`` so softmax gives them exactly 0. Decode with :func:`best_span`.
    Batch for :meth:`loss_and_metrics`: ``input_ids``, ``token_type_ids`` [batch, step];
    ``start_positions``, ``end_positions`` [batch] int (the answer's first and last token).
    """

    per_position = True

    def __init__(self, backbone, **kwargs):
        super().__init__(backbone, **kwargs)
        self.span = self.dense(2, "span")
        self.build_weights()

    def call(self, inputs, training=False):
        ids = inputs["input_ids"]  # [batch, step]
        sequence = self.encode(ids, inputs.get("token_type_ids"), training,
                               inputs.get("head_mask"))["sequence_output"]  # [batch, step, hidden]
        logits = tf.cast(self.span(sequence), tf.float32)  # [batch, step, 2]
        logits = tf.where(tf.expand_dims(self.is_real(ids), -1), logits, MASK_VALUE)
        return {"start_logits": logits[..., 0], "end_logits": logits[..., 1]}

    def loss_and_metrics(self, batch, training=False):
        """Mean of the start and end cross-entropies (over positions), and their accuracies."""
        logits = self(batch, training=training)
        ones = tf.ones_like(batch["start_positions"])
        start_loss, start_accuracy = sparse_cross_entropy(
            batch["start_positions"], logits["start_logits"], ones)
        end_loss, end_accuracy = sparse_cross_entropy(
            batch["end_positions"], logits["end_logits"], ones)
        loss = (start_loss + end_loss) / 2
        return loss, {"loss": loss, "start_accuracy": start_accuracy,
                      "end_accuracy": end_accuracy}


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class MultipleChoice(Head):
    """Pick one of several continuations: each (context, choice) pair is scored on its own.

    The choices are folded into the batch, each pair's pooled vector gets one score, and the
    scores of one example compete in a softmax (SWAG in the paper).
    ``call(inputs)``: ``input_ids``, ``token_type_ids`` [batch, choices, step]
    -> logits [batch, choices].
    Batch for :meth:`loss_and_metrics`: those inputs and ``labels`` [batch] int, the index of
    the right choice.
    """

    dummy_shape = (1, 2, 2)

    def __init__(self, backbone, dropout=None, **kwargs):
        super().__init__(backbone, **kwargs)
        self.dropout_rate = default_dropout(backbone, dropout)
        self.dropout = Dropout(self.dropout_rate)
        self.scorer = self.dense(1, "scorer")
        self.build_weights()

    def call(self, inputs, training=False):
        ids = inputs["input_ids"]  # [batch, choices, step]
        shape = tf.shape(ids)
        segments = inputs.get("token_type_ids")
        if segments is not None:
            segments = tf.reshape(segments, [-1, shape[2]])
        pooled = self.encode(tf.reshape(ids, [-1, shape[2]]), segments, training,
                             inputs.get("head_mask"))["pooled_output"]  # [batch * choices, hidden]
        scores = self.scorer(self.dropout(pooled, training=training))  # [batch * choices, 1]
        return tf.reshape(scores, shape[:2])  # [batch, choices]

    def loss_and_metrics(self, batch, training=False):
        """Cross-entropy over the choices and the accuracy of the best-scored one."""
        logits = self(batch, training=training)
        labels = batch["labels"]
        loss, accuracy = sparse_cross_entropy(labels, logits, tf.ones_like(labels))
        return loss, {"loss": loss, "accuracy": accuracy}

    def get_config(self):
        return {**super().get_config(), "dropout": self.dropout_rate}


def best_span(start_logits, end_logits, max_length: int = 30, allowed=None):
    """The span (start, end) maximising ``start_logits[start] + end_logits[end]``.

    Candidates have ``start <= end``, ``end - start + 1 <= max_length`` and, when ``allowed``
    is given, both ends at allowed positions (e.g. the passage: segment 1, not padding).
    Every pair is scored at once: a [step, step] table per example, masked, then arg-maxed.

    Args:
        start_logits, end_logits: numpy [..., step], e.g. [step] for one example or
            [batch, step] for many.
        allowed: bool [..., step] or None (every position).
    Returns:
        (start, end): int arrays [...] (numpy integers for one example). Where no span is
        allowed, (0, 0).
    """
    start_logits, end_logits = np.asarray(start_logits), np.asarray(end_logits)
    step = start_logits.shape[-1]
    scores = start_logits[..., :, np.newaxis] + end_logits[..., np.newaxis, :]  # [..., start, end]
    length = np.arange(step)[np.newaxis, :] - np.arange(step)[:, np.newaxis] + 1  # end - start + 1
    valid = (length >= 1) & (length <= max_length)  # [step, step]
    if allowed is not None:
        allowed = np.asarray(allowed, bool)
        valid = valid & allowed[..., :, np.newaxis] & allowed[..., np.newaxis, :]
    scores = np.where(valid, scores, -np.inf)
    flat = scores.reshape(scores.shape[:-2] + (step * step,)).argmax(axis=-1)
    return np.unravel_index(flat, (step, step))
