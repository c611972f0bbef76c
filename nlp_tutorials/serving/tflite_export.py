"""Serve a fine-tuned BERT from LiteRT (TensorFlow Lite): ``export-model --format tflite``.

``python -m nlp_tutorials.bert export-model --model-dir DIR --output OUT --format tflite``
writes ``OUT/<version>/model.tflite`` with the model's tokenizer beside it (``vocab.txt``,
``tokenizer_config.json``). As the ONNX export (:mod:`~nlp_tutorials.serving.onnx_export`), the
model is the SavedModel's ``predict_ids`` signature less its text outputs: one signature,
``serving_default``, taking ``input_ids``, ``token_type_ids``, ``attention_mask`` (int32
[batch, step]; [batch, choices, step] for multiple choice) and answering the same numeric
outputs. Batch and step are free: resize the inputs (``resize_tensor_input``, then
``allocate_tensors``; a signature runner does it itself). The model's metadata holds the
task's name (``task``), its labels (``labels``, a JSON list indexed by label id) and the length
``predict`` truncates to (``max_len``).

The model takes ids, not text: tensorflow-text's ops (``NormalizeUTF8``,
``RegexSplitWithOffsets``, ``FastWordpieceTokenizeWithOffsets``) and TensorFlow's string ops
have no LiteRT builtin, and converted as custom or select (Flex) ops they need kernels that the
``ai-edge-litert`` runtime does not ship; tokenize with the package's tokenizer first.

The conversion is TensorFlow's (``tf.lite.TFLiteConverter``) with LiteRT's builtin ops only,
from the frozen ``predict_ids`` (weights as constants, so the runtime's XNNPACK delegate, its
default on CPU, runs the matmuls). The model's exact GELU is traced as ``tf.nn.gelu`` (LiteRT's
``GELU`` op): the training kernel's ``erfc`` has no builtin. Float32 by default; with
``--quantize int8`` dynamic-range int8 (``tf.lite.Optimize.DEFAULT`` without a representative
dataset): the weights of the matmuls stored as int8, the activations quantized as the model
runs, the rest float32. Before anything is written LiteRT runs the float32 model on a probe
batch and a conversion whose outputs differ from TensorFlow's by more than :data:`TOLERANCE` is
refused; an int8 model is then scored against the float32 one on the task's dev split
(:mod:`~nlp_tutorials.serving.quantization`). The runtime is ``pip install
'nlp_tutorials[litert]'`` (``ai-edge-litert``).
"""
import contextlib
import importlib
import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from nlp_tutorials.serving.numeric_export import (frozen, largest_difference_from,
                                                   numeric_predict_ids, probe_inputs, save_served)
from nlp_tutorials.serving.quantization import Int8Check, int8_report
from nlp_tutorials.speed.kernels import gelu
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.model_files import QUANTIZATION_FILE, SERVED_VERSION
from nlp_tutorials.system.startup import dropped_severities, filtered_stderr

MODEL_FILE = "model.tflite"
SIGNATURE = "serving_default"
# what the converter writes into the metadata table itself (binary, or the runtime's version)
CONVERTERS_METADATA = ("min_runtime_version", "CONVERSION_METADATA")
TOLERANCE = 1e-4  # as ONNX's: two runtimes' float32 kernels agree to about 1e-6 on these models
# LiteRT's own log has no switch in its Python API: its INFO lines ("INFO: Created TensorFlow
# Lite XNNPACK delegate for CPU.", written as an interpreter first allocates) start so.
LITERT_INFO = r"INFO: "


def import_runtime():
    """ai_edge_litert's ``Interpreter``; one line if the package is missing."""
    try:
        importlib.import_module("ai_edge_litert")
        module = importlib.import_module("ai_edge_litert.interpreter")
    except ImportError:
        raise UserError("--format tflite needs ai-edge-litert: pip install "
                        "'nlp_tutorials[litert]'") from None
    return module.Interpreter


