"""The Transformer (Vaswani et al., 2017) as a readable Keras model, and the family's base.

Run ``python -m nlp_tutorials.transformer train`` to teach it to translate dates.

Bottom up, after the additive masks of :mod:`nlp_tutorials.masks`:
:class:`MultiHeadAttention`, which returns its attention probabilities; :class:`FeedForward`;
:class:`EncoderLayer` / :class:`DecoderLayer`, sub-layers wrapped in dropout, a residual and
LayerNorm (post-norm, as the paper and BERT); the :class:`Encoder` / :class:`Decoder` stacks;
:class:`Embeddings`; and :class:`Transformer`, the encoder-decoder model ``GPT`` and ``BERT``
build on. Faster versions of standard operations come from :mod:`nlp_tutorials.kernels`.

Attention probabilities travel as return values, never as attributes set inside ``call``.
Decoding one token at a time passes a ``cache`` down the stacks: each attention layer keeps the
keys and values of the positions it has seen, so a new token costs one position's work.
"""

if __name__ == "__main__":
    # `python -m nlp_tutorials.transformer` hands over to the CLI before TensorFlow is imported,
    # so --help and argument errors answer at once; the CLI imports this module again by name.
    from nlp_tutorials.cli import main

    raise SystemExit(main("transformer"))

import keras  # noqa: E402  (after the CLI hand-over above)
import numpy as np
import tensorflow as tf

from nlp_tutorials.config import ModelConfig
from nlp_tutorials.kernels import (
    Dropout, LayerNorm, gelu, in_chunks, transposed_feed_forward)
from nlp_tutorials.losses import sparse_cross_entropy
from nlp_tutorials.masks import cached_causal_mask, causal_mask, padding_mask
from nlp_tutorials.trainable import TrainableModel


