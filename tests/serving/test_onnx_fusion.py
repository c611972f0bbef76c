"""The ONNX export's graph rewrites: each pattern, converted by tf2onnx from the package's own
TensorFlow code, becomes its short form and still computes what numpy computes; look-alikes
that compute something else are left alone; and a whole exported model keeps its answers."""
import math

import numpy as np
import pytest

from fake_tasks import SENTENCES, Sentence, SentenceTask

tf = pytest.importorskip("tensorflow")
onnxruntime = pytest.importorskip("onnxruntime", reason="--format onnx needs pip install "
                                                        "'nlp_tutorials[onnx]'")
pytest.importorskip("tf2onnx", reason="--format onnx needs pip install 'nlp_tutorials[onnx]'")
import onnx  # noqa: E402  (tf2onnx's dependency)
from onnx import helper  # noqa: E402

from nlp_tutorials.serving.onnx_fusion import fuse  # noqa: E402
from answers_by_shape import WIDENED  # noqa: E402
from test_onnx_export import run_onnx  # noqa: E402

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 8)).astype(np.float32)  # [batch, step, hidden]


def converted(function, *shapes):
    """``function`` of float32 inputs of ``shapes`` (None: any size) as tf2onnx converts it
    for the export (its ``Erfc`` rule, its optimizers)."""
    from nlp_tutorials.serving.onnx_export import (OPSET, SKIPPED_OPTIMIZER, import_converter,
                                                   optimizers_without)

    specs = [tf.TensorSpec(shape, tf.float32, name=f"x{k}") for k, shape in enumerate(shapes)]
    tf2onnx = import_converter()
    with optimizers_without(SKIPPED_OPTIMIZER):
        model, _ = tf2onnx.convert.from_function(tf.function(function), input_signature=specs,
                                                 opset=OPSET)
    return model


def run(model, *inputs):
    session = onnxruntime.InferenceSession(model.SerializeToString(),
                                           providers=["CPUExecutionProvider"])
    return session.run(None, {f"x{k}": value for k, value in enumerate(inputs)})[0]


def op_types(model):
    return sorted(node.op_type for node in model.graph.node)


def test_a_layer_norm_becomes_one_layer_normalization():
    from nlp_tutorials.speed.kernels import layer_norm

    gamma, beta = RNG.normal(size=8).astype(np.float32), RNG.normal(size=8).astype(np.float32)
    model = converted(lambda x: layer_norm(x, tf.constant(gamma), tf.constant(beta), 1e-12),
                      [None, None, 8])
    assert op_types(model).count("GlobalAveragePool") == 2  # tf2onnx's form
    assert fuse(model)["LayerNormalization"] == 1
    assert "LayerNormalization" in op_types(model)
    assert not {"GlobalAveragePool", "Sqrt", "Reciprocal", "Sub"} & set(op_types(model))
    centred = X - X.mean(-1, keepdims=True)
    want = centred / np.sqrt((centred ** 2).mean(-1, keepdims=True) + 1e-12) * gamma + beta
    np.testing.assert_allclose(run(model, X), want, atol=1e-5)


def test_the_exact_gelu_takes_the_form_onnx_runtime_fuses():
    from nlp_tutorials.speed.kernels import gelu

    model = converted(gelu, [None, None, 8])
    assert fuse(model)["GELU"] == 1
    assert op_types(model) == ["Add", "Div", "Erf", "Mul", "Mul"]
    erf = np.vectorize(math.erf)
    x = X * 3  # reaches where erf saturates
    np.testing.assert_allclose(run(model, x), x * 0.5 * (1 + erf(x / math.sqrt(2))), atol=1e-5)


def test_a_dense_on_three_axes_becomes_one_matmul():
    import keras

    dense = keras.layers.Dense(6, bias_initializer="ones")  # a zero bias would be dropped
    dense.build((None, None, 8))
    model = converted(lambda x: dense(x), [None, None, 8])
    assert op_types(model).count("Reshape") == 2  # Keras' Tensordot: flatten, multiply, unflatten
    assert fuse(model)["Dense"] == 1
    assert op_types(model) == ["Add", "MatMul"]
    kernel, bias = (weight.numpy() for weight in dense.weights)
    np.testing.assert_allclose(run(model, X), X @ kernel + bias, atol=1e-5)


