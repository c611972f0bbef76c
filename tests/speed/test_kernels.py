"""Every piece of speed code in kernels.py against the plain operation it replaces, and numpy."""
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.speed.kernels import (
    AdamW,
    Dropout,
    LayerNorm,
    gelu,
    layer_norm,
    softmax_cross_entropy,
    transposed_feed_forward,
)
from nlp_tutorials.models.layers import FeedForward
from support import tiny_config


def numpy_normal_cdf(x):
    """Phi(x) element-wise in float64, from the standard library's erf."""
    return 0.5 * (1 + np.vectorize(math.erf)(np.asarray(x, "float64") / math.sqrt(2)))


def value_and_gradients(function, inputs, upstream):
    """sum(function(*inputs) * upstream) and its gradient for each of ``inputs`` (arrays, or
    the weights ``function`` uses)."""
    inputs = [x if isinstance(x, keras.Variable) else tf.convert_to_tensor(x) for x in inputs]
    with tf.GradientTape() as tape:
        tape.watch([x for x in inputs if not isinstance(x, keras.Variable)])
        loss = tf.reduce_sum(function(*inputs) * upstream)
    return loss.numpy(), [g.numpy() for g in tape.gradient(loss, inputs)]


@pytest.mark.parametrize("training", [True, False])
def test_feed_forward_and_its_gradients_match_numpy(training):
    """Both layouts (transposed in training, plain otherwise) compute x W1 -> GELU -> W2 and
    its gradients exactly."""
    layer = FeedForward(tiny_config())
    rng = np.random.default_rng(3)
    x = rng.normal(size=(2, 5, 32)).astype("float32")
    upstream = rng.normal(size=(2, 5, 32)).astype("float32")  # d loss / d output
    with tf.GradientTape() as tape:
        inputs = tf.constant(x)
        tape.watch(inputs)
        loss = tf.reduce_sum(layer(inputs, training=training) * upstream)
    weights = [layer.intermediate.kernel, layer.intermediate.bias,
               layer.output_dense.kernel, layer.output_dense.bias]
    grads = tape.gradient(loss, [inputs] + weights)

    w1, b1, w2, b2 = (w.numpy().astype("float64") for w in weights)
    tokens = x.reshape(10, 32).astype("float64")  # [tokens, hidden]
    pre = tokens @ w1 + b1  # [tokens, intermediate]
    cdf = numpy_normal_cdf(pre)
    inner = pre * cdf
    d_out = upstream.reshape(10, 32).astype("float64")
    d_pre = (d_out @ w2.T) * (cdf + pre * np.exp(-0.5 * pre ** 2) / math.sqrt(2 * math.pi))
    expected = [(d_pre @ w1.T).reshape(2, 5, 32), tokens.T @ d_pre, d_pre.sum(0),
                inner.T @ d_out, d_out.sum(0)]
    np.testing.assert_allclose(loss.numpy(), np.sum((inner @ w2 + b2) * d_out), rtol=1e-5)
    for got, want in zip(grads, expected):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-4)


def test_layer_norm_and_its_gradients_match_numpy_and_finite_differences():
    rng = np.random.default_rng(4)
    x, gamma, beta = rng.normal(size=(2, 3, 8)), rng.normal(size=8), rng.normal(size=8)
    upstream = rng.normal(size=(2, 3, 8))  # float64 throughout, so finite differences are exact

    def numpy_loss(x, gamma, beta):
        normalised = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
        return np.sum((normalised * gamma + beta) * upstream)

    inputs = [tf.constant(v) for v in (x, gamma, beta)]
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        loss = tf.reduce_sum(layer_norm(*inputs, 1e-12) * upstream)
    np.testing.assert_allclose(loss.numpy(), numpy_loss(x, gamma, beta), rtol=1e-12)
    h = 1e-6
    for index, grad in enumerate(tape.gradient(loss, inputs)):
        values = [x, gamma, beta]
        expected = np.zeros_like(values[index])
        for position in np.ndindex(expected.shape):
            up = [v.copy() for v in values]
            down = [v.copy() for v in values]
            up[index][position] += h
            down[index][position] -= h
            expected[position] = (numpy_loss(*up) - numpy_loss(*down)) / (2 * h)
        np.testing.assert_allclose(grad.numpy(), expected, atol=1e-7)


def test_layer_norm_layer_equals_keras_layer_normalization():
    ours, keras_layer = LayerNorm(epsilon=1e-12), keras.layers.LayerNormalization(epsilon=1e-12)
    x = np.random.default_rng(5).normal(3.0, 2.0, size=(2, 5, 16)).astype("float32")
    ours.build(x.shape)
    keras_layer.build(x.shape)
    for layer in (ours, keras_layer):
        layer.gamma.assign(np.linspace(0.5, 1.5, 16))
        layer.beta.assign(np.linspace(-1, 1, 16))
    np.testing.assert_allclose(ours(x).numpy(), keras_layer(x).numpy(), atol=1e-5)
    assert [w.name for w in ours.weights] == [w.name for w in keras_layer.weights]


