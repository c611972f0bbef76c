"""The Transformer (Vaswani et al., 2017) as a readable Keras model.

Run ``python -m nlp_tutorials.transformer train`` to teach it to translate dates.

Building blocks, bottom up:

- :func:`padding_mask` / :func:`causal_mask`: additive masks, 0 where attention is allowed and a
  large finite negative where it is not.
- :class:`MultiHeadAttention`: scaled dot-product attention over several heads; returns its
  attention probabilities so they can be exported and plotted.
- :class:`FeedForward`: the position-wise two-layer network.
- :class:`EncoderLayer` / :class:`DecoderLayer`: sub-layers wrapped in dropout, a residual
  connection and LayerNorm (post-norm, as the paper and BERT).
- :class:`Encoder` / :class:`Decoder`: stacks of those layers.
- :class:`Embeddings`: word + learned position (+ segment) embeddings, LayerNorm, dropout.
- :class:`Transformer`: the encoder-decoder seq2seq model, with ``mask()``, ``step()`` and an
  ``attentions`` property. ``GPT`` and ``BERT`` build on it.

Attention probabilities travel as return values, never as attributes set inside ``call``, so the
model works the same eagerly and inside ``tf.function``.

Decoding one token at a time can pass a ``cache`` down the stacks: each attention layer keeps the
keys and values of the positions it has already seen, so a new token costs one position's work
(see :meth:`Transformer.decode_step`). Without a cache every call is the plain full computation.
"""

if __name__ == "__main__":
    # `python -m nlp_tutorials.transformer` hands over to the CLI before TensorFlow is imported,
    # so --help and argument errors answer at once; the CLI imports this module again by name.
    from nlp_tutorials.cli import main

    raise SystemExit(main("transformer"))

import functools  # noqa: E402  (after the CLI hand-over above)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.config import ModelConfig  # noqa: E402

# Large enough that exp() of it underflows to exactly 0 in float32, yet finite in float16
# (max 65504) and bfloat16, so masked scores never turn into NaN under mixed precision.
MASK_VALUE = -1e4


def padding_mask(ids, pad_id: int = 0, attention_mask=None):
    """Additive mask hiding padded keys.

    Args:
        ids: token ids, [batch, step].
        attention_mask: optional [batch, step], 1 for real tokens and 0 for padding (the
            HuggingFace convention); when given it decides, instead of comparing ids to
            ``pad_id``.
    Returns:
        float32 [batch, 1, 1, step]: 0 for real keys, MASK_VALUE for padded keys; it
        broadcasts over heads and query positions.
    """
    if attention_mask is None:
        is_pad = tf.cast(tf.equal(ids, pad_id), tf.float32)  # [batch, step]
    else:
        is_pad = 1.0 - tf.cast(tf.not_equal(attention_mask, 0), tf.float32)
    return is_pad[:, tf.newaxis, tf.newaxis, :] * MASK_VALUE


def causal_mask(ids, pad_id: int = 0, attention_mask=None):
    """Additive mask hiding padded keys and every key after the query (look-ahead).

    Args:
        ids: token ids, [batch, step].
        attention_mask: optional [batch, step], 1 for real tokens (see :func:`padding_mask`).
    Returns:
        float32 [batch, 1, step, step]: entry [b, 0, i, j] is 0 when query i may look at key j
        (j <= i and j is not padding), MASK_VALUE otherwise.
    """
    step = tf.shape(ids)[1]
    future = 1.0 - tf.linalg.band_part(tf.ones([step, step]), -1, 0)  # [step, step], 1 above diagonal
    return tf.maximum(padding_mask(ids, pad_id, attention_mask) + future * MASK_VALUE, MASK_VALUE)


def cached_causal_mask(past, new):
    """Causal mask for ``new`` queries that follow ``past`` cached positions (no padding).

    Returns float32 [1, 1, new, past + new]: query i sits at position past + i and may look at
    every key j <= past + i.
    """
    allowed = tf.linalg.band_part(tf.ones([new, past + new]), -1, past)  # 1 where j - i <= past
    return ((1.0 - allowed) * MASK_VALUE)[tf.newaxis, tf.newaxis]


def truncated_normal(config: ModelConfig):
    """BERT's weight initialiser: normal with std ``initializer_range``, cut at 2 std."""
    return keras.initializers.TruncatedNormal(stddev=config.initializer_range)


