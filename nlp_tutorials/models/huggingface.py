"""HuggingFace's interface on the lesson models, kept beside them so their files stay the lesson.

:class:`HuggingFaceBackbone` (a base of ``GPT``, so of ``BERT`` too) gives BertModel's call,
``encode(input_ids, token_type_ids, attention_mask, head_mask, output_hidden_states)``, and
refuses ``prune_heads``; :class:`PretrainedCheckpoints` (a base of ``BERT``) reads and writes
HuggingFace's and Google's checkpoint folders through :mod:`nlp_tutorials.models.pretrained`.
"""
from nlp_tutorials.models import pretrained
from nlp_tutorials.models.masks import layer_head_mask
from nlp_tutorials.system.errors import UserError


class HuggingFaceBackbone:
    """What code written for HuggingFace's ``BertModel`` calls on a GPT or BERT."""

    def encode(self, input_ids, token_type_ids=None, attention_mask=None, head_mask=None,
               output_hidden_states=False, training=False):
        """Run the backbone: ids, segments and the 1/0 ``attention_mask``, all [batch, step];
        ``head_mask`` [heads] or [layers, heads] multiplies each head's attention (0: off).

        Returns a dict: ``sequence_output`` [batch, step, hidden], ``pooled_output``
        [batch, hidden] and ``attentions``, one [batch, heads, step, step] tensor per layer;
        with ``output_hidden_states``, also ``hidden_states``: the embeddings' output and each
        layer's, [batch, step, hidden] each (layers + 1 of them), as HuggingFace's BertModel.
        Sequences longer than ``max_position_embeddings`` are refused (positions past it have
        no embedding): truncate when tokenizing instead, which cuts a pair's longer sentence
        first.
        """
        length = input_ids.shape[-1]
        if length is not None and length > self.config.max_position_embeddings:
            raise UserError(f"input of {length} tokens is longer than this model's "
                            f"max_position_embeddings={self.config.max_position_embeddings}; "
                            f"truncate it when tokenizing")
        inputs = {"input_ids": input_ids}
        if token_type_ids is not None:
            inputs["token_type_ids"] = token_type_ids
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask
        if head_mask is not None:  # a bad shape fails here
            inputs["head_mask"] = layer_head_mask(head_mask, self.config)
        outputs = self(inputs, training=training)
        encoded = {"sequence_output": outputs["sequence_output"],
                   "pooled_output": outputs["pooled_output"],
                   "attentions": outputs["attentions"]["encoder"]}
        if output_hidden_states:
            encoded["hidden_states"] = outputs["hidden_states"]
        return encoded

    def prune_heads(self, heads_to_prune: dict):
        """Refused: HuggingFace's ``prune_heads`` changes the model in place, which a built
        Keras model cannot do, and a copy returned under that name would be dropped by code
        written for HuggingFace, pruning nothing. Use ``with_heads_pruned``
        (:class:`nlp_tutorials.models.pruning.HeadPruning`)."""
        raise NotImplementedError(
            f"prune_heads: HuggingFace's prunes the model in place, which this Keras model "
            f"cannot do (its layers cannot shrink once built); use "
            f"model = model.with_heads_pruned({heads_to_prune!r}), which returns a pruned copy")


class PretrainedCheckpoints:
    """Real pretrained weights in, and HuggingFace's folder out, for a BERT."""

    @classmethod
    def from_pretrained(cls, path, printer=print):
        """A model with real pretrained weights from a folder in HuggingFace's format
        (``config.json``, ``model.safetensors``) or Google's (``bert_config.json``,
        ``bert_model.ckpt.*``); see :mod:`nlp_tutorials.models.pretrained`.

        Pre-training heads the checkpoint lacks keep their fresh initialisation, and
        ``printer`` gets a one-line note saying so. Bad folders raise UserError.
        """
        config = pretrained.read_config(path)
        weights = pretrained.read_weights(path, config, printer)  # names checked before building
        model = cls(config)
        pretrained.assign_weights(model, weights, path)
        return model

    def save_pretrained(self, directory):
        """Write HuggingFace's ``config.json`` and ``model.safetensors`` into ``directory``.

        :meth:`from_pretrained` and transformers' ``BertForPreTraining.from_pretrained`` both
        read the folder back. Returns its Path.
        """
        return pretrained.save_pretrained(self, directory)
