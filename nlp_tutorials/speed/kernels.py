"""Speed code: faster versions of standard operations, each equal to the plain one.

The model files use these in place of TensorFlow's and Keras' own operations. None of them
changes what is computed; each only changes how, for a reason measured on a CPU and given in
its docstring (figures in docs/performance.md). ``tests/speed/test_kernels.py`` checks every one
against the plain version it replaces.

- :func:`gelu`: the exact GELU with its derivative written out (less memory backwards).
- :func:`layer_norm` / :class:`LayerNorm`: LayerNorm with its gradient written out (half the
  element-wise kernels backwards).
- :class:`Dropout`: one 32-bit random number per two elements instead of one per element.
- :func:`transposed_feed_forward`: the feed-forward on transposed activations, [features,
  tokens] (its weight gradients then run at full speed on CPU).
- :func:`in_chunks`: a position-wise function a chunk of positions at a time (less memory).
- :func:`softmax_cross_entropy`: the cross-entropy with its gradient written out (about twice
  as fast as TensorFlow's fused kernel at the masked-LM head's shape).
- :class:`AdamW`: Keras' AdamW with each weight updated by TensorFlow's fused Adam kernel.
"""
import keras
import tensorflow as tf

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
    kernels backwards (benchmarks/kernel_speed.py).
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


class Dropout(keras.layers.Dropout):
    """Keras' Dropout (same rate, seed, weights and config) drawing half as many random numbers.

    On CPU most of dropout's time goes to TensorFlow's Philox generator: Keras draws one 32-bit
    number per element; this layer draws one per two elements and uses each 16-bit half,
    which makes the forward and backward of the default model's 13 dropouts 1.5x faster
    (benchmarks/kernel_speed.py). An element is kept when its 16 bits, read as an integer
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


def transposed_feed_forward(intermediate, output, x):
    """``output(intermediate(x))`` computed on transposed activations, [features, tokens].

    ``intermediate``, ``output``: built ``keras.layers.Dense`` layers (the intermediate one's
    activation is applied); ``x``: [batch, step, hidden] -> [batch, step, hidden].

    Why: a Dense's weight gradient is X^T dY, a sum over the batch's tokens, and TensorFlow's
    CPU kernels take twice a plain product's time when that sum runs down the rows of X. With
    the activations transposed it runs along the rows, and the feed-forward's forward and
    backward is a fifth faster at the default pre-training shape (level at MiniLM's and
    BERT-base's), for two transposes of [tokens, hidden].
    """
    hidden = x.shape[-1]
    x_t = tf.transpose(tf.reshape(x, [-1, hidden]))  # [hidden, tokens]
    inner_t = intermediate.activation(transposed_dense(intermediate, x_t))  # [inner, tokens]
    y_t = transposed_dense(output, inner_t)  # [hidden, tokens]
    return tf.reshape(tf.transpose(y_t), tf.shape(x))  # [batch, step, hidden]


def in_chunks(positionwise, x, chunk_size: int):
    """``positionwise(x)`` computed ``chunk_size`` positions at a time, one chunk after another.

    ``positionwise``: a function of [batch, positions, hidden] that treats each position on its
    own (the feed-forward); ``x``: [batch, step, hidden] -> [batch, step, hidden].

    Why: memory. The feed-forward's intermediate activation, [batch, step, intermediate], is
    the largest tensor of an inference pass over long inputs; in chunks only
    [batch, chunk_size, intermediate] exists at a time. The step axis is padded to a multiple
    of ``chunk_size`` and the padding's results cut off.
    """
    batch, step, hidden = tf.shape(x)[0], tf.shape(x)[1], x.shape[-1]
    chunks = (step + chunk_size - 1) // chunk_size
    padded = tf.pad(x, [[0, 0], [0, chunks * chunk_size - step], [0, 0]])
    pieces = tf.transpose(tf.reshape(padded, [batch, chunks, chunk_size, hidden]), [1, 0, 2, 3])
    # One chunk at a time (parallel_iterations=1), so only one chunk's activations are live.
    done = tf.map_fn(positionwise, pieces, parallel_iterations=1)  # [chunks, batch, chunk, hidden]
    joined = tf.reshape(tf.transpose(done, [1, 0, 2, 3]), [batch, chunks * chunk_size, hidden])
    return joined[:, :step]


def transposed_dense(dense, x_t):
    """``(x W + b)^T = W^T x^T + b``: [in, tokens] -> [out, tokens], no activation.

    W^T is a transposed copy of the (small) kernel rather than ``transpose_a=True``: its
    gradient is then ``dY^T x`` transposed back, which Grappler turns into a plain product with
    the untransposed activation (2% faster per step than ``transpose_a``).
    """
    kernel_t = tf.transpose(tf.cast(dense.kernel, x_t.dtype))  # [out, in]
    bias = tf.cast(dense.bias, x_t.dtype)  # [out]
    return tf.matmul(kernel_t, x_t) + bias[:, None]


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
    head's [160, 19500] on a 2-core CPU (benchmarks/kernel_speed.py).
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


@keras.saving.register_keras_serializable(package="nlp_tutorials")
class AdamW(keras.optimizers.AdamW):
    """Keras' AdamW with each weight's Adam update done by TensorFlow's fused kernel.

    Keras updates a weight in about ten element-wise ops, each reading and writing a tensor the
    size of the weight; ``ResourceApplyAdam`` does it in one pass: 2.2x faster on the default
    model's weights (benchmarks/optimizer_update.py). The formula is Keras' (and the Adam
    paper's, epsilon outside the square root): m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
    w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + epsilon). Keras applies the decoupled
    weight decay before it, as always. Slots, names and checkpoints are Keras' own; with
    ``amsgrad=True`` the update is Keras' own too.
    """

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad:  # the fused kernel has no AMSGrad maximum
            return super().update_step(gradient, variable, learning_rate)
        index = self._get_variable_index(variable)
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        beta_1, beta_2 = tf.cast(self.beta_1, dtype), tf.cast(self.beta_2, dtype)
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle, m=self._momentums[index].handle,
            v=self._velocities[index].handle, beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step), lr=tf.cast(learning_rate, dtype), beta1=beta_1,
            beta2=beta_2, epsilon=tf.cast(self.epsilon, dtype), grad=tf.cast(gradient, dtype))