def test_gelu_and_its_gradient_match_numpy_and_finite_differences():
    x = np.linspace(-6, 6, 241)  # float64, so finite differences are accurate
    with tf.GradientTape() as tape:
        inputs = tf.constant(x)
        tape.watch(inputs)
        outputs = gelu(inputs)
    np.testing.assert_allclose(outputs.numpy(), x * numpy_normal_cdf(x), rtol=1e-12, atol=1e-15)
    h = 1e-6
    finite_differences = ((x + h) * numpy_normal_cdf(x + h)
                          - (x - h) * numpy_normal_cdf(x - h)) / (2 * h)
    np.testing.assert_allclose(tape.gradient(outputs, inputs).numpy(), finite_differences,
                               atol=1e-8)
    for dtype in (tf.float16, tf.bfloat16):  # mixed precision runs it in half precision
        half = gelu(tf.constant(x[::20], dtype))
        np.testing.assert_allclose(tf.cast(half, tf.float64).numpy(),
                                   x[::20] * numpy_normal_cdf(x[::20]),
                                   rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("compiled", ["eager", "graph", "xla"])
def test_softmax_cross_entropy_and_its_gradient_match_numpy(compiled):
    rng = np.random.default_rng(6)
    # Large logits (up to 80 apart) would overflow a naive exp in float32; int64 labels, 3-D.
    logits = (rng.normal(size=(2, 3, 7)) * 30).astype("float32")
    labels = rng.integers(0, 7, size=(2, 3))
    upstream = rng.normal(size=(2, 3)).astype("float32")

    def loss_and_gradient(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            per_position = softmax_cross_entropy(tf.constant(labels), logits)
            loss = tf.reduce_sum(per_position * upstream)
        return per_position, tape.gradient(loss, logits)

    if compiled != "eager":
        loss_and_gradient = tf.function(loss_and_gradient, jit_compile=compiled == "xla")
    per_position, gradient = loss_and_gradient(tf.constant(logits))

    wide = logits.astype("float64")
    log_softmax = wide - wide.max(-1, keepdims=True)
    log_softmax -= np.log(np.exp(log_softmax).sum(-1, keepdims=True))
    one_hot = np.eye(7)[labels]
    np.testing.assert_allclose(per_position.numpy(),
                               -np.take_along_axis(log_softmax, labels[..., None], -1)[..., 0],
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gradient.numpy(),
                               (np.exp(log_softmax) - one_hot) * upstream[..., None], atol=1e-6)


def test_dropout_keeps_the_expected_share_scaled_to_an_unchanged_mean():
    layer = Dropout(0.1, seed=3)
    x = np.ones((1001, 999), "float32")  # odd size: the last random number is used by half
    with tf.GradientTape() as tape:
        inputs = tf.constant(x)
        tape.watch(inputs)
        out = layer(inputs, training=True)
    out, gradient = out.numpy(), tape.gradient(out, inputs).numpy()
    threshold = round(0.1 * 65536)  # 6554: rate 0.100006
    scale = 65536 / (65536 - threshold)
    kept = out != 0
    assert set(np.unique(out)) == {0.0, np.float32(scale)}
    np.testing.assert_array_equal(gradient, kept * np.float32(scale))
    # 1e6 Bernoulli(0.9) draws: the share's standard deviation is 3e-4.
    assert abs(kept.mean() - (1 - threshold / 65536)) < 2e-3
    assert abs(out.mean() - 1.0) < 3e-3
    # The two 16-bit halves of one random number decide neighbouring elements independently.
    pairs = kept.reshape(-1)[:-1:2], kept.reshape(-1)[1::2]
    assert abs((pairs[0] & pairs[1]).mean() - 0.9 ** 2) < 3e-3
    assert not np.array_equal(layer(inputs, training=True).numpy() != 0, kept)  # new mask
    np.testing.assert_array_equal(layer(inputs, training=False).numpy(), x)
    assert Dropout(0.0)(inputs, training=True) is inputs
    half = Dropout(0.5, seed=1, dtype="float16")(tf.ones([64, 64], tf.float16), training=True)
    assert half.dtype == tf.float16 and set(np.unique(half.numpy())) == {0.0, 2.0}


def test_gelu_equals_tensorflows_exact_gelu_values_and_gradient():
    x = np.linspace(-8, 8, 401).astype("float32")
    upstream = np.random.default_rng(7).normal(size=x.shape).astype("float32")
    ours, our_grads = value_and_gradients(gelu, [x], upstream)
    plain, plain_grads = value_and_gradients(
        lambda v: tf.nn.gelu(v, approximate=False), [x], upstream)
    np.testing.assert_allclose(ours, plain, rtol=1e-5)
    np.testing.assert_allclose(our_grads[0], plain_grads[0], atol=1e-6)


def test_layer_norm_layer_gradients_equal_keras_layer_normalizations():
    ours, plain = LayerNorm(epsilon=1e-12), keras.layers.LayerNormalization(epsilon=1e-12)
    rng = np.random.default_rng(8)
    x = rng.normal(1.0, 3.0, size=(3, 4, 16)).astype("float32")
    upstream = rng.normal(size=x.shape).astype("float32")
    results = []
    for layer in (ours, plain):
        layer.build(x.shape)
        layer.gamma.assign(np.linspace(0.5, 1.5, 16))
        layer.beta.assign(np.linspace(-1, 1, 16))
        results.append(value_and_gradients(
            lambda v, gamma, beta, layer=layer: layer(v), [x, layer.gamma, layer.beta], upstream))
    (ours_loss, ours_grads), (plain_loss, plain_grads) = results
    np.testing.assert_allclose(ours_loss, plain_loss, rtol=1e-5)
    for got, want in zip(ours_grads, plain_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_transposed_feed_forward_equals_the_two_dense_layers_applied_plainly():
    layer = FeedForward(tiny_config())
    rng = np.random.default_rng(9)
    x = rng.normal(size=(2, 5, 32)).astype("float32")
    upstream = rng.normal(size=(2, 5, 32)).astype("float32")
    layer.build(x.shape)
    weights = [layer.intermediate.kernel, layer.intermediate.bias,
               layer.output_dense.kernel, layer.output_dense.bias]

    def transposed(v, *_):
        return transposed_feed_forward(layer.intermediate, layer.output_dense, v)

    def plain(v, *_):
        return layer.output_dense(layer.intermediate(v))

    ours, our_grads = value_and_gradients(transposed, [x] + weights, upstream)
    reference, reference_grads = value_and_gradients(plain, [x] + weights, upstream)
    np.testing.assert_allclose(ours, reference, rtol=1e-5)
    for got, want in zip(our_grads, reference_grads):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_softmax_cross_entropy_equals_tensorflows_fused_kernel():
    rng = np.random.default_rng(10)
    logits = (rng.normal(size=(6, 50)) * 10).astype("float32")
    labels = rng.integers(0, 50, size=6)
    upstream = rng.normal(size=6).astype("float32")
    ours, our_grads = value_and_gradients(
        lambda v: softmax_cross_entropy(labels, v), [logits], upstream)
    plain, plain_grads = value_and_gradients(
        lambda v: tf.nn.sparse_softmax_cross_entropy_with_logits(labels, v), [logits], upstream)
    np.testing.assert_allclose(ours, plain, rtol=1e-5)
    np.testing.assert_allclose(our_grads[0], plain_grads[0], atol=1e-6)


def test_dropout_keeps_the_same_share_and_mean_as_keras_dropout():
    x = tf.ones([500, 500])
    for layer in (Dropout(0.25, seed=4), keras.layers.Dropout(0.25, seed=4)):
        out = layer(x, training=True).numpy()
        # 250,000 Bernoulli(0.75) draws: the kept share's standard deviation is 9e-4.
        assert abs((out != 0).mean() - 0.75) < 5e-3
        assert abs(out.mean() - 1.0) < 7e-3
        assert isinstance(layer, keras.layers.Dropout)
    assert (Dropout(0.25, name="d").get_config()
            == keras.layers.Dropout(0.25, name="d").get_config())


def test_fused_adamw_updates_as_keras_adamw():
    rng = np.random.default_rng(11)
    start = rng.normal(size=(4, 3)).astype("float32")
    gradients = [rng.normal(size=(4, 3)).astype("float32") for _ in range(5)]
    finals = []
    for optimizer_class in (keras.optimizers.AdamW, AdamW):
        weight = keras.Variable(start)
        optimizer = optimizer_class(learning_rate=1e-2, weight_decay=0.01, epsilon=1e-6)
        for gradient in gradients:
            optimizer.apply_gradients([(tf.constant(gradient), weight)])
        finals.append(weight.numpy())
    np.testing.assert_allclose(finals[1], finals[0], rtol=1e-5, atol=1e-6)
    assert not np.allclose(finals[0], start)


def test_feed_forward_transposes_only_in_training():
    """Inference runs the two Dense layers plainly (the transposed products are slow on few
    tokens); training runs the transposed products (their weight gradients are the fast ones)."""
    layer = FeedForward(tiny_config())
    layer.build((None, None, 32))
    spec = tf.TensorSpec([None, None, 32], tf.float32)

    def transposes(forward):
        graph = tf.function(forward).get_concrete_function(spec).graph
        return sum(op.type == "Transpose" for op in graph.get_operations())

    plain = transposes(lambda x: layer.output_dense(layer.intermediate(x)))
    assert transposes(lambda x: layer(x, training=False)) == plain
    assert transposes(lambda x: layer(x, training=True)) > plain
