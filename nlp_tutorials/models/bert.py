"""BERT (Devlin et al., 2019): GPT's stack made bidirectional and trained to fill in blanks.

As a model, BERT differs from :class:`~nlp_tutorials.models.gpt.GPT` in two things only:

- ``mask()``: padding only, so every token attends to both its left and its right;
- ``step()``: the masked-LM loss at the chosen positions + 0.2 x the next-sentence loss.

``from_pretrained``/``save_pretrained`` (checkpoints) come from another base, kept outside the
lesson: :class:`~nlp_tutorials.models.huggingface.PretrainedCheckpoints`.

Run ``python -m nlp_tutorials.bert train`` to pre-train it on MRPC.
"""
import keras
import tensorflow as tf

from nlp_tutorials.models.gpt import GPT, NSP_WEIGHT
from nlp_tutorials.models.huggingface import PretrainedCheckpoints
from nlp_tutorials.models.losses import sparse_cross_entropy
from nlp_tutorials.models.masks import padding_mask


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class BERT(PretrainedCheckpoints, GPT):
    """Bidirectional encoder pre-trained with masked-LM and next-sentence prediction.

    Same inputs and outputs as :class:`GPT`; under the bidirectional mask the pooled output
    reads ``[CLS]`` (position 0). Example (layer 0's attention, sequence 0, head 0)::

        >>> from nlp_tutorials.models.config import ModelConfig
        >>> model = BERT(ModelConfig("bert", vocab_size=20, hidden_size=8, num_hidden_layers=2,
        ...                          num_attention_heads=2, intermediate_size=16))
        >>> ids = tf.constant([[2, 5, 0]])  # the last is [PAD]
        >>> out = model({"input_ids": ids, "token_type_ids": tf.zeros_like(ids)})
        >>> (out["attentions"]["encoder"][0][0, 0] > 0).numpy().astype(int)  # padding only
        array([[1, 1, 0],
               [1, 1, 0],
               [1, 1, 0]])
    """

    def mask(self, ids, attention_mask=None):
        """Padding only: every real token is visible from every position. [batch, 1, 1, step]

        Real tokens are those not equal to ``pad_token_id``, or where ``attention_mask``
        [batch, step] is 1 when it is given.
        """
        return padding_mask(ids, self.config.pad_token_id, attention_mask)

    def step(self, batch, training=True):
        """One optimisation step: masked-LM loss + 0.2 x next-sentence loss.

        ``batch``: ``input_ids`` (with masks applied), ``token_type_ids`` [batch, step];
        ``mlm_positions``, ``mlm_ids``, ``mlm_weights`` [batch, max_predictions] (the chosen
        positions, their original ids, 1.0 where a position is real); ``nsp_labels`` [batch]
        (0 = IsNext, 1 = NotNext). Vocabulary logits are computed at the chosen positions only:
        the projection onto the vocabulary is most of the model's work.
        Returns scalar metrics: loss, mlm_loss, mlm_accuracy, nsp_loss, nsp_accuracy.
        """
        with tf.GradientTape() as tape:
            outputs = self(batch, training=training)
            chosen = tf.gather(outputs["sequence_output"], batch["mlm_positions"], batch_dims=1)
            mlm_logits, nsp_logits = self.pretraining_heads(chosen, outputs["pooled_output"])
            mlm_loss, mlm_accuracy = sparse_cross_entropy(
                batch["mlm_ids"], mlm_logits, batch["mlm_weights"])  # [batch, predictions, vocab]
            nsp_loss, nsp_accuracy = sparse_cross_entropy(
                batch["nsp_labels"], nsp_logits, tf.ones_like(batch["nsp_labels"]))
            loss = mlm_loss + NSP_WEIGHT * nsp_loss
        if training:
            self.apply_gradients(tape, loss)
        return {"loss": loss, "mlm_loss": mlm_loss, "mlm_accuracy": mlm_accuracy,
                "nsp_loss": nsp_loss, "nsp_accuracy": nsp_accuracy}
