"""Rewrite tf2onnx's graph of a BERT into the shorter forms ONNX Runtime runs fast.

tf2onnx converts TensorFlow's graph op by op. Where TensorFlow wrote a layer as many small ops,
the ONNX model keeps them all, and for one sentence pair ONNX Runtime's cost is mostly per op.
:func:`fuse` rewrites four such patterns into the forms ``torch.onnx.export`` writes for the
same model, which ONNX Runtime's own graph optimisations then fuse further:

- **LayerNorm**, ten ops (a mean, the centred input, its square, their mean, ``+ epsilon``,
  ``Sqrt``, ``Reciprocal``, two products, ``+ beta``): one ``LayerNormalization`` (opset 17).
- **The exact GELU**, ``x * 0.5 * erfc(-x / sqrt(2))`` with the export's ``Erfc`` as
  ``1 - Erf``: ``x * (1 + erf(x / sqrt(2))) * 0.5``, the same function in the form ONNX Runtime
  fuses with the bias before it into one ``BiasGelu``.
- **Dense on [batch, step, in]**: Keras computes it as a ``Tensordot``, flattening to
  [tokens, in], multiplying and reshaping back, with a dozen ``Shape``, ``Gather``,
  ``ReduceProd``, ``Concat`` and ``Cast`` ops computing the two shapes. ONNX's ``MatMul``
  multiplies over leading axes itself: one ``MatMul``.
- **Reshapes whose target is built from the input's own shape** (splitting the heads,
  [batch, step, heads, size], and merging them back): a constant target, ``0`` where ONNX is to
  copy the input's dimension.

Each rewrite matches its pattern exactly (the constants' values, the ranks, and no
intermediate result used elsewhere) and leaves the graph alone where anything differs; nodes
that no output needs any more are then removed. The export checks the rewritten model's outputs
against TensorFlow's before writing it (:data:`nlp_tutorials.serving.onnx_export.TOLERANCE`).
MiniLM's graph goes from 882 nodes to 273; its speed: docs/serving.md#speed.
"""
import numpy as np
import onnx
from onnx import helper, numpy_helper

SQRT_HALF = 0.7071067811865476  # 1 / sqrt(2)


class GraphIndex:
    """Who makes and who reads each tensor of ``model``'s graph, its constants, and the ranks
    ONNX's shape inference finds."""

    def __init__(self, model: onnx.ModelProto):
        self.graph = model.graph
        inferred = onnx.shape_inference.infer_shapes(model).graph
        self.ranks = {info.name: len(info.type.tensor_type.shape.dim)
                      for info in [*inferred.value_info, *inferred.input, *inferred.output]
                      if info.type.tensor_type.HasField("shape")}
        self.constants = {tensor.name: numpy_helper.to_array(tensor)
                          for tensor in self.graph.initializer}
        self.outputs = {output.name for output in self.graph.output}
        self.refresh()

    def refresh(self) -> None:
        self.producer = {name: node for node in self.graph.node for name in node.output}
        self.readers = {}
        for node in self.graph.node:
            for name in node.input:
                self.readers.setdefault(name, []).append(node)

    def made_by(self, name: str, op_type: str, through_casts: bool = False):
        """The node of type ``op_type`` that makes ``name``, else None. ``through_casts``: look
        through ``Cast`` nodes on the way, for shapes only (int32 and int64 hold a shape
        alike)."""
        node = self.producer.get(name)
        while through_casts and node is not None and node.op_type == "Cast":
            node = self.producer.get(node.input[0])
        return node if node is not None and node.op_type == op_type else None

    def sole_reader(self, name: str, op_type: str):
        """The one node that reads ``name``, if it is an ``op_type`` and ``name`` is no graph
        output; else None."""
        readers = self.readers.get(name, [])
        if len(readers) == 1 and readers[0].op_type == op_type and name not in self.outputs:
            return readers[0]
        return None

    def scalar(self, name: str):
        """The value of a one-element constant, else None."""
        value = self.constants.get(name)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def add_constant(self, name: str, value: np.ndarray) -> str:
        self.graph.initializer.append(numpy_helper.from_array(value, name))
        self.constants[name] = value
        return name


def other_input(node, name: str):
    """The input of two-input ``node`` that is not ``name``; None if ``name`` is neither."""
    first, second = node.input
    return second if first == name else first if second == name else None


def only_read_inside(index: GraphIndex, nodes) -> bool:
    """Whether every output of ``nodes`` but the last node's is read by ``nodes`` alone (nodes
    known by their first output's name, as in :func:`rewrite_all`)."""
    inside = {node.output[0] for node in nodes}
    return all(reader.output[0] in inside and name not in index.outputs
               for node in nodes[:-1] for name in node.output
               for reader in index.readers.get(name, []))