def truncated_normal(config: ModelConfig):
    """BERT's weight initialiser: normal with std ``initializer_range``, cut at 2 std."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def activation(name: str):
    """"gelu" is :func:`gelu`; other names are Keras activations."""
    if name == "gelu":
        return gelu
    return keras.activations.get(name)


class MultiHeadAttention(keras.layers.Layer):
    """Scaled dot-product attention over ``num_attention_heads`` heads.

    ``call(query, memory, mask)`` returns ``(output, probs, keys_values)``: output [batch,
    q_step, hidden], the attention probabilities [batch, heads, q_step, k_step] (each row sums
    to 1) and the attended keys and values, ``{"key", "value"}`` each [batch, heads, k_step,
    head_size]: the cache a decoder passes back as ``cache=`` for the next position.

    With ``cache`` (the keys and values of positions seen before) those of ``memory`` are
    appended to it. ``memory=None`` means the cache already holds the whole memory:
    cross-attention projects the encoder output once. ``head_mask`` [num_attention_heads]
    multiplies each head's probabilities (0 switches a head off), as returned and as used.

    ``kept_heads``: the heads this layer has, numbered as in the unpruned model (default all);
    a pruned layer's query, key and value project onto fewer heads.
    """

    def __init__(self, config: ModelConfig, kept_heads=None, **kwargs):
        super().__init__(**kwargs)
        self.kept_heads = list(range(config.num_attention_heads) if kept_heads is None
                               else kept_heads)
        self.heads = len(self.kept_heads)
        self.head_size = config.head_size
        init = truncated_normal(config)
        width = self.heads * self.head_size  # hidden_size unless heads were pruned
        self.query = keras.layers.Dense(width, kernel_initializer=init, name="query")
        self.key = keras.layers.Dense(width, kernel_initializer=init, name="key")
        self.value = keras.layers.Dense(width, kernel_initializer=init, name="value")
        self.output_dense = keras.layers.Dense(config.hidden_size, kernel_initializer=init,
                                               name="output")
        self.dropout = Dropout(config.attention_probs_dropout_prob)

    def split_heads(self, x):
        """[batch, step, hidden] -> [batch, heads, step, head_size]"""
        batch, step = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, step, self.heads, self.head_size])
        return tf.transpose(x, [0, 2, 1, 3])

    def project(self, memory):
        """Keys and values of ``memory`` [batch, step, hidden]: [batch, heads, step, head_size]."""
        return {"key": self.split_heads(self.key(memory)),
                "value": self.split_heads(self.value(memory))}

    def queries(self, x):
        """Queries of ``x`` [batch, step, hidden]: [batch, heads, step, head_size]. With the keys
        of :meth:`project`, ``softmax(q k^T / sqrt(head_size) + mask)`` is what ``call``
        returns as probabilities (the explorer shows these vectors)."""
        return self.split_heads(self.query(x))

    def empty_cache(self, batch):
        """A cache of no positions yet: key and value [batch, heads, 0, head_size]."""
        empty = tf.zeros([batch, self.heads, 0, self.head_size], self.compute_dtype)
        return {"key": empty, "value": empty}

    def call(self, query, memory, mask, training=False, cache=None, head_mask=None):
        q = self.queries(query)                    # [batch, heads, q_step, head_size]
        if memory is None:
            kv = cache
        elif cache is None:
            kv = self.project(memory)
        else:
            new = self.project(memory)
            kv = {name: tf.concat([cache[name], new[name]], axis=2) for name in new}
        k, v = kv["key"], kv["value"]               # [batch, heads, k_step, head_size]
        scores = tf.matmul(q, k, transpose_b=True) / np.sqrt(self.head_size).astype("float32")
        # Keras casts a float16 model's float inputs, the mask included, to float16; the mask's
        # -1e4 is exact there, and softmax runs in float32 so it neither overflows nor loses it.
        scores = tf.cast(scores, tf.float32) + tf.cast(mask, tf.float32)  # [b, h, q_step, k_step]
        probs = tf.nn.softmax(scores, axis=-1)
        if head_mask is not None:
            kept = tf.gather(tf.cast(head_mask, probs.dtype), self.kept_heads)  # [heads]
            probs = probs * kept[:, tf.newaxis, tf.newaxis]
        context = tf.matmul(tf.cast(self.dropout(probs, training=training), v.dtype), v)
        context = tf.transpose(context, [0, 2, 1, 3])     # [batch, q_step, heads, head_size]
        batch, step = tf.shape(context)[0], tf.shape(context)[1]
        context = tf.reshape(context, [batch, step, self.heads * self.head_size])
        return self.output_dense(context), probs, kv


class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network: dense(intermediate, act) -> dense(hidden).

    ``call(x)`` maps [batch, step, hidden] to [batch, step, hidden]: ``output(intermediate(x))``,
    computed on transposed activations by :func:`~nlp_tutorials.kernels.transposed_feed_forward`
    (same result, faster backward pass on CPU). With ``chunk_size_feed_forward`` in the config
    it runs that many positions at a time (:func:`~nlp_tutorials.kernels.in_chunks`): the same
    result with a smaller intermediate activation.
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        init = truncated_normal(config)
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, activation=activation(config.hidden_act),
            kernel_initializer=init, name="intermediate")
        self.output_dense = keras.layers.Dense(
            config.hidden_size, kernel_initializer=init, name="output")
        self.chunk_size = config.chunk_size_feed_forward

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate.units,))

    def call(self, x):
        if self.chunk_size:
            return in_chunks(self.positionwise, x, self.chunk_size)
        return self.positionwise(x)

    def positionwise(self, x):
        return transposed_feed_forward(self.intermediate, self.output_dense, x)


class ResidualNorm(keras.layers.Layer):
    """``LayerNorm(x + Dropout(sublayer_output))``: the wrapper around every sub-layer."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.norm = LayerNorm(epsilon=config.layer_norm_eps, name="norm")

    def call(self, x, sublayer_output, training=False):
        return self.norm(x + self.dropout(sublayer_output, training=training))


class EncoderLayer(keras.layers.Layer):
    """Self-attention then feed-forward, each wrapped in residual + LayerNorm."""

    def __init__(self, config: ModelConfig, kept_heads=None, **kwargs):
        super().__init__(**kwargs)
        self.attention = MultiHeadAttention(config, kept_heads, name="attention")
        self.attention_norm = ResidualNorm(config, name="attention_norm")
        self.ffn = FeedForward(config, name="ffn")
        self.ffn_norm = ResidualNorm(config, name="ffn_norm")

    def call(self, x, mask, training=False, cache=None, head_mask=None):
        """Returns x [batch, step, hidden], probs [batch, heads, step, k_step] and the
        attention's keys and values (``cache`` with this step's appended)."""
        attended, probs, keys_values = self.attention(x, x, mask, training=training, cache=cache,
                                                      head_mask=head_mask)
        x = self.attention_norm(x, attended, training=training)
        x = self.ffn_norm(x, self.ffn(x), training=training)
        return x, probs, keys_values


