"""GPT (Radford et al., 2018): a decoder-only Transformer trained as a causal language model.

GPT keeps the Transformer's encoder layers (self-attention + feed-forward) but stacks only one
set of them, under a causal mask, and predicts the next token at every position. Like the
original tutorial it also carries a next-sentence head, so GPT and BERT share one interface.

Run ``python -m nlp_tutorials.gpt train`` to train it on MRPC, then
``python -m nlp_tutorials.gpt generate --prompt "the company said"`` to continue a sentence.
"""

import keras
import tensorflow as tf

from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.speed.kernels import LayerNorm
from nlp_tutorials.models.losses import sparse_cross_entropy
from nlp_tutorials.models.masks import cached_causal_mask
from nlp_tutorials.models.pruning import pruned_copy
from nlp_tutorials.models.layers import Block, Embeddings, Encoder, activation, truncated_normal
from nlp_tutorials.models.transformer import Transformer

NSP_WEIGHT = 0.2  # the original tutorial's weight of the next-sentence loss


class LanguageModelHead(Block):
    """Token vectors -> vocabulary logits, with the output matrix tied to the word embeddings.

    As BERT's reference code: dense + activation + LayerNorm, then a projection onto the
    (shared) word-embedding matrix plus a bias of its own.
    ``call(x, word_embeddings)``: [batch, positions, hidden], [vocab, hidden]
    -> [batch, positions, vocab].
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.transform = keras.layers.Dense(
            config.hidden_size, activation=activation(config.hidden_act),
            kernel_initializer=truncated_normal(config), name="transform")
        self.norm = LayerNorm(epsilon=config.layer_norm_eps, name="norm")
        self.bias = self.add_weight(shape=(config.vocab_size,), initializer="zeros", name="bias")

    def call(self, x, word_embeddings):
        x = self.norm(self.transform(x))  # [batch, positions, hidden]
        table = tf.cast(word_embeddings, x.dtype)  # [vocab, hidden]
        # One 2-D matmul: a batched one would broadcast the table over the batch, and its
        # gradient would then sum [batch, vocab, hidden] partial products (measured: ~20% of a
        # pre-training step).
        flat = tf.reshape(x, [-1, tf.shape(x)[-1]])  # [batch * positions, hidden]
        logits = tf.matmul(flat, table, transpose_b=True) + tf.cast(self.bias, x.dtype)
        return tf.reshape(logits, tf.concat([tf.shape(x)[:-1], [-1]], axis=0))


class Pooler(Block):
    """dense + tanh on one summary position: [batch, step, hidden], [batch] -> [batch, hidden]."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.dense = keras.layers.Dense(config.hidden_size, activation="tanh",
                                        kernel_initializer=truncated_normal(config), name="dense")

    def call(self, sequence_output, positions):
        return self.dense(tf.gather(sequence_output, positions, batch_dims=1))


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class GPT(Transformer):
    """Decoder-only Transformer: word + segment + position embeddings, one causal stack.

    What it changes from :class:`Transformer`: the layers (one stack, no cross-attention),
    ``call``'s inputs and outputs, ``step()`` (next-token loss) and decoding; the mask stays the
    Transformer's causal one.

    ``call({"input_ids", "token_type_ids"})`` with both [batch, step] (optional:
    ``attention_mask`` [batch, step], ``head_mask`` [heads] or [layers, heads]) returns a dict:
    ``sequence_output`` [batch, step, hidden], ``pooled_output`` [batch, hidden],
    ``hidden_states`` (the embeddings' output and each layer's, [batch, step, hidden] each) and
    ``attentions`` ``{"encoder": [one [batch, heads, step, step] tensor per layer]}``.
    Heads: :meth:`pretraining_heads` maps those to token logits and next-sentence logits.
    """

    def build_layers(self):
        config = self.config
        self.embeddings = Embeddings(config, config.vocab_size, True, name="embeddings")
        self.encoder = Encoder(config, name="encoder")
        self.pooler = Pooler(config, name="pooler")
        self.lm_head = LanguageModelHead(config, name="lm_head")
        self.nsp_head = keras.layers.Dense(2, kernel_initializer=truncated_normal(config),
                                           name="nsp_head")

    def build_weights(self):
        ids = tf.constant([[1, 1]], tf.int32)
        outputs = self({"input_ids": ids, "token_type_ids": tf.zeros_like(ids)}, training=False)
        self.pretraining_heads(outputs["sequence_output"], outputs["pooled_output"])

    def summary_positions(self, mask):
        """Index per sequence of the token the pooler reads: the first one that attends to
        every real token. Under GPT's causal mask that is the last real token; under BERT's
        bidirectional one, ``[CLS]`` at position 0.

        ``mask``: additive, [batch, 1, step, step] or [batch, 1, 1, step] -> [batch] int32.
        """
        visible = tf.equal(mask[:, 0], 0.0)  # [batch, step or 1, step]: query sees key
        real = tf.reduce_any(visible, axis=1, keepdims=True)  # [batch, 1, step]: seen at all
        sees_all = tf.reduce_all(visible | ~real, axis=-1)  # [batch, step or 1]
        return tf.argmax(tf.cast(sees_all, tf.int32), axis=1, output_type=tf.int32)

    def call(self, inputs, training=False):
        ids = inputs["input_ids"]  # [batch, step]
        x = self.embeddings(ids, inputs.get("token_type_ids"), training=training)
        mask = self.mask(ids, inputs.get("attention_mask"))
        hidden_states, attentions, _ = self.encoder(
            x, mask, training=training, head_mask=self.layer_head_mask(inputs.get("head_mask")))
        x = hidden_states[-1]  # [batch, step, hidden]
        return {"sequence_output": x,
                "pooled_output": self.pooler(x, self.summary_positions(mask)),  # [batch, hidden]
                "hidden_states": hidden_states,
                "attentions": {"encoder": attentions}}

    def attention_vectors(self, inputs):
        """``call``'s attention probabilities and the queries and keys that made them.

        ``inputs`` as ``call`` takes them. Returns ``{"attentions", "queries", "keys"}``, each
        ``{"encoder": [one array per layer]}``: [batch, heads, step, step], [batch, heads, step,
        head_size] and [batch, heads, step, head_size] (inference mode). Layer i's queries and
        keys are projected from ``hidden_states[i]``, the input ``call`` returns for it.
        """
        outputs = self(inputs, training=False)
        blocks, states = self.encoder.blocks, outputs["hidden_states"]
        return {"attentions": outputs["attentions"],
                "queries": {"encoder": [b.attention.queries(x) for b, x in zip(blocks, states)]},
                "keys": {"encoder": [b.attention.project(x)["key"]
                                     for b, x in zip(blocks, states)]}}

    def layer_head_mask(self, head_mask):
        """``head_mask`` as [layers, heads] float32 (one [heads] row serves every layer).

        1 keeps a head, 0 switches it off, values between scale it; heads are numbered as in
        the unpruned model. None stays None. A mask of another shape raises UserError.
        """
        if head_mask is None:
            return None
        head_mask = tf.cast(head_mask, tf.float32)
        layers, heads = self.config.num_hidden_layers, self.config.num_attention_heads
        if head_mask.shape == (heads,):
            return tf.tile(head_mask[tf.newaxis], [layers, 1])
        if head_mask.shape != (layers, heads):
            raise UserError(f"head_mask of shape {list(head_mask.shape)}: expected [{heads}] "
                            f"(heads) or [{layers}, {heads}] (layers, heads)")
        return head_mask

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
        if head_mask is not None:
            inputs["head_mask"] = self.layer_head_mask(head_mask)  # a bad shape fails here
        outputs = self(inputs, training=training)
        encoded = {"sequence_output": outputs["sequence_output"],
                   "pooled_output": outputs["pooled_output"],
                   "attentions": outputs["attentions"]["encoder"]}
        if output_hidden_states:
            encoded["hidden_states"] = outputs["hidden_states"]
        return encoded

    def with_heads_pruned(self, heads_to_prune: dict) -> "GPT":
        """A copy of this model without the attention heads ``{layer: [head, ...]}``.

        Heads are numbered as in the unpruned model; those pruned before stay pruned. The
        pruned heads' columns leave the query, key and value weights and their rows the output
        weights, so the copy computes less, and its config's ``pruned_heads`` records them
        (saving and loading keep them). Its outputs equal this model's with those heads masked
        to 0. This model is left as it is: Keras layers cannot shrink once built.

        Example::

            model = model.with_heads_pruned({0: [1, 3], 5: [2]})
        """
        return pruned_copy(self, heads_to_prune)

    def prune_heads(self, heads_to_prune: dict):
        """Refused: HuggingFace's ``prune_heads`` changes the model in place, which a built
        Keras model cannot do, and a copy returned under that name would be dropped by code
        written for HuggingFace, pruning nothing. Use :meth:`with_heads_pruned`."""
        raise NotImplementedError(
            f"prune_heads: HuggingFace's prunes the model in place, which this Keras model "
            f"cannot do (its layers cannot shrink once built); use "
            f"model = model.with_heads_pruned({heads_to_prune!r}), which returns a pruned copy")

    def pretraining_heads(self, sequence_output, pooled_output):
        """(token logits [batch, positions, vocab], next-sentence logits [batch, 2])."""
        return (self.lm_head(sequence_output, self.embeddings.word_embeddings),
                self.nsp_head(pooled_output))

    def start_cache(self, inputs):
        """The cache decoding starts from, for the batch of ``inputs["input_ids"]`` [batch,
        step]: per layer, keys and values of no positions yet (the prompt is fed by
        :meth:`decode_step`)."""
        batch = tf.shape(inputs["input_ids"])[0]
        return [block.attention.empty_cache(batch) for block in self.encoder.blocks]

    def decode_step(self, ids, cache):
        """Feed ids [batch, new] that follow the cached positions (segment 0, inference only).

        Returns (next-token logits [batch, new, vocab], the cache with these positions added).
        The logits equal those of the full model on the whole prefix (no padding in it).
        """
        past = tf.shape(cache[0]["key"])[2]
        x = self.embeddings(ids, start=past)  # [batch, new, hidden]
        hidden_states, _, cache = self.encoder(x, cached_causal_mask(past, tf.shape(ids)[1]),
                                               cache=cache)
        return self.lm_head(hidden_states[-1], self.embeddings.word_embeddings), cache

    def step(self, batch, training=True):
        """One optimisation step: next-token loss (padding ignored) + 0.2 x next-sentence loss.

        ``batch``: ``input_ids``, ``token_type_ids`` [batch, step], ``nsp_labels`` [batch].
        Returns scalar metrics: loss, lm_loss, lm_accuracy, nsp_loss, nsp_accuracy.
        """
        ids = batch["input_ids"]
        with tf.GradientTape() as tape:
            outputs = self(batch, training=training)
            lm_logits, nsp_logits = self.pretraining_heads(outputs["sequence_output"][:, :-1],
                                                           outputs["pooled_output"])
            targets = ids[:, 1:]  # position i predicts token i + 1
            lm_loss, lm_accuracy = sparse_cross_entropy(
                targets, lm_logits, tf.not_equal(targets, self.config.pad_token_id))
            nsp_loss, nsp_accuracy = sparse_cross_entropy(
                batch["nsp_labels"], nsp_logits, tf.ones_like(batch["nsp_labels"]))
            loss = lm_loss + NSP_WEIGHT * nsp_loss
        if training:
            self.apply_gradients(tape, loss)
        return {"loss": loss, "lm_loss": lm_loss, "lm_accuracy": lm_accuracy,
                "nsp_loss": nsp_loss, "nsp_accuracy": nsp_accuracy}
