"""int8 models, scored before they are written: ``export-model --format onnx --quantize int8``
and ``--format tflite --quantize int8``.

The ONNX quantization is ONNX Runtime's own (``onnxruntime.quantization.quantize_dynamic``, the
recipe HuggingFace's Optimum applies too): each matmul by a weight stores the weight as int8,
one scale per output column (per channel), and quantizes the activations entering it to
uint8 batch by batch as the model runs, so no calibration pass is needed
(:func:`quantize_int8`). Two such models are made, the weights keeping 7 or 8 bits of range,
and the check keeps the one that scores better (:func:`kept_recipe`). A CPU with VNNI
(AVX512_VNNI or AVX_VNNI) multiplies int8 in one instruction; how much faster a model answers
depends on the CPU (benchmarks/serving_speed.py). Left in float32: the products of two
activations (attention's scores and weighted sum), whose ranges change with every input, and
everything else (LayerNorm, softmax, GELU).
The LiteRT model's is TensorFlow's converter's dynamic-range quantization
(:mod:`~nlp_tutorials.serving.tflite_export`), on the same plan.

The check: the float32 model and each int8 model answer the task's dev split (or the file
``--calibration`` names, in the task's own format) in their runtime (ONNX Runtime, LiteRT),
batch for batch, and each answer is scored by the task's metric as ``evaluate`` scores it.
The scores, how many predictions changed and the largest change in an output (a
probability, score or logit) are printed and saved beside the model (``quantization.json``);
an int8 model that loses more than ``--max-drop`` points of the task's first metric is
refused and nothing is written.
"""
import dataclasses
import json
import logging
import tempfile
from pathlib import Path

import numpy as np

from nlp_tutorials.finetuned.batching import batches
from nlp_tutorials.finetuned.folders import task_with_data
from nlp_tutorials.finetuned.inference import stacked
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.model_files import RESULTS_FILE
from nlp_tutorials.system.progress import ProgressDisplay, shown_steps
from nlp_tutorials.tasks.base import counted, reported

BATCH_SIZE = 64  # evaluate's
# The weights' range, in bits, of the ONNX int8 models the check chooses between: 7 first, kept
# on a tie, because every x86 CPU multiplies it without saturating (:func:`quantize_int8`).
WEIGHT_BITS = (7, 8)


@dataclasses.dataclass(frozen=True)
class Int8Check:
    """What the int8 model is scored on, and what it may lose: ``data_dir`` (None: the task's
    shipped copy) or ``file`` (one file in the task's format, scored in place of the dev
    split); ``max_drop`` points of the task's first metric."""
    max_drop: float
    data_dir: str | None = None
    file: str | None = None


def quantize_int8(model_bytes: bytes, weight_bits: int = 7) -> bytes:
    """The ONNX model ``model_bytes`` with each matmul by a weight quantized dynamically, int8
    weights per channel with ``weight_bits`` (7 or 8) bits of range; a matmul of two
    activations stays float32.

    7 bits (``reduce_range``) are safe on every x86 CPU: those without VNNI multiply uint8 by
    int8 in pairs summed into 16 bits, which 8-bit weights can saturate; with VNNI the sums are
    32 bits and the eighth bit is finer steps. Which scores better depends on the model (one
    MRPC fine-tune lost 0.2 points of dev accuracy with 7 bits and 1.2 with 8, another 1.7 and
    0.7: benchmarks/RESULTS.md), so the check scores both (:func:`int8_candidates`)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    proto = onnx.load_from_string(model_bytes)
    weights = {initializer.name for initializer in proto.graph.initializer}
    between_activations = [node.name for node in proto.graph.node
                           if node.op_type == "MatMul" and not weights & set(node.input)]
    with tempfile.TemporaryDirectory() as folder:
        float_path, int8_path = Path(folder) / "float32.onnx", Path(folder) / "int8.onnx"
        float_path.write_bytes(model_bytes)
        root = logging.getLogger()
        level = root.level
        # Its logged advice to pre-process (shape inference, graph optimization) changed no
        # answer on dev (benchmarks/quantized_accuracy.py): the log line would only puzzle.
        root.setLevel(logging.ERROR)
        try:
            quantize_dynamic(float_path, int8_path, per_channel=True,
                             reduce_range=weight_bits == 7, weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul"],
                             nodes_to_exclude=between_activations)
        finally:
            root.setLevel(level)
        quantized = onnx.load(int8_path)
    del quantized.metadata_props[:]  # the float model's, copied whole below
    quantized.metadata_props.extend(proto.metadata_props)
    return quantized.SerializeToString()


def recipe_name(weight_bits: int) -> str:
    """How the check names the int8 model whose weights keep ``weight_bits`` bits."""
    return f"int8, {weight_bits}-bit weights"


def int8_candidates(model_bytes: bytes) -> dict[str, bytes]:
    """{recipe name: int8 ONNX model}: the float model quantized with each of
    :data:`WEIGHT_BITS`, in that order (the first is kept on a tie)."""
    return {recipe_name(bits): quantize_int8(model_bytes, bits) for bits in WEIGHT_BITS}


def checked_task(task, model_dir, check: Int8Check):
    """The model's task reading the examples the check scores (its dev split)."""
    if check.file:
        if not Path(check.file).is_file():
            raise UserError(f"--calibration {check.file}: no such file; expected "
                            f"{task.title} examples in the task's own format")
        return task.replace(paths={"dev": check.file})
    return task_with_data(task, model_dir, check.data_dir, dev_size=None)


