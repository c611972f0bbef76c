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
from nlp_tutorials.models.huggingface import HuggingFaceBackbone
from nlp_tutorials.models.layers import Block, Embeddings, Encoder, activation, truncated_normal
from nlp_tutorials.models.losses import sparse_cross_entropy
from nlp_tutorials.models.masks import cached_causal_mask, layer_head_mask
from nlp_tutorials.models.pruning import HeadPruning
from nlp_tutorials.models.transformer import Transformer
from nlp_tutorials.speed.kernels import LayerNorm

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
class GPT(HuggingFaceBackbone, HeadPruning, Transformer):
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
    Beside the lesson, from its other bases: HuggingFace's ``encode`` and ``prune_heads``
    (:mod:`~nlp_tutorials.models.huggingface`) and ``with_heads_pruned``
    (:mod:`~nlp_tutorials.models.pruning`). Example (layer 0's attention, sequence 0, head 0)::

        >>> from nlp_tutorials.models.config import ModelConfig
        >>> model = GPT(ModelConfig("gpt", vocab_size=20, hidden_size=8, num_hidden_layers=2,
        ...                         num_attention_heads=2, intermediate_size=16))
        >>> ids = tf.constant([[2, 5, 6]])
        >>> out = model({"input_ids": ids, "token_type_ids": tf.zeros_like(ids)})
        >>> (out["attentions"]["encoder"][0][0, 0] > 0).numpy().astype(int)  # causal
        array([[1, 0, 0],
               [1, 1, 0],
               [1, 1, 1]])
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
        head_mask = layer_head_mask(inputs.get("head_mask"), self.config)  # [layers, heads]
        hidden_states, attentions, _ = self.encoder(x, mask, training=training, head_mask=head_mask)
        x = hidden_states[-1]  # [batch, step, hidden]
        return {"sequence_output": x,
                "pooled_output": self.pooler(x, self.summary_positions(mask)),  # [batch, hidden]
                "hidden_states": hidden_states,
                "attentions": {"encoder": attentions}}

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
