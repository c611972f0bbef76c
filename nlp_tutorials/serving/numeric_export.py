"""What the exports for other runtimes share (``export-model --format onnx`` and ``--format
tflite``): the SavedModel module's numeric ``predict_ids`` as one function, frozen; the probe
batch whose answers are checked against TensorFlow's before anything is written; and the
version folder written atomically with the tokenizer beside the model.
"""
import json
from pathlib import Path

import numpy as np
import tensorflow as tf

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.model_files import QUANTIZATION_FILE


def numeric_predict_ids(module):
    """``module.predict_ids`` without its text outputs, as a tf.function of the same inputs."""
    specs = module.signatures()["predict_ids"].structured_input_signature[0]

    def predict_ids(*inputs):
        outputs = module.predict_ids(*inputs)
        return {name: value for name, value in outputs.items() if value.dtype != tf.string}

    return tf.function(predict_ids, input_signature=specs)


def frozen(function):
    """(graph_def, input names, output names, {tensor name: signature name}) of ``function``
    with its weights and captured constants made constants.

    tf2onnx's ``from_function`` would list the captured label names (the text outputs') among
    the inputs even where no output reads them; freezing first leaves only the ids as inputs.
    """
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    concrete = function.get_concrete_function()
    constant = convert_variables_to_constants_v2(concrete)
    inputs = [tensor.name for tensor in constant.inputs]
    outputs = [tensor.name for tensor in constant.outputs]
    # Outputs keep their order, that of the output dict flattened (sorted by name).
    output_names = tf.nest.flatten({name: name for name in concrete.structured_outputs})
    names = dict(zip(inputs, (spec.name for spec in function.input_signature)))
    names.update(zip(outputs, output_names))
    return constant.graph.as_graph_def(), inputs, outputs, names


def probe_inputs(specs, vocab_size: int) -> dict:
    """A fixed batch of ids for the check, shaped as ``specs`` ask ([2, step] or [2, 2, step]):
    random ids, a second segment, and padding at the end of the last row."""
    rng = np.random.default_rng(0)
    shape = [2] * (len(specs[0].shape) - 1) + [12]
    types = np.zeros(shape, np.int32)
    types[..., 7:] = 1
    mask = np.ones(shape, np.int32)
    mask[-1, ..., 9:] = 0
    return {"input_ids": rng.integers(0, vocab_size, shape).astype(np.int32),
            "token_type_ids": types, "attention_mask": mask}


def largest_difference_from(run, function, feeds: dict, runtime: str) -> float:
    """Largest absolute difference between ``run(feeds)`` (a runtime's outputs by name) and
    ``function``'s; ``runtime`` names the conversion in the error when the outputs differ."""
    got = run(feeds)
    want = function(*(tf.constant(feeds[spec.name]) for spec in function.input_signature))
    if set(got) != set(want):
        raise UserError(f"{runtime} conversion: outputs {sorted(got)}, expected {sorted(want)}")
    return max(float(np.abs(got[name].astype(np.float64) - want[name].numpy()).max())
               for name in got)


def save_served(target: Path, model_file: str, model_bytes: bytes, tokenizer,
                report: dict | None = None) -> Path:
    """Write ``target/model_file`` with the tokenizer beside it (and, for an int8 model, its
    check's ``report``), atomically: the old version folder stays whole until the new one is
    in place. Returns the model's path."""
    from nlp_tutorials.system.files import save_folder_atomic

    def save(folder):
        folder.mkdir()
        (folder / model_file).write_bytes(model_bytes)
        tokenizer.save(folder)
        if report is not None:
            (folder / QUANTIZATION_FILE).write_text(
                json.dumps(report, indent=2, default=float) + "\n")

    save_folder_atomic(target, save)
    return target / model_file
