"""Serve a fine-tuned BERT from ONNX Runtime: ``export-model --format onnx``.

``python -m nlp_tutorials.bert export-model --model-dir DIR --output OUT --format onnx`` writes
``OUT/<version>/model.onnx`` (the layout of Triton's model repository) with the model's
tokenizer beside it (``vocab.txt``, ``tokenizer_config.json``). The ONNX model is the
SavedModel's ``predict_ids`` signature: ``input_ids``, ``token_type_ids``, ``attention_mask``
(int32 [batch, step]; [batch, choices, step] for multiple choice) in, the same numeric outputs
out (``probability`` and ``label``, ``score``, ``probabilities`` and ``choice``, ``tag_id``
and ``probability``, or a span model's ``start_logits`` and ``end_logits``). Text outputs
(``label_name``, ``tag``) are left out, since ONNX Runtime's string support is thin: the label
names are in the model's metadata (``labels``, a JSON list indexed by label id), with the task's
name (``task``) and the length ``predict`` truncates to (``max_len``).

The conversion is tf2onnx's (``pip install 'nlp_tutorials[onnx]'``), at ONNX opset 17. It has
no rule for ``Erfc``, the op TensorFlow's exact GELU is built from, so one is added here:
erfc(x) = 1 - erf(x), with ONNX's own ``Erf``. Before anything is written, ONNX Runtime runs
the converted model on a probe batch and its outputs are compared with TensorFlow's: a
conversion that differs by more than :data:`TOLERANCE` is refused. Before that check, the
converted graph is rewritten into fewer, larger ops (one ``LayerNormalization`` for ten, a
GELU and a Dense in the forms ONNX Runtime fuses: :mod:`nlp_tutorials.serving.onnx_fusion`).
"""
import contextlib
import importlib
import json
from collections import OrderedDict
from pathlib import Path

import numpy as np
import tensorflow as tf

from nlp_tutorials.serving.numeric_export import (frozen, largest_difference_from,
                                                   numeric_predict_ids, probe_inputs, save_served)
from nlp_tutorials.serving.quantization import (WEIGHT_BITS, Int8Check, int8_candidates,
                                                 int8_report, recipe_name)
from nlp_tutorials.system import hardware
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.model_files import QUANTIZATION_FILE, SERVED_VERSION

OPSET = 17  # ONNX Runtime 1.14 and later run it
MODEL_FILE = "model.onnx"
TOLERANCE = 1e-4  # float32 kernels of two runtimes agree to about 1e-6 on these models
# tf2onnx 1.17's reshape pass writes the heads' split, [batch, step, heads, size], as
# [0, 0, heads, size] (0: keep the input's size), then its back-to-back pass merges it with the
# reshape before it, whose input is [tokens, hidden]: for some sizes (hidden 16, 2 heads) ONNX
# Runtime then refuses the model. Without the reshape pass every size converts right.
SKIPPED_OPTIMIZER = "reshape_optimizer"
_converter = None  # tf2onnx, once imported with the Erfc rule registered


def import_converter():
    """tf2onnx with the ``Erfc`` rule registered; one line if it or onnxruntime (which checks
    the converted model) is missing."""
    global _converter
    for name in ("tf2onnx", "onnxruntime"):
        try:
            importlib.import_module(name)
        except ImportError:
            raise UserError(f"--format onnx needs {name}: pip install 'nlp_tutorials[onnx]' "
                            f"(tf2onnx and onnxruntime)") from None
    if _converter is None:
        import tf2onnx

        register_erfc()
        _converter = tf2onnx
    return _converter


def register_erfc() -> None:
    """Teach tf2onnx TensorFlow's ``Erfc``: the node becomes ONNX's ``Erf`` (opset 9 and
    later), followed by ``1 - erf``."""
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Erfc")
    class ComplementaryErrorFunction:
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            node.type = "Erf"
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
            one = ctx.make_const(utils.make_name("one"), np.array(1, dtype=dtype))
            difference = ctx.insert_new_node_on_output("Sub", node.output[0],
                                                       name=utils.make_name(node.name))
            ctx.replace_inputs(difference, [one.output[0], node.output[0]])
            ctx.copy_shape(node.output[0], difference.output[0])


@contextlib.contextmanager
def optimizers_without(name: str):
    """tf2onnx's graph optimizers less ``name``, while the block runs."""
    from tf2onnx import optimizer

    every = optimizer._optimizers
    optimizer._optimizers = OrderedDict((key, factory) for key, factory in every.items()
                                        if key != name)
    try:
        yield
    finally:
        optimizer._optimizers = every