def layer_norm_at(index: GraphIndex, reciprocal):
    """(old nodes, new nodes) for the LayerNorm whose ``1 / sqrt(variance + epsilon)`` is
    ``reciprocal``, over the last axis of a [batch, step, hidden] input; None if not one."""
    sqrt = index.made_by(reciprocal.input[0], "Sqrt")
    add_epsilon = sqrt and index.made_by(sqrt.input[0], "Add")
    if add_epsilon is None:
        return None
    epsilon = next((name for name in add_epsilon.input if index.scalar(name) is not None), None)
    variance = epsilon and index.made_by(other_input(add_epsilon, epsilon), "GlobalAveragePool")
    square = variance and index.made_by(variance.input[0], "Mul")
    centred = square and square.input[0] == square.input[1] and index.made_by(square.input[0],
                                                                              "Sub")
    if not centred:
        return None
    x = centred.input[0]
    mean = index.made_by(centred.input[1], "GlobalAveragePool")
    # GlobalAveragePool averages every axis after the second: the last axis alone at rank 3.
    if mean is None or mean.input[0] != x or index.ranks.get(x) != 3:
        return None
    scale = index.sole_reader(reciprocal.output[0], "Mul")  # gamma / std
    scaled = scale and index.sole_reader(scale.output[0], "Mul")  # centred * gamma / std
    shift = scaled and index.sole_reader(scaled.output[0], "Add")  # ... + beta
    if not shift or other_input(scaled, scale.output[0]) != centred.output[0]:
        return None
    gamma, beta = other_input(scale, reciprocal.output[0]), other_input(shift, scaled.output[0])
    nodes = [mean, centred, square, variance, add_epsilon, sqrt, reciprocal, scale, scaled,
             shift]
    if (index.constants.get(gamma, np.empty(0)).ndim != 1
            or index.constants.get(beta, np.empty(0)).ndim != 1
            or not only_read_inside(index, nodes)):
        return None
    fused = helper.make_node("LayerNormalization", [x, gamma, beta], list(shift.output),
                             name=shift.name, axis=-1, epsilon=index.scalar(epsilon))
    return nodes, [fused]


def gelu_at(index: GraphIndex, erf):
    """(old nodes, new nodes) for the GELU ``x * (0.5 * (1 - erf(x * -sqrt(1/2))))`` around
    ``erf``, rewritten as ``x * (1 + erf(x / sqrt(2))) * 0.5``; None if not one."""
    scaled = index.made_by(erf.input[0], "Mul")
    if scaled is None:
        return None
    factor = next((name for name in scaled.input if index.scalar(name) is not None), None)
    if factor is None or not np.isclose(index.scalar(factor), -SQRT_HALF):
        return None
    x = other_input(scaled, factor)
    complement = index.sole_reader(erf.output[0], "Sub")
    half = complement and index.sole_reader(complement.output[0], "Mul")
    product = half and index.sole_reader(half.output[0], "Mul")
    if (not product or index.scalar(complement.input[0]) != 1.0
            or index.scalar(other_input(half, complement.output[0])) != 0.5
            or other_input(product, half.output[0]) != x):
        return None
    nodes = [scaled, erf, complement, half, product]
    if not only_read_inside(index, nodes):
        return None
    dtype = index.constants[factor].dtype
    name = product.name + "/gelu"
    sqrt_2, one, one_half = (index.add_constant(f"{name}/{label}", np.array(value, dtype))
                             for label, value in (("sqrt_2", 1 / SQRT_HALF), ("one", 1.0),
                                                  ("half", 0.5)))
    scaled_x, erf_x, doubled_cdf, doubled = (f"{name}/{label}" for label in
                                             ("scaled", "erf", "doubled_cdf", "doubled"))
    fused = [helper.make_node("Div", [x, sqrt_2], [scaled_x], name=scaled_x),
             helper.make_node("Erf", [scaled_x], [erf_x], name=erf_x),
             helper.make_node("Add", [erf_x, one], [doubled_cdf], name=doubled_cdf),  # 2 Phi(x)
             helper.make_node("Mul", [x, doubled_cdf], [doubled], name=doubled),
             helper.make_node("Mul", [doubled, one_half], list(product.output), name=name)]
    return nodes, fused


def dense_at(index: GraphIndex, matmul):
    """(old nodes, new nodes) for Keras' Tensordot around ``matmul``: ``reshape(reshape(x,
    [tokens, in]) @ W, shape(x)[:-1] + [out])``, rewritten as ``x @ W``; None if not one."""
    weight = index.constants.get(matmul.input[1])
    flatten = index.made_by(matmul.input[0], "Reshape")
    unflatten = index.sole_reader(matmul.output[0], "Reshape")
    if weight is None or weight.ndim != 2 or flatten is None or unflatten is None:
        return None
    x = flatten.input[0]
    rank = index.ranks.get(x)
    target = index.made_by(unflatten.input[1], "Concat", through_casts=True)
    if rank is None or index.ranks.get(flatten.output[0]) != 2 or target is None:
        return None
    leading = index.made_by(target.input[0], "Gather", through_casts=True)  # shape(x)[:-1]
    shape = leading and index.made_by(leading.input[0], "Shape", through_casts=True)
    indices = leading and index.constants.get(leading.input[1])
    last = index.constants.get(target.input[-1])
    if (len(target.input) != 2 or shape is None or shape.input[0] != x or indices is None
            or indices.tolist() != list(range(rank - 1)) or last is None
            or last.tolist() != [weight.shape[1]]):
        return None
    # The flattening reshape may feed other products too (query, key, value share it).
    return [matmul, unflatten], [helper.make_node("MatMul", [x, matmul.input[1]],
                                                  list(unflatten.output), name=matmul.name)]