class LiteRtRunner:
    """A LiteRT model on the CPU (XNNPACK, the interpreter's default delegate): feeds ->
    {output name: array}. The inputs are resized, and the tensors allocated again, whenever a
    batch comes in another shape."""

    def __init__(self, model_bytes: bytes, threads: int | None = None):
        interpreter = import_runtime()(model_content=model_bytes, num_threads=threads)
        signature = interpreter.get_signature_runner(SIGNATURE)
        self.interpreter = interpreter
        self.inputs = {name: detail["index"]
                       for name, detail in signature.get_input_details().items()}
        self.outputs = {name: detail["index"]
                        for name, detail in signature.get_output_details().items()}
        self.shapes = None

    def __call__(self, feeds: dict) -> dict:
        shapes = {name: np.shape(feeds[name]) for name in self.inputs}
        if shapes != self.shapes:
            for name, index in self.inputs.items():
                self.interpreter.resize_tensor_input(index, shapes[name], strict=False)
            with filtered_stderr(litert_info() if self.shapes is None else None):
                self.interpreter.allocate_tensors()
            self.shapes = shapes
        for name, index in self.inputs.items():
            self.interpreter.set_tensor(index, np.asarray(feeds[name], np.int32))
        self.interpreter.invoke()
        return {name: self.interpreter.get_tensor(index) for name, index in self.outputs.items()}


def litert_info() -> str | None:
    """The pattern of LiteRT's INFO lines where ``TF_CPP_MIN_LOG_LEVEL`` drops TensorFlow's own
    (the commands' level does); None, keeping them, where it shows INFO (0, as ``--verbose``
    sets it)."""
    shown = "I" not in dropped_severities(os.environ.get("TF_CPP_MIN_LOG_LEVEL"))
    return None if shown else LITERT_INFO


@contextlib.contextmanager
def builtin_gelu(head):
    """While the block runs, the head's exact GELU (:func:`~nlp_tutorials.speed.kernels.gelu`,
    built on ``erfc``) is ``tf.nn.gelu``, which the converter makes LiteRT's ``GELU`` op; the
    two agree to float32 rounding."""
    layers = [layer for layer in head._flatten_layers()
              if getattr(layer, "activation", None) is gelu]
    for layer in layers:
        layer.activation = exact_gelu
    try:
        yield
    finally:
        for layer in layers:
            layer.activation = gelu


def exact_gelu(x):
    return tf.nn.gelu(x, approximate=False)