def answers(runners: dict, module, arrays: dict, display) -> tuple[dict, dict]:
    """({runner name: the head's logits as the task's predictions read them}, {runner name
    but the first: the largest difference between its float outputs and the first's}): every
    batch of ``arrays`` answered by each of ``runners`` (a model in its runtime: feeds ->
    {output name: array}), the padding of per-position outputs left out."""
    pad_id = module.model_pad_id
    inputs = {name: arrays[name] for name in ("input_ids", "token_type_ids")}
    rows = len(inputs["input_ids"])

    def answered(batch):  # (each runner's outputs, the batch's mask)
        mask = (batch["input_ids"] != pad_id).astype(np.int32)
        feeds = {"input_ids": batch["input_ids"].astype(np.int32),
                 "token_type_ids": batch["token_type_ids"].astype(np.int32),
                 "attention_mask": mask}
        return {name: run(feeds) for name, run in runners.items()}, mask

    parts = {name: [] for name in runners}
    first_name, *other_names = runners
    largest = dict.fromkeys(other_names, 0.0)
    done = (answered(batch) for batch in
            batches(inputs, BATCH_SIZE, pad_id=pad_id).as_numpy_iterator())
    for outputs, mask in shown_steps(done, -(-rows // BATCH_SIZE), display, unit="batch",
                                     batch_size=BATCH_SIZE, examples=rows):
        for name in other_names:
            largest[name] = max(largest[name],
                                largest_change(outputs[first_name], outputs[name], mask))
        for name, found in outputs.items():
            parts[name].append(module.logits_from_answer(found))
    max_len = arrays["input_ids"].shape[-1]
    return ({name: stacked(found, max_len, module.head.per_position)
             for name, found in parts.items()}, largest)


def largest_change(first: dict, second: dict, mask: np.ndarray) -> float:
    """The largest absolute difference between two models' float outputs on one batch;
    positions ``mask`` calls padding are left out of outputs with one value per position."""
    largest = 0.0
    for name, value in first.items():
        if not np.issubdtype(value.dtype, np.floating):
            continue  # a label or tag id: counted as a changed prediction instead
        difference = np.abs(value.astype(np.float64) - second[name])
        if difference.shape == mask.shape:
            difference = difference[mask > 0]
        largest = max(largest, float(difference.max(initial=0.0)))
    return largest


def answer_of(prediction):
    """What a prediction answers, to count the changed ones: a class, a span's text, a
    sentence's tags; None for a regression's score (its change is the outputs')."""
    if isinstance(prediction, list):
        return tuple(prediction)
    for field in ("label", "text"):
        if hasattr(prediction, field):
            return getattr(prediction, field)
    return None


def int8_report(runners: dict, module, task, tokenizer, model_dir, check: Int8Check,
                printer=print) -> dict:
    """Score ``runners["float32"]`` and each int8 model after it (each feeds -> {output
    name: array} in its runtime) on the check's examples; keep the int8 model that scores
    best (:func:`kept_recipe`) and print what it changed; refuse it (a UserError, before
    anything is written) past ``check.max_drop`` points. Returns the report
    ``quantization.json`` holds, the kept model's name under ``recipe``."""
    task = checked_task(task, model_dir, check)
    examples = task.examples("dev")
    if not examples:
        raise UserError(f"{task.title} dev: no examples to check the int8 model on; expected "
                        f"--data DIR with its dev file, or --calibration FILE")
    if seen_in_training(task, model_dir):
        printer(f"note: {model_dir} was fine-tuned on all of train (--dev-size 0), so the dev "
                f"examples held out of it here were seen in training; give --calibration FILE "
                f"with examples it has not seen")
    arrays = task.encode(tokenizer, examples, module.max_len)
    display = ProgressDisplay(printer, f"int8 check on {task.title} dev")
    logits, largest = answers(runners, module, arrays, display)
    predictions = {name: task.predictions(found, arrays, examples)
                   for name, found in logits.items()}
    scores = {name: task.score(examples, found) for name, found in predictions.items()}
    metric, printed = task.metrics[0]
    candidates = {name: candidate_report(scores, predictions, largest, name, metric)
                  for name in largest}
    kept = kept_recipe(candidates, metric)
    report = {"task": task.name, "examples": len(examples),
              "examples_from": examples_source(task), "metric": metric, "recipe": kept,
              "scores": {"float32": scores["float32"], "int8": scores[kept]},
              **{key: candidates[kept][key] for key in
                 ("drop_points", "changed_predictions", "largest_output_change")},
              "max_drop_points": check.max_drop, "candidates": candidates}
    for name in runners:
        printer(f"{task.title} dev, {name}: {task.describe(scores[name])}")
    drop = report["drop_points"]
    kept_said = "int8" if len(candidates) == 1 else f"kept {kept}, the best on dev: it"
    printer(f"{kept_said} {'loses' if drop >= 0 else 'gains'} {abs(drop):.2f} points of "
            f"{printed} on {counted(len(examples), 'example')}; "
            f"{describe_changes(report)}")
    if drop > check.max_drop:
        raise UserError(
            f"--max-drop {check.max_drop:g}: the int8 model scores {printed} "
            f"{reported(metric, scores[kept][metric])} on {task.title} dev against float32's "
            f"{reported(metric, scores['float32'][metric])}, {drop:.2f} points lower; nothing "
            f"written (export float32 without --quantize, or allow more with --max-drop)")
    return report


def candidate_report(scores: dict, predictions: dict, largest: dict, name: str,
                     metric: str) -> dict:
    """What the int8 model ``name`` scored and changed against ``"float32"``: its scores, the
    points of ``metric`` it lost, how many predictions changed (None for a regression's
    scores, whose change is the outputs') and the largest change in an output."""
    changed = sum(answer_of(a) != answer_of(b)
                  for a, b in zip(predictions["float32"], predictions[name]))
    return {"scores": scores[name],
            "drop_points": 100 * (scores["float32"][metric] - scores[name][metric]),
            "changed_predictions": changed if answer_of(predictions[name][0]) is not None
            else None,
            "largest_output_change": largest[name]}


def kept_recipe(candidates: dict, metric: str) -> str:
    """The int8 model to write, of ``candidates`` ({name: :func:`candidate_report`}): the
    highest ``metric``, then the fewest predictions changed, then the smallest change in an
    output; on a full tie, the first."""
    def rank(name):
        found = candidates[name]
        return (-found["scores"][metric], found["changed_predictions"] or 0,
                found["largest_output_change"])
    return min(candidates, key=rank)


def seen_in_training(task, model_dir) -> bool:
    """Whether the dev examples the check scores were trained on: held out of train (no dev
    file) for a model ``finetune --dev-size 0`` trained on all of train, as its results.json
    says."""
    if task.path("dev") is not None:
        return False
    try:
        config = json.loads((Path(model_dir) / RESULTS_FILE).read_text())["config"]
    except (OSError, ValueError, KeyError, TypeError):  # no record: nothing to say
        return False
    return isinstance(config, dict) and config.get("dev_size") == 0


def examples_source(task) -> str:
    """Where the check's examples come from: the dev file, or the train file they are held
    out of (MRPC's, or any task without a dev file)."""
    dev = task.path("dev")
    return str(dev) if dev is not None else f"held out of {task.path('train')}"


def describe_changes(report: dict) -> str:
    """``3 predictions changed; outputs moved by at most 0.041``."""
    moved = f"outputs moved by at most {report['largest_output_change']:.2g}"
    if report["changed_predictions"] is None:
        return moved
    return f"{counted(report['changed_predictions'], 'prediction')} changed; {moved}"