def copied_dimension(index: GraphIndex, name: str, x: str):
    """i if ``name`` is dimension i of ``x``'s shape, ``Slice(Shape(x), [i], [i + 1])``."""
    piece = index.made_by(name, "Slice", through_casts=True)
    shape = piece and index.made_by(piece.input[0], "Shape", through_casts=True)
    if shape is None or shape.input[0] != x or shape.attribute:
        return None
    bounds = [index.constants.get(name) for name in piece.input[1:]]
    if any(value is None for value in bounds):
        return None
    starts, ends, *optional = [value.tolist() for value in bounds]
    axes, steps = optional + [[0], [1]][len(optional):]  # ONNX's defaults where left out
    if len(starts) != 1 or starts[0] < 0 or ends != [starts[0] + 1] or axes != [0] or steps != [1]:
        return None
    return starts[0]


def reshape_at(index: GraphIndex, reshape):
    """(old nodes, new nodes) for a Reshape of ``x`` to a target concatenated from constants
    and dimensions of ``x`` in their own places, rewritten with a constant target (``0``:
    copy that dimension); None if the target is anything else."""
    target = index.made_by(reshape.input[1], "Concat", through_casts=True)
    if target is None:
        return None
    x, dimensions = reshape.input[0], []
    for part in target.input:
        value = index.constants.get(part)
        if value is not None and value.ndim == 1 and 0 not in value.tolist():
            dimensions.extend(value.tolist())
        elif value is None and copied_dimension(index, part, x) == len(dimensions):
            dimensions.append(0)
        else:
            return None
    if 0 not in dimensions:
        return None
    constant = index.add_constant(reshape.name + "/target", np.array(dimensions, np.int64))
    return [reshape], [helper.make_node("Reshape", [x, constant], list(reshape.output),
                                        name=reshape.name)]


REWRITES = (("LayerNormalization", "Reciprocal", layer_norm_at), ("GELU", "Erf", gelu_at),
            ("Dense", "MatMul", dense_at), ("Reshape", "Reshape", reshape_at))


def rewrite_all(index: GraphIndex, op_type: str, rewrite) -> int:
    """Apply ``rewrite`` at every ``op_type`` node where it matches; how many it rewrote.

    Nodes are known by their first output's name: unique in a graph, and kept when the
    graph's node list is rebuilt (which copies every node).
    """
    count = 0
    for output in [node.output[0] for node in index.graph.node if node.op_type == op_type]:
        node = index.producer.get(output)
        found = node is not None and node.op_type == op_type and rewrite(index, node)
        if not found:
            continue
        old, new = found
        nodes, gone = list(index.graph.node), {node.output[0] for node in old}
        # The new nodes read only what was made before the first old node.
        at = next(k for k, node in enumerate(nodes) if node.output[0] in gone)
        kept = [node for node in nodes if node.output[0] not in gone]
        del index.graph.node[:]
        index.graph.node.extend(kept[:at] + new + kept[at:])
        index.refresh()
        count += 1
    return count


def remove_unused(index: GraphIndex) -> int:
    """Drop the nodes and constants no graph output needs; how many nodes went."""
    needed, kept = set(index.outputs), []
    for node in reversed(index.graph.node):
        if needed.intersection(node.output):
            kept.append(node)
            needed.update(node.input)
    removed = len(index.graph.node) - len(kept)
    del index.graph.node[:]
    index.graph.node.extend(reversed(kept))
    constants = [tensor for tensor in index.graph.initializer if tensor.name in needed]
    del index.graph.initializer[:]
    index.graph.initializer.extend(constants)
    index.refresh()
    return removed


def fuse(model: onnx.ModelProto) -> dict:
    """Rewrite ``model``'s graph in place (module docstring). Returns how many of each
    pattern were rewritten, by name, and how many nodes were removed as unused."""
    if any(attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
           for node in model.graph.node for attribute in node.attribute):
        return {}  # a control-flow body reads names this index does not see: left alone
    index = GraphIndex(model)
    counts = {name: rewrite_all(index, op_type, rewrite)
              for name, op_type, rewrite in REWRITES}
    counts["unused"] = remove_unused(index)
    return counts