def converted(function, int8: bool) -> bytes:
    """``function`` (the numeric ``predict_ids``, traced already) as a LiteRT model of builtin
    ops: frozen, saved as a SavedModel of one ``serving_default`` signature (so the model keeps
    the inputs' and outputs' names), converted; ``int8``: dynamic-range quantized."""
    graph_def, inputs, outputs, names = frozen(function)

    def predict_ids(*ids):
        answered = tf.graph_util.import_graph_def(graph_def, input_map=dict(zip(inputs, ids)),
                                                  return_elements=outputs, name="")
        return {names[output]: tensor for output, tensor in zip(outputs, answered)}

    holder = tf.Module()
    holder.predict_ids = tf.function(predict_ids, input_signature=function.input_signature)
    with tempfile.TemporaryDirectory() as folder:
        # the frozen graph still holds the training kernels' custom gradients: not saved
        tf.saved_model.save(holder, folder,
                            signatures={SIGNATURE: holder.predict_ids.get_concrete_function()},
                            options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
        converter = tf.lite.TFLiteConverter.from_saved_model(folder)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        if int8:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        try:
            return converter.convert()
        except Exception as error:  # the converter's ConverterError lists every op it lacks
            left = sorted(set(_unconverted_ops(str(error))))
            raise UserError(f"TensorFlow Lite conversion: no LiteRT builtin for "
                            f"{', '.join(left) or str(error).splitlines()[0]}") from None


def _unconverted_ops(message: str) -> list:
    return re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", message)


def with_metadata(model_bytes: bytes, metadata: dict) -> bytes:
    """The LiteRT model with ``metadata`` (name -> text) in its flatbuffer's metadata table."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    for name, value in metadata.items():
        buffer = schema.BufferT()
        buffer.data = np.frombuffer(value.encode("utf-8"), np.uint8)
        model.buffers.append(buffer)
        entry = schema.MetadataT()
        entry.name, entry.buffer = name, len(model.buffers) - 1
        model.metadata = [*(model.metadata or []), entry]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def read_metadata(model_bytes: bytes) -> dict:
    """The text metadata :func:`with_metadata` wrote, by name."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(model_bytes))
    entries = {entry.name.decode(): entry.buffer for entry in model.metadata or []}
    return {name: bytes(model.buffers[buffer].data).decode("utf-8")
            for name, buffer in entries.items() if name not in CONVERTERS_METADATA}


def convert(module, task, vocab_size: int, int8: bool = False):
    """(float32 LiteRT model bytes, int8 model bytes or None, largest difference of the
    float32 model from TensorFlow on the probe batch)."""
    reference = numeric_predict_ids(module)
    function = numeric_predict_ids(module)  # traced apart: with LiteRT's GELU
    logger, level = tf.get_logger(), tf.get_logger().level
    logger.setLevel("ERROR")  # freezing is TF1 API: its deprecation warnings say nothing to users
    try:
        with builtin_gelu(module.head):
            function.get_concrete_function()
        float_model = converted(function, int8=False)
        int8_model = converted(function, int8=True) if int8 else None
    finally:
        logger.setLevel(level)
    metadata = {"task": task.name, "labels": json.dumps(list(task.labels)),
                "max_len": str(module.max_len)}
    float_model = with_metadata(float_model, metadata)
    int8_model = with_metadata(int8_model, metadata) if int8_model else None
    difference = largest_difference_from(
        LiteRtRunner(float_model), reference,
        probe_inputs(reference.input_signature, vocab_size), "TensorFlow Lite")
    if not difference <= TOLERANCE:
        raise UserError(f"TensorFlow Lite conversion: LiteRT's outputs differ from TensorFlow's "
                        f"by {difference:.2g} on a probe batch (expected at most {TOLERANCE:g})")
    return float_model, int8_model, difference


def export_tflite(model_dir, output, version: int = SERVED_VERSION, overwrite: bool = False,
                  printer=print, int8: Int8Check | None = None) -> Path:
    """Write the fine-tuned model in ``model_dir`` as ``output/<version>/model.tflite`` with its
    tokenizer beside it, atomically. Returns the path of ``model.tflite``. ``int8``: the
    model's weights quantized to int8 (dynamic range), written only if it passes that check
    against the float model (:mod:`~nlp_tutorials.serving.quantization`), with the check's
    report beside it."""
    from nlp_tutorials.serving.savedmodel import serving_module
    from nlp_tutorials.system.files import refuse_existing

    target = Path(output) / str(version)
    refuse_existing(target, overwrite, "--output")
    import_runtime()  # a missing extra is said before the model loads
    module, task, tokenizer = serving_module(model_dir, strings=False)
    float_model, int8_model, difference = convert(
        module, task, module.head.backbone.config.vocab_size, int8=int8 is not None)
    report = None
    if int8 is not None:
        report = int8_report({"float32": LiteRtRunner(float_model),
                              "int8": LiteRtRunner(int8_model)},
                             module, task, tokenizer, model_dir, int8, printer)
    path = save_served(target, MODEL_FILE, int8_model or float_model, tokenizer, report)
    if report is None:
        printer(f"LiteRT model written to {path} (LiteRT's outputs within {difference:.1g} of "
                f"TensorFlow's on a probe batch)")
    else:
        printer(f"int8 LiteRT model written to {path}, its check in "
                f"{target / QUANTIZATION_FILE}")
    return path