SQRT_HALF = 0.7071067811865476      # 1 / sqrt(2)
INV_SQRT_2PI = 0.3989422804014327   # 1 / sqrt(2 pi)


def normal_cdf(x):
    """Phi(x), the standard normal CDF, element-wise: 0.5 * erfc(-x / sqrt(2)).

    Written ``x * -SQRT_HALF``: ``-x * SQRT_HALF`` runs a negation over the whole tensor first.
    """
    return 0.5 * tf.math.erfc(x * -SQRT_HALF)


@tf.custom_gradient
def gelu(x):
    """BERT's exact GELU, ``x * Phi(x)`` with ``Phi`` the standard normal CDF (not the tanh
    approximation), element-wise on a float tensor of any shape.

    The derivative ``Phi(x) + x * phi(x)`` is written out so back-propagation keeps only ``x``:
    differentiating the composite ``0.5 * x * erfc(-x / sqrt(2))`` op by op keeps four tensors
    of the feed-forward's intermediate size per layer (the largest activations of a BERT step),
    and runs more element-wise kernels backwards.
    """
    def gradient(upstream):
        pdf = tf.exp(-0.5 * tf.square(x)) * INV_SQRT_2PI
        return upstream * (normal_cdf(x) + x * pdf)

    return x * normal_cdf(x), gradient


def layer_norm(x, gamma, beta, epsilon):
    """``(x - mean) / sqrt(var + epsilon) * gamma + beta`` over the last axis of ``x``.

    x: float [..., hidden]; gamma, beta: [hidden] of x's dtype. Its gradient is written out (as
    :func:`gelu`'s): autodiff of the mean and variance runs about twice as many element-wise
    kernels backwards (benchmarks/layer_variants.py).
    """
    @tf.custom_gradient
    def normalise(x, gamma, beta):
        centred = x - tf.reduce_mean(x, -1, keepdims=True)
        inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), -1, keepdims=True)
                                    + epsilon)  # [..., 1]
        normalised = centred * inverse_std

        def gradient(upstream):
            d_normalised = upstream * gamma
            d_x = inverse_std * (
                d_normalised - tf.reduce_mean(d_normalised, -1, keepdims=True)
                - normalised * tf.reduce_mean(d_normalised * normalised, -1, keepdims=True))
            outer_axes = list(range(len(x.shape) - 1))
            return (d_x, tf.reduce_sum(upstream * normalised, outer_axes),
                    tf.reduce_sum(upstream, outer_axes))

        return normalised * gamma + beta, gradient

    return normalise(x, gamma, beta)


class LayerNorm(keras.layers.LayerNormalization):
    """Keras' LayerNormalization over the last axis (same weights, names and config), computed
    by :func:`layer_norm`, in float32 whatever the compute dtype, as Keras does."""

    def call(self, inputs):
        outputs = layer_norm(tf.cast(inputs, tf.float32), tf.cast(self.gamma, tf.float32),
                             tf.cast(self.beta, tf.float32), self.epsilon)
        return tf.cast(outputs, self.compute_dtype)


def activation(name: str):
    """"gelu" is :func:`gelu`; other names are Keras activations."""
    if name == "gelu":
        return gelu
    return keras.activations.get(name)


