"""The Transformer's layers (Vaswani et al., 2017), bottom up.

After the additive masks of :mod:`nlp_tutorials.models.masks`: :class:`MultiHeadAttention`,
which returns its attention probabilities; :class:`FeedForward`; :class:`EncoderLayer` /
:class:`DecoderLayer`, sub-layers wrapped in dropout, a residual and LayerNorm (post-norm, as
the paper and BERT); the :class:`Encoder` / :class:`Decoder` stacks; and :class:`Embeddings`.
:mod:`nlp_tutorials.models.transformer` assembles them into models. Faster versions of standard
operations come from :mod:`nlp_tutorials.speed.kernels`.

Attention probabilities travel as return values, never as attributes set inside ``call``.
Decoding one token at a time passes a ``cache`` down the stacks: each attention layer keeps the
keys and values of the positions it has seen, so a new token costs one position's work.
"""
import keras
import numpy as np
import tensorflow as tf

from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.speed.kernels import Dropout, LayerNorm, gelu, in_chunks, transposed_feed_forward


def truncated_normal(config: ModelConfig):
    """BERT's weight initialiser: normal with std ``initializer_range``, cut at 2 std.

    Give each weight its own: a Keras initialiser without a seed fixes one when it is made, so
    one instance shared by two layers gives both the same values.
    """
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


def activation(name: str):
    """"gelu" is :func:`gelu`; other names are Keras activations."""
    if name == "gelu":
        return gelu
    return keras.activations.get(name)


class Block(keras.layers.Layer):
    """A layer made of Keras layers, each of which creates its own weights on its first call.

    Keras builds a layer without a ``build`` of its own by tracing its ``call`` on symbolic
    inputs first: for an encoder, seconds of graph building to learn what the model's first
    real call (``build_weights``) creates anyway.
    """

    def build(self, input_shape=None):
        self.built = True


class MultiHeadAttention(Block):
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
        width = self.heads * self.head_size  # hidden_size unless heads were pruned
        # One initialiser each: a Keras initialiser draws the same values at every call.
        self.query = keras.layers.Dense(width, kernel_initializer=truncated_normal(config),
                                        name="query")
        self.key = keras.layers.Dense(width, kernel_initializer=truncated_normal(config),
                                      name="key")
        self.value = keras.layers.Dense(width, kernel_initializer=truncated_normal(config),
                                        name="value")
        self.output_dense = keras.layers.Dense(config.hidden_size,
                                               kernel_initializer=truncated_normal(config),
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

    ``call(x, training)`` maps [batch, step, hidden] to [batch, step, hidden]:
    ``output(intermediate(x))``. In training it is computed on transposed activations by
    :func:`~nlp_tutorials.speed.kernels.transposed_feed_forward` (same result, faster backward
    pass on CPU); otherwise plainly: the transposed products are slow on few tokens, and took
    half of MiniLM's time for one sentence pair (docs/serving.md#speed). With
    ``chunk_size_feed_forward`` in the config it runs that many positions at a time
    (:func:`~nlp_tutorials.speed.kernels.in_chunks`): the same result with a smaller
    intermediate activation.
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, activation=activation(config.hidden_act),
            kernel_initializer=truncated_normal(config), name="intermediate")
        self.output_dense = keras.layers.Dense(
            config.hidden_size, kernel_initializer=truncated_normal(config), name="output")
        self.chunk_size = config.chunk_size_feed_forward

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate.units,))

    def call(self, x, training=False):
        forward = self.transposed if training else self.positionwise
        if self.chunk_size:
            return in_chunks(forward, x, self.chunk_size)
        return forward(x)

    def positionwise(self, x):
        return self.output_dense(self.intermediate(x))

    def transposed(self, x):
        return transposed_feed_forward(self.intermediate, self.output_dense, x)


class ResidualNorm(Block):
    """``LayerNorm(x + Dropout(sublayer_output))``: the wrapper around every sub-layer."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.dropout = Dropout(config.hidden_dropout_prob)
        self.norm = LayerNorm(epsilon=config.layer_norm_eps, name="norm")

    def call(self, x, sublayer_output, training=False):
        return self.norm(x + self.dropout(sublayer_output, training=training))


class EncoderLayer(Block):
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
        x = self.ffn_norm(x, self.ffn(x, training=training), training=training)
        return x, probs, keys_values


class DecoderLayer(Block):
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
        x = self.ffn_norm(x, self.ffn(x, training=training), training=training)
        return x, self_probs, cross_probs, {"self": self_cache, "cross": cross_cache}


class Encoder(Block):
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


class Decoder(Block):
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


class Embeddings(Block):
    """Word + learned position (+ segment) embeddings, then LayerNorm and dropout.

    ``call(ids, segments=None, start=0)``: ids and segments [batch, step] -> [batch, step,
    hidden]; the ids sit at positions ``start``, ``start + 1``, ... (``start`` > 0 when decoding
    continues after cached positions).
    ``word_embeddings`` [vocab, hidden] is exposed so an output layer can share it.
    """

    def __init__(self, config: ModelConfig, vocab_size: int, with_segments: bool, **kwargs):
        super().__init__(**kwargs)
        self.words = keras.layers.Embedding(vocab_size, config.hidden_size,
                                            embeddings_initializer=truncated_normal(config),
                                            name="words")
        self.positions = keras.layers.Embedding(config.max_position_embeddings,
                                                config.hidden_size,
                                                embeddings_initializer=truncated_normal(config),
                                                name="positions")
        self.segments = (keras.layers.Embedding(config.type_vocab_size, config.hidden_size,
                                                embeddings_initializer=truncated_normal(config),
                                                name="segments")
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