class DecoderLayer(keras.layers.Layer):
    """Masked self-attention, attention over the encoder output, then feed-forward."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.self_attention = MultiHeadAttention(config, name="self_attention")
        self.self_norm = ResidualNorm(config, name="self_norm")
        self.cross_attention = MultiHeadAttention(config, name="cross_attention")
        self.cross_norm = ResidualNorm(config, name="cross_norm")
        self.ffn = FeedForward(config, name="ffn")
        self.ffn_norm = ResidualNorm(config, name="ffn_norm")

    def call(self, x, memory, self_mask, memory_mask, training=False, cache=None):
        """Returns x [batch, t_step, hidden], self- and cross-attention probs [batch, heads,
        t_step, t_step or s_step], and the cache ``{"self": ..., "cross": ...}`` of both
        attentions' keys and values. With a ``cache``, ``memory`` may be None."""
        cache = cache or {"self": None, "cross": None}
        attended, self_probs, self_cache = self.self_attention(
            x, x, self_mask, training=training, cache=cache["self"])
        x = self.self_norm(x, attended, training=training)
        attended, cross_probs, cross_cache = self.cross_attention(
            x, memory, memory_mask, training=training, cache=cache["cross"])
        x = self.cross_norm(x, attended, training=training)
        x = self.ffn_norm(x, self.ffn(x), training=training)
        return x, self_probs, cross_probs, {"self": self_cache, "cross": cross_cache}


class Encoder(keras.layers.Layer):
    """A stack of ``num_hidden_layers`` encoder layers (with the config's heads pruned)."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [EncoderLayer(config, config.kept_heads(i), name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]

    def call(self, x, mask, training=False, cache=None, head_mask=None):
        """Returns the hidden states, its input and each layer's output ([batch, step, hidden],
        layers + 1 of them: the last is the stack's output), each layer's probs [batch, heads,
        step, k_step], and each layer's keys and values. ``cache``: those of earlier
        positions; ``head_mask``: [layers, num_attention_heads], or None."""
        hidden_states, attentions, new_cache = [x], [], []
        for i, block in enumerate(self.blocks):
            x, probs, keys_values = block(x, mask, training=training,
                                          cache=None if cache is None else cache[i],
                                          head_mask=None if head_mask is None else head_mask[i])
            hidden_states.append(x)
            attentions.append(probs)
            new_cache.append(keys_values)
        return hidden_states, attentions, new_cache


class Decoder(keras.layers.Layer):
    """A stack of decoder layers; returns output, self- and cross-attention probs per layer."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [DecoderLayer(config, name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]

    def call(self, x, memory, self_mask, memory_mask, training=False, cache=None):
        """Returns x, each layer's self- and cross-attention probs, and each layer's cache (see
        DecoderLayer); ``cache``: the list of those of earlier positions."""
        self_attentions, cross_attentions, new_cache = [], [], []
        for i, block in enumerate(self.blocks):
            x, self_probs, cross_probs, layer_cache = block(
                x, memory, self_mask, memory_mask, training=training,
                cache=None if cache is None else cache[i])
            self_attentions.append(self_probs)
            cross_attentions.append(cross_probs)
            new_cache.append(layer_cache)
        return x, self_attentions, cross_attentions, new_cache