def largest_difference(model_bytes: bytes, function, feeds: dict) -> float:
    """Largest absolute difference between ONNX Runtime's outputs and ``function``'s."""
    return largest_difference_from(onnx_runner(model_bytes), function, feeds, "ONNX")


def onnx_runner(model_bytes: bytes):
    """The ONNX model run by ONNX Runtime on the CPU: feeds -> {output name: array}."""
    import onnxruntime

    session = onnxruntime.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    names = [output.name for output in session.get_outputs()]
    return lambda feeds: dict(zip(names, session.run(None, feeds)))


def convert(module, task, vocab_size: int, fused: bool = True):
    """(ONNX model bytes, largest difference from TensorFlow on the probe batch). ``fused``:
    rewrite the converted graph into fewer ops (:mod:`nlp_tutorials.serving.onnx_fusion`)."""
    from nlp_tutorials.serving.onnx_fusion import fuse

    tf2onnx = import_converter()
    function = numeric_predict_ids(module)
    logger, level = tf.get_logger(), tf.get_logger().level
    logger.setLevel("ERROR")  # freezing is TF1 API: its deprecation warnings say nothing to users
    try:
        graph_def, inputs, outputs, names = frozen(function)
        with optimizers_without(SKIPPED_OPTIMIZER):
            proto, _ = tf2onnx.convert.from_graph_def(
                graph_def, input_names=inputs, output_names=outputs, tensors_to_rename=names,
                opset=OPSET)
    finally:
        logger.setLevel(level)
    left = sorted({node.op_type for node in proto.graph.node if node.domain not in ("", "ai.onnx")})
    if left:
        raise UserError(f"ONNX conversion left TensorFlow ops without an ONNX rule: "
                        f"{', '.join(left)}")
    if fused:
        fuse(proto)
    for key, value in {"task": task.name, "labels": json.dumps(list(task.labels)),
                       "max_len": str(module.max_len)}.items():
        proto.metadata_props.add(key=key, value=value)
    model_bytes = proto.SerializeToString()
    difference = largest_difference(model_bytes, function,
                                    probe_inputs(function.input_signature, vocab_size))
    if not difference <= TOLERANCE:
        raise UserError(f"ONNX conversion: ONNX Runtime's outputs differ from TensorFlow's by "
                        f"{difference:.2g} on a probe batch (expected at most {TOLERANCE:g})")
    return model_bytes, difference


def export_onnx(model_dir, output, version: int = SERVED_VERSION, overwrite: bool = False,
                printer=print, fused: bool = True, int8: Int8Check | None = None) -> Path:
    """Write the fine-tuned model in ``model_dir`` as ``output/<version>/model.onnx`` with its
    tokenizer beside it, atomically (the old version folder stays whole until the new one is
    in place). Returns the path of ``model.onnx``. ``fused=False`` writes tf2onnx's graph as
    it converted it, without :mod:`~nlp_tutorials.serving.onnx_fusion`'s rewrites (to measure
    what they give: benchmarks/serving_speed.py). ``int8``: the model's matmuls quantized to
    int8, written only if it passes that check against the float model
    (:mod:`~nlp_tutorials.serving.quantization`: of the candidates, the one scoring best), with
    the check's report beside it."""
    from nlp_tutorials.serving.savedmodel import serving_module
    from nlp_tutorials.system.files import refuse_existing

    target = Path(output) / str(version)
    refuse_existing(target, overwrite, "--output")
    import_converter()  # a missing extra is said before the model loads
    module, task, tokenizer = serving_module(model_dir, strings=False)
    model_bytes, difference = convert(module, task, module.head.backbone.config.vocab_size,
                                      fused)
    report = None
    if int8 is not None:
        candidates = int8_candidates(model_bytes)
        runners = {"float32": onnx_runner(model_bytes),
                   **{name: onnx_runner(found) for name, found in candidates.items()}}
        report = int8_report(runners, module, task, tokenizer, model_dir, int8, printer)
        model_bytes = candidates[report["recipe"]]
        if report["recipe"] == recipe_name(max(WEIGHT_BITS)) and hardware.has_vnni():
            printer(f"note: {report['recipe']} scored best on this CPU, which has VNNI; a CPU "
                    f"without it (no avx512_vnni or avx_vnni flag) may saturate their "
                    f"products: check the model there before serving it there")
    save_served(target, MODEL_FILE, model_bytes, tokenizer, report)
    if report is None:
        printer(f"ONNX model written to {target / MODEL_FILE} (opset {OPSET}; ONNX Runtime's "
                f"outputs within {difference:.1g} of TensorFlow's on a probe batch)")
    else:
        printer(f"int8 ONNX model written to {target / MODEL_FILE} (opset {OPSET}), its check "
                f"in {target / QUANTIZATION_FILE}")
    return target / MODEL_FILE