class Dropout(keras.layers.Dropout):
    """Keras' Dropout (same rate, seed, weights and config) drawing half as many random numbers.

    On CPU most of dropout's time goes to TensorFlow's Philox generator: Keras draws one 32-bit
    number per element; this layer draws one per two elements and uses each 16-bit half,
    which makes the forward and backward of the default model's 13 dropouts 1.5x faster
    (benchmarks/layer_variants.py). An element is kept when its 16 bits, read as an integer
    in [0, 65536), reach ``round(rate * 65536)``, so the rate is rounded to a multiple of
    1/65536 (0.1 becomes 0.100006); kept elements are scaled by 65536 / (65536 - that
    threshold), which leaves every element's expected value unchanged.
    ``call(inputs, training)``: inputs of any shape and float dtype -> the same shape.
    """

    RESOLUTION = 65536  # values of a 16-bit random integer

    def call(self, inputs, training=False):
        threshold = round(self.rate * self.RESOLUTION)
        if not training or threshold == 0:
            return inputs
        if self.noise_shape is not None or threshold >= self.RESOLUTION:
            return super().call(inputs, training=training)
        seed = tf.cast(tf.math.floormod(self.seed_generator.next(), tf.int32.max - 1), tf.int32)
        size = tf.size(inputs)
        bits = tf.random.stateless_uniform([(size + 1) // 2], seed, dtype=tf.int32,
                                           minval=None, maxval=None)  # [ceil(size / 2)]
        halves = tf.reshape(tf.bitcast(bits, tf.uint16), [-1])[:size]  # [size], in [0, 65536)
        keep = tf.reshape(halves, tf.shape(inputs)) >= tf.constant(threshold, tf.uint16)
        scale = self.RESOLUTION / (self.RESOLUTION - threshold)
        return tf.where(keep, inputs * tf.cast(scale, inputs.dtype), tf.zeros([], inputs.dtype))


class MultiHeadAttention(keras.layers.Layer):
    """Scaled dot-product attention over ``num_attention_heads`` heads.

    ``call(query, memory, mask)`` returns ``(output, probs)``: output [batch, q_step, hidden]
    and the attention probabilities [batch, heads, q_step, k_step] (each row sums to 1).

    With ``cache={"key", "value"}`` (each [batch, heads, past, head_size], the projections of
    positions seen before) the keys and values of ``memory`` are appended to the cached ones and
    the call returns ``(output, probs, cache)`` with the longer cache. ``memory=None`` means the
    cache already holds the whole memory: cross-attention projects the encoder output once.
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.heads = config.num_attention_heads
        self.head_size = config.head_size
        dense = dict(units=config.hidden_size, kernel_initializer=truncated_normal(config))
        self.query = keras.layers.Dense(**dense, name="query")
        self.key = keras.layers.Dense(**dense, name="key")
        self.value = keras.layers.Dense(**dense, name="value")
        self.output_dense = keras.layers.Dense(**dense, name="output")
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

    def empty_cache(self, batch):
        """A cache of no positions yet: key and value [batch, heads, 0, head_size]."""
        empty = tf.zeros([batch, self.heads, 0, self.head_size], self.compute_dtype)
        return {"key": empty, "value": empty}

    def call(self, query, memory, mask, training=False, cache=None):
        q = self.split_heads(self.query(query))    # [batch, heads, q_step, head_size]
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
        context = tf.matmul(tf.cast(self.dropout(probs, training=training), v.dtype), v)
        context = tf.transpose(context, [0, 2, 1, 3])     # [batch, q_step, heads, head_size]
        batch, step = tf.shape(context)[0], tf.shape(context)[1]
        context = tf.reshape(context, [batch, step, self.heads * self.head_size])
        if cache is None:
            return self.output_dense(context), probs
        return self.output_dense(context), probs, kv


class FeedForward(keras.layers.Layer):
    """Position-wise feed-forward network: dense(intermediate, act) -> dense(hidden).

    ``call(x)`` maps [batch, step, hidden] to [batch, step, hidden]. The weights are two ordinary
    Dense layers, but the products run on the transposed activations, [features, tokens]. The
    maths is the same; the reason is the backward pass on CPU. A Dense's weight gradient is
    X^T dY, which sums over the batch's tokens, and TensorFlow's CPU kernels take twice a plain
    product's time when that sum runs down the rows of X (benchmarks/matmul_shapes.py). With
    X^T as the operand it runs along the rows, and the feed-forward's forward-and-backward is
    a fifth faster at the default pre-training shape (level at MiniLM's and BERT-base's) for two
    transposes of [tokens, hidden] (benchmarks/layer_variants.py, benchmarks/RESULTS.md).
    """

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        init = truncated_normal(config)
        self.intermediate = keras.layers.Dense(
            config.intermediate_size, activation=activation(config.hidden_act),
            kernel_initializer=init, name="intermediate")
        self.output_dense = keras.layers.Dense(
            config.hidden_size, kernel_initializer=init, name="output")

    def build(self, input_shape):
        self.intermediate.build(input_shape)
        self.output_dense.build(tuple(input_shape[:-1]) + (self.intermediate.units,))

    def call(self, x):
        hidden = x.shape[-1]
        x_t = tf.transpose(tf.reshape(x, [-1, hidden]))  # [hidden, tokens]
        inner_t = self.intermediate.activation(self.transposed_dense(self.intermediate, x_t))
        y_t = self.transposed_dense(self.output_dense, inner_t)  # [hidden, tokens]
        return tf.reshape(tf.transpose(y_t), tf.shape(x))  # [batch, step, hidden]

    @staticmethod
    def transposed_dense(dense, x_t):
        """``(x W + b)^T = W^T x^T + b``: [in, tokens] -> [out, tokens], no activation.

        W^T is a transposed copy of the (small) kernel rather than ``transpose_a=True``: its
        gradient is then ``dY^T x`` transposed back, which Grappler turns into a plain product
        with the untransposed activation (measured 2% faster per step than ``transpose_a``).
        """
        kernel_t = tf.transpose(tf.cast(dense.kernel, x_t.dtype))  # [out, in]
        bias = tf.cast(dense.bias, x_t.dtype)  # [out]
        return tf.matmul(kernel_t, x_t) + bias[:, None]


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

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.attention = MultiHeadAttention(config, name="attention")
        self.attention_norm = ResidualNorm(config, name="attention_norm")
        self.ffn = FeedForward(config, name="ffn")
        self.ffn_norm = ResidualNorm(config, name="ffn_norm")

    def call(self, x, mask, training=False, cache=None):
        # new_cache is [] without a cache and [updated cache] with one.
        attended, probs, *new_cache = self.attention(x, x, mask, training=training, cache=cache)
        x = self.attention_norm(x, attended, training=training)
        x = self.ffn_norm(x, self.ffn(x), training=training)
        return x, probs, *new_cache  # [batch, step, hidden], [batch, heads, step, k_step]


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
        """``cache``: optional ``{"self": ..., "cross": ...}`` attention caches; with it, the
        call also returns the updated one and ``memory`` may be None (see MultiHeadAttention)."""
        self_cache, cross_cache = (None, None) if cache is None else (cache["self"], cache["cross"])
        # Each *_cache becomes [] without a cache and [updated cache] with one.
        attended, self_probs, *self_cache = self.self_attention(
            x, x, self_mask, training=training, cache=self_cache)
        x = self.self_norm(x, attended, training=training)
        attended, cross_probs, *cross_cache = self.cross_attention(
            x, memory, memory_mask, training=training, cache=cross_cache)
        x = self.cross_norm(x, attended, training=training)
        x = self.ffn_norm(x, self.ffn(x), training=training)
        # [batch, t_step, hidden], [batch, heads, t_step, t_step], [batch, heads, t_step, s_step]
        if cache is None:
            return x, self_probs, cross_probs
        return x, self_probs, cross_probs, {"self": self_cache[0], "cross": cross_cache[0]}


class Encoder(keras.layers.Layer):
    """A stack of ``num_hidden_layers`` encoder layers; returns output and per-layer probs."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [EncoderLayer(config, name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]

    def call(self, x, mask, training=False, cache=None):
        """``cache``: optional list of per-layer attention caches; with it, the call also
        returns the updated list."""
        attentions, new_cache = [], []
        for i, block in enumerate(self.blocks):
            x, probs, *layer_cache = block(x, mask, training=training,
                                           cache=None if cache is None else cache[i])
            attentions.append(probs)
            new_cache += layer_cache
        if cache is None:
            return x, attentions  # [batch, step, hidden], layers x [batch, heads, step, step]
        return x, attentions, new_cache


class Decoder(keras.layers.Layer):
    """A stack of decoder layers; returns output, self- and cross-attention probs per layer."""

    def __init__(self, config: ModelConfig, **kwargs):
        super().__init__(**kwargs)
        self.blocks = [DecoderLayer(config, name=f"layer_{i}")
                       for i in range(config.num_hidden_layers)]

    def call(self, x, memory, self_mask, memory_mask, training=False, cache=None):
        """``cache``: optional list of per-layer caches (see DecoderLayer); with it, the call
        also returns the updated list."""
        self_attentions, cross_attentions, new_cache = [], [], []
        for i, block in enumerate(self.blocks):
            x, self_probs, cross_probs, *layer_cache = block(
                x, memory, self_mask, memory_mask, training=training,
                cache=None if cache is None else cache[i])
            self_attentions.append(self_probs)
            cross_attentions.append(cross_probs)
            new_cache += layer_cache
        if cache is None:
            return x, self_attentions, cross_attentions
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
        self.max_positions = config.max_position_embeddings
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


def global_sum(value):
    """``value`` summed over the replicas of the running ``tf.distribute`` step.

    On one device (no strategy, or outside ``strategy.run``) that is ``value`` itself.
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def softmax_cross_entropy(labels, logits):
    """``-log softmax(logits)[label]`` at each position, with its gradient written out.

    Args:
        labels: int ids [...], each in [0, classes).
        logits: float32 [..., classes].
    Returns:
        float32 [...]: the same values as ``tf.nn.sparse_softmax_cross_entropy_with_logits``.

    The gradient, ``softmax(logits) - onehot(label)`` times the upstream gradient, is one pass
    over the logits plus a scatter of the labels' entries. TensorFlow's fused kernel does the
    same arithmetic in about twice the time (1.8-2.3x), forward and backward, at the masked-LM
    head's [160, 19500] on the 2-core CPU (benchmarks/layer_variants.py, RESULTS.md).
    """
    classes = tf.shape(logits)[-1]
    flat_logits = tf.reshape(logits, [-1, classes])  # [positions, classes]
    flat_labels = tf.reshape(tf.cast(labels, tf.int32), [-1])  # [positions]

    @tf.custom_gradient
    def per_position(flat_logits):
        # Shifted so the largest logit is 0: exp cannot overflow, and the sum is at least 1.
        shifted = flat_logits - tf.reduce_max(flat_logits, -1, keepdims=True)
        exp = tf.exp(shifted)  # [positions, classes]
        total = tf.reduce_sum(exp, -1)  # [positions]
        label_logit = tf.gather(shifted, flat_labels, batch_dims=1)  # [positions]

        def gradient(upstream):  # [positions]
            softmax_times_upstream = exp * (upstream / total)[:, tf.newaxis]
            label_entries = tf.stack([tf.range(tf.shape(flat_labels)[0]), flat_labels], axis=1)
            return tf.tensor_scatter_nd_sub(softmax_times_upstream, label_entries, upstream)

        return tf.math.log(total) - label_logit, gradient

    return tf.reshape(per_position(flat_logits), tf.shape(labels))


def sparse_cross_entropy(labels, logits, weights):
    """Mean cross-entropy over the positions where ``weights`` is 1.

    Under ``tf.distribute`` each replica divides its sum by the weight of the *global* batch,
    so the replicas' losses, and the gradients the optimizer sums across them, add up to the
    single-device ones (a per-replica mean would weigh a replica's few masked tokens as much
    as another's many).

    Args:
        labels: int ids [...]; logits: [..., vocab]; weights: float [...] of 0/1.
    Returns:
        scalar float32 loss, and the weighted accuracy of argmax(logits).
    """
    logits = tf.cast(logits, tf.float32)
    weights = tf.cast(weights, tf.float32)
    per_token = softmax_cross_entropy(labels, logits)
    total = tf.maximum(global_sum(tf.reduce_sum(weights)), 1.0)
    hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=labels.dtype), labels), tf.float32)
    return tf.reduce_sum(per_token * weights) / total, tf.reduce_sum(hits * weights) / total


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


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class Transformer(keras.Model):
    """Encoder-decoder Transformer for sequence-to-sequence tasks.

    Inputs to ``call``: a dict with ``src_ids`` [batch, s_step] and ``tgt_ids``
    [batch, t_step] (the decoder input, starting with a start token). Returns a dict with
    ``logits`` [batch, t_step, target_vocab] and ``attentions``: ``{"encoder": [...],
    "decoder": [...], "encoder_decoder": [...]}``, one [batch, heads, q_step, k_step] tensor per
    layer.
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

    def mask(self, src_ids, tgt_ids):
        """Encoder and cross-attention see every real source token; the decoder only the past.

        Returns (src_mask [batch, 1, 1, s_step], tgt_mask [batch, 1, t_step, t_step]).
        """
        pad = self.config.pad_token_id
        return padding_mask(src_ids, pad), causal_mask(tgt_ids, pad)

    def call(self, inputs, training=False):
        src_ids, tgt_ids = inputs["src_ids"], inputs["tgt_ids"]
        src_mask, tgt_mask = self.mask(src_ids, tgt_ids)
        memory, enc_probs = self.encoder(self.src_embeddings(src_ids, training=training),
                                         src_mask, training=training)
        x, dec_probs, cross_probs = self.decoder(self.tgt_embeddings(tgt_ids, training=training),
                                                 memory, tgt_mask, src_mask, training=training)
        return {"logits": self.output_layer(x),  # [batch, t_step, target_vocab]
                "attentions": {"encoder": enc_probs, "decoder": dec_probs,
                               "encoder_decoder": cross_probs}}

    def start_cache(self, src_ids):
        """Encode ``src_ids`` [batch, s_step] once and return the cache decoding starts from.

        The cache holds the source mask and, per decoder layer, an empty self-attention cache
        and the cross-attention keys and values of the encoder output (computed here, once).
        """
        src_mask = padding_mask(src_ids, self.config.pad_token_id)  # [batch, 1, 1, s_step]
        memory, _ = self.encoder(self.src_embeddings(src_ids), src_mask)
        batch = tf.shape(src_ids)[0]
        layers = [{"self": block.self_attention.empty_cache(batch),
                   "cross": block.cross_attention.project(memory)}
                  for block in self.decoder.blocks]
        return {"src_mask": src_mask, "layers": layers}

    def decode_step(self, tgt_ids, cache):
        """Feed target ids [batch, new] that follow the cached positions (inference only).

        Returns (logits [batch, new, target_vocab], the cache with these positions added). The
        logits equal those of a full ``call`` on the whole target prefix (no padding in it).
        """
        past = tf.shape(cache["layers"][0]["self"]["key"])[2]
        x = self.tgt_embeddings(tgt_ids, start=past)  # [batch, new, hidden]
        self_mask = cached_causal_mask(past, tf.shape(tgt_ids)[1])
        x, _, _, layers = self.decoder(x, None, self_mask, cache["src_mask"], cache=cache["layers"])
        return self.output_layer(x), {"src_mask": cache["src_mask"], "layers": layers}

    def step(self, batch, training=True):
        """One optimisation step of teacher-forced next-token loss on the target.

        ``batch``: ``src_ids`` [batch, s_step], ``tgt_ids`` [batch, t_step] (start token first).
        The decoder reads ``tgt_ids[:, :-1]`` and predicts ``tgt_ids[:, 1:]``; padding is
        ignored. Returns a dict of scalar metrics. Compile it with :meth:`compiled_step`.
        """
        tgt_in, tgt_out = batch["tgt_ids"][:, :-1], batch["tgt_ids"][:, 1:]
        with tf.GradientTape() as tape:
            outputs = self({"src_ids": batch["src_ids"], "tgt_ids": tgt_in}, training=training)
            weights = tf.not_equal(tgt_out, self.config.pad_token_id)
            loss, accuracy = sparse_cross_entropy(tgt_out, outputs["logits"], weights)
        if training:
            self.apply_gradients(tape, loss)
        return {"loss": loss, "token_accuracy": accuracy}

    def apply_gradients(self, tape, loss):
        """Back-propagate ``loss`` recorded on ``tape`` and update the weights."""
        # Recorded on the tape too: under mixed_float16 the loss scale is a real multiplication
        # (outside the tape every gradient would be None); otherwise it returns ``loss``.
        with tape:
            scaled = self.optimizer.scale_loss(loss)
        grads = dense_gradients(tape.gradient(scaled, self.trainable_variables))
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))

    def compiled_step(self, batch, jit_compile: bool = False, training: bool = True):
        """``step`` as a ``tf.function`` traced once for every batch shaped like ``batch``.

        The signature fixes each input's dtype and batch size but leaves the other axes open,
        so batches trimmed to their longest sequence reuse the same trace. (Under XLA,
        ``jit_compile=True``, each distinct length still compiles once.)
        """
        # Create the optimizer's slots now: variables created inside the first trace would
        # force a second one.
        self.optimizer.build(self.trainable_variables)
        return tf.function(functools.partial(self.step, training=training),
                           input_signature=[batch_signature(batch)], jit_compile=jit_compile)

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