def test_splitting_heads_reshapes_to_a_constant_target():
    def split_heads(x):  # as MultiHeadAttention.split_heads: [batch, step, 2 heads, 4]
        return tf.reshape(x, [tf.shape(x)[0], tf.shape(x)[1], 2, 4])

    model = converted(split_heads, [None, None, 8])
    assert fuse(model)["Reshape"] == 1
    assert op_types(model) == ["Reshape"]
    target = [t for t in model.graph.initializer if t.name == model.graph.node[0].input[1]][0]
    assert onnx.numpy_helper.to_array(target).tolist() == [0, 0, 2, 4]  # 0: copied
    np.testing.assert_allclose(run(model, X), X.reshape(2, 5, 2, 4))


def layer_norm_look_alike(shape, centred_is_output: bool = False):
    """tf2onnx's LayerNorm pattern written by hand on an input of ``shape``: a LayerNorm over
    the last axis at rank 3; at rank 4 GlobalAveragePool averages the last two axes."""
    hidden = shape[-1]
    constants = [helper.make_tensor(name, onnx.TensorProto.FLOAT, dims, values)
                 for name, dims, values in (("epsilon", [], [1e-3]), ("gamma", [hidden],
                                            [2.0] * hidden), ("beta", [hidden], [0.5] * hidden))]
    nodes = [helper.make_node(op, inputs, [output]) for op, inputs, output in (
        ("GlobalAveragePool", ["x0"], "mean"), ("Sub", ["x0", "mean"], "centred"),
        ("Mul", ["centred", "centred"], "square"), ("GlobalAveragePool", ["square"], "variance"),
        ("Add", ["variance", "epsilon"], "plus"), ("Sqrt", ["plus"], "std"),
        ("Reciprocal", ["std"], "inverse"), ("Mul", ["inverse", "gamma"], "scale"),
        ("Mul", ["centred", "scale"], "scaled"), ("Add", ["scaled", "beta"], "y"))]
    outputs = ["y"] + (["centred"] if centred_is_output else [])
    graph = helper.make_graph(
        nodes, "look_alike", [helper.make_tensor_value_info("x0", onnx.TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None) for name in outputs],
        constants)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape, centred_is_output, fused", [
    ((2, 5, 8), False, True),
    ((2, 3, 5, 8), False, False),  # GlobalAveragePool over two axes: no LayerNorm
    ((2, 5, 8), True, False),  # the centred input is needed elsewhere too
])
def test_only_a_true_layer_norm_is_rewritten(shape, centred_is_output, fused):
    model = layer_norm_look_alike(shape, centred_is_output)
    x = RNG.normal(size=shape).astype(np.float32)
    axes = tuple(range(2, len(shape)))  # GlobalAveragePool's
    centred = x - x.mean(axes, keepdims=True)
    want = centred / np.sqrt((centred ** 2).mean(axes, keepdims=True) + 1e-3) * 2.0 + 0.5
    assert fuse(model)["LayerNormalization"] == int(fused)
    assert ("GlobalAveragePool" in op_types(model)) is not fused
    np.testing.assert_allclose(run(model, x), want, atol=1e-5)


@pytest.mark.slow
def test_an_exported_model_keeps_its_answers_in_a_third_of_the_ops(sentence_model,
                                                                   sentence_onnx, tmp_path,
                                                                   monkeypatch):
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.serving.onnx_export import export_onnx
    from nlp_tutorials.tasks import TASKS

    monkeypatch.setitem(TASKS, SentenceTask.name, SentenceTask)
    head, tokenizer, task = load_finetuned(sentence_model)
    fused_path = sentence_onnx[0]
    plain_path = export_onnx(sentence_model, tmp_path / "plain", fused=False,
                             printer=lambda *_: None)
    plain, fused = onnx.load(plain_path), onnx.load(fused_path)
    layers = head.backbone.config.num_hidden_layers
    assert op_types(fused).count("LayerNormalization") == 2 * layers + 1  # and the embeddings'
    assert op_types(fused).count("Erf") == layers
    assert not {"GlobalAveragePool", "ReduceProd", "Reciprocal"} & set(op_types(fused))
    assert len(fused.graph.node) < len(plain.graph.node) / 2
    arrays = task.encode(tokenizer, [Sentence(text, "low") for text in SENTENCES], 24)
    want, got = (run_onnx(path, arrays, tokenizer.pad_id) for path in (plain_path, fused_path))
    assert want["probability"].std() > 0.01  # probabilities that differ between inputs
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], atol=WIDENED)