class Embeddings(keras.layers.Layer):
    """Word + learned position (+ segment) embeddings, then LayerNorm and dropout.

    ``call(ids, segments=None, start=0)``: ids and segments [batch, step] -> [batch, step,
    hidden]; the ids sit at positions ``start``, ``start + 1``, ... (``start`` > 0 when decoding
    continues after cached positions).
    ``word_embeddings`` [vocab, hidden] is exposed so an output layer can share it.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, with_segments: bool, **kwargs):
        super().__init__(**kwargs)
        init = truncated_normal(config)
        self.words = keras.layers.Embedding(vocab_size, config.hidden_size,
                                            embeddings_initializer=init, name="words")
        self.positions = keras.layers.Embedding(config.max_position_embeddings,
                                                config.hidden_size,
                                                embeddings_initializer=init, name="positions")
        self.segments = (keras.layers.Embedding(config.type_vocab_size, config.hidden_size,
                                                embeddings_initializer=init, name="segments")
                         if with_segments else None)
        self.norm = LayerNorm(epsilon=config.layer_norm_eps, name="norm")
        self.dropout = Dropout(config.hidden_dropout_prob)

    @property
    def word_embeddings(self):
        return self.words.embeddings

    def call(self, ids, segments=None, training=False, start=0):
        positions = tf.range(start, start + tf.shape(ids)[1])
        x = self.words(ids) + self.positions(positions)[tf.newaxis]
        if self.segments is not None:
            x = x + self.segments(tf.zeros_like(ids) if segments is None else segments)
        return self.dropout(self.norm(x), training=training)  # [batch, step, hidden]


def _add_vectors(vectors, stack, attention, query_input, memory):
    """Append one attention layer's queries and keys (of its inputs) to ``vectors``' ``stack``."""
    vectors["queries"][stack].append(attention.queries(query_input))
    vectors["keys"][stack].append(attention.project(memory)["key"])


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class Transformer(TrainableModel):
    """Encoder-decoder Transformer for sequence-to-sequence tasks, and the family's base class.

    What every model of the family shares, and keeps the meaning of when it overrides it:

    - ``Transformer(config)`` builds its layers (:meth:`build_layers`) and every weight
      (:meth:`build_weights`); ``get_config``/``from_config`` round-trip the config;
    - ``call(inputs, training)``: a dict of [batch, step] tensors in, a dict out, with
      ``attentions``: ``{stack name: [one [batch, heads, q_step, k_step] tensor per layer]}``;
    - :meth:`mask`: the additive self-attention mask of a stack that reads ``ids``;
    - :meth:`step`: one optimisation step on a batch dict (``TrainableModel`` compiles it and
      runs it under Keras' ``fit``);
    - :meth:`start_cache` / :meth:`decode_step`: generation one token at a time;
    - :meth:`attend` / :attr:`attentions`: attention maps captured for export.

    Here, ``call`` takes ``src_ids`` [batch, s_step] and ``tgt_ids`` [batch, t_step] (the
    decoder input, starting with a start token) and returns ``logits`` [batch, t_step,
    target_vocab] and the ``encoder``, ``decoder`` and ``encoder_decoder`` attentions.
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self._last_attentions = None
        self.build_layers()
        self.build_weights()

    def build(self, input_shape=None):
        # Sub-layers create their weights on their first call; build_weights() makes that call.
        self.built = True

    def build_layers(self):
        """Create the sub-layers (their weights come with the first call)."""
        config = self.config
        target_vocab = config.target_vocab_size or config.vocab_size
        self.src_embeddings = Embeddings(config, config.vocab_size, False, name="src_embeddings")
        self.tgt_embeddings = Embeddings(config, target_vocab, False, name="tgt_embeddings")
        self.encoder = Encoder(config, name="encoder")
        self.decoder = Decoder(config, name="decoder")
        self.output_layer = keras.layers.Dense(
            target_vocab, kernel_initializer=truncated_normal(config), name="output_layer")

    def build_weights(self):
        """Create every weight by running a tiny input, so the model saves and loads at once."""
        ids = tf.constant([[1, 1]], tf.int32)
        self({"src_ids": ids, "tgt_ids": ids}, training=False)

    def mask(self, ids, attention_mask=None):
        """Causal: position i attends to real tokens at positions <= i. [batch, 1, step, step]

        This is the decoder's mask (it must not see the tokens it is about to predict); the
        encoder reads the whole source, so it takes :func:`padding_mask` instead. Real tokens
        are those not equal to ``pad_token_id``, or where ``attention_mask`` [batch, step] is 1
        when it is given.
        """
        return causal_mask(ids, self.config.pad_token_id, attention_mask)

    def call(self, inputs, training=False):
        src_ids, tgt_ids = inputs["src_ids"], inputs["tgt_ids"]
        src_mask = padding_mask(src_ids, self.config.pad_token_id)  # [batch, 1, 1, s_step]
        encoded, enc_probs, _ = self.encoder(self.src_embeddings(src_ids, training=training),
                                             src_mask, training=training)
        memory = encoded[-1]  # [batch, s_step, hidden]
        x, dec_probs, cross_probs, _ = self.decoder(
            self.tgt_embeddings(tgt_ids, training=training), memory, self.mask(tgt_ids),
            src_mask, training=training)
        return {"logits": self.output_layer(x),  # [batch, t_step, target_vocab]
                "attentions": {"encoder": enc_probs, "decoder": dec_probs,
                               "encoder_decoder": cross_probs}}

    def attention_vectors(self, inputs):
        """The attention probabilities of ``call`` and the queries and keys that made them.

        Returns ``{"attentions": ..., "queries": ..., "keys": ...}``, each ``{stack name: [one
        array per layer]}``: probabilities [batch, heads, q_step, k_step], queries [batch,
        heads, q_step, head_size], keys [batch, heads, k_step, head_size] (inference mode).
        Each layer's attention inputs are recomputed from the layer's own input, so nothing is
        kept on the layers.
        """
        src_ids, tgt_ids = inputs["src_ids"], inputs["tgt_ids"]
        src_mask = padding_mask(src_ids, self.config.pad_token_id)  # [batch, 1, 1, s_step]
        encoded, enc_probs, _ = self.encoder(self.src_embeddings(src_ids), src_mask)
        memory = encoded[-1]  # [batch, s_step, hidden]
        vectors = {"queries": {"encoder": [], "decoder": [], "encoder_decoder": []},
                   "keys": {"encoder": [], "decoder": [], "encoder_decoder": []}}
        for block, x in zip(self.encoder.blocks, encoded):
            _add_vectors(vectors, "encoder", block.attention, x, x)
        x, self_mask = self.tgt_embeddings(tgt_ids), self.mask(tgt_ids)
        dec_probs, cross_probs = [], []
        for block in self.decoder.blocks:
            _add_vectors(vectors, "decoder", block.self_attention, x, x)
            # The cross-attention reads the self-attention sub-layer's output.
            attended = block.self_attention(x, x, self_mask)[0]
            _add_vectors(vectors, "encoder_decoder", block.cross_attention,
                         block.self_norm(x, attended), memory)
            x, self_probs, probs, _ = block(x, memory, self_mask, src_mask)
            dec_probs.append(self_probs)
            cross_probs.append(probs)
        vectors["attentions"] = {"encoder": enc_probs, "decoder": dec_probs,
                                 "encoder_decoder": cross_probs}
        return vectors

    def start_cache(self, inputs):
        """The state decoding starts from, for the batch of ``inputs`` (a dict as ``call``'s).

        Here ``inputs["src_ids"]`` [batch, s_step] is encoded once; the cache holds the source
        mask and, per decoder layer, an empty self-attention cache and the cross-attention keys
        and values of the encoder output.
        """
        src_ids = inputs["src_ids"]
        src_mask = padding_mask(src_ids, self.config.pad_token_id)  # [batch, 1, 1, s_step]
        memory = self.encoder(self.src_embeddings(src_ids), src_mask)[0][-1]
        batch = tf.shape(src_ids)[0]
        layers = [{"self": block.self_attention.empty_cache(batch),
                   "cross": block.cross_attention.project(memory)}
                  for block in self.decoder.blocks]
        return {"src_mask": src_mask, "layers": layers}

    def decode_step(self, ids, cache):
        """Feed ids [batch, new] that follow the cached positions (inference only).

        Returns (logits [batch, new, vocab], the cache with these positions added). The logits
        equal those of a full ``call`` on the whole prefix (no padding in it).
        """
        past = tf.shape(cache["layers"][0]["self"]["key"])[2]
        x = self.tgt_embeddings(ids, start=past)  # [batch, new, hidden]
        self_mask = cached_causal_mask(past, tf.shape(ids)[1])
        x, _, _, layers = self.decoder(x, None, self_mask, cache["src_mask"], cache=cache["layers"])
        return self.output_layer(x), {"src_mask": cache["src_mask"], "layers": layers}

    def step(self, batch, training=True):
        """One optimisation step of teacher-forced next-token loss on the target.

        ``batch``: ``src_ids`` [batch, s_step], ``tgt_ids`` [batch, t_step] (start token first).
        The decoder reads ``tgt_ids[:, :-1]`` and predicts ``tgt_ids[:, 1:]``; padding is
        ignored. ``training=False`` only evaluates. Returns scalar metrics: loss,
        token_accuracy.
        """
        tgt_in, tgt_out = batch["tgt_ids"][:, :-1], batch["tgt_ids"][:, 1:]
        with tf.GradientTape() as tape:
            outputs = self({"src_ids": batch["src_ids"], "tgt_ids": tgt_in}, training=training)
            weights = tf.not_equal(tgt_out, self.config.pad_token_id)
            loss, accuracy = sparse_cross_entropy(tgt_out, outputs["logits"], weights)
        if training:
            self.apply_gradients(tape, loss)
        return {"loss": loss, "token_accuracy": accuracy}

    def attend(self, inputs):
        """Run the model in inference mode and keep its attention maps (as numpy).

        Returns the model's output dict; afterwards :attr:`attentions` holds
        ``{stack name: [one float32 array [batch, heads, q_step, k_step] per layer]}``.
        """
        outputs = self(inputs, training=False)
        self._last_attentions = {name: [np.asarray(p, np.float32) for p in probs]
                                 for name, probs in outputs["attentions"].items()}
        return outputs

    @property
    def attentions(self):
        """Attention maps of the last :meth:`attend` call (None before the first)."""
        return self._last_attentions

    def get_config(self):
        return {"config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(ModelConfig.from_dict(config["config"]))
