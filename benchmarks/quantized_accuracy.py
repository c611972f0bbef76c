"""What int8 costs a fine-tuned model, recipe by recipe: its task's scores on dev and test in
ONNX Runtime, float32 against int8 quantized several ways.

    python benchmarks/quantized_accuracy.py --model-dir DIR [--data DIR] [--test FILE] [--splits dev,test]

The float model is ``export-model --format onnx``'s; the recipes quantize it with ONNX
Runtime's ``quantize_dynamic``:

- ``int8, 7-bit weights`` and ``int8, 8-bit weights``: the two models ``export-model
  --quantize int8`` chooses between on dev
  (:func:`nlp_tutorials.serving.quantization.int8_candidates`): matmuls by a weight, per
  channel, weights of 7 bits' range (ONNX Runtime's advice for CPUs without VNNI) or 8;
- ``per-tensor, every matmul``: ``quantize_dynamic``'s defaults (one scale a weight, 8 bits,
  and the attention's products of two activations quantized too);
- ``7-bit, classifier float``: the last matmul (the task's output layer) left in float32;
- ``7-bit, pre-processed``: ``quant_pre_process`` (shape inference and ONNX Runtime's graph
  optimizer) before quantizing.

Every model answers the same encoded examples in the same batches (the int8 check's
``answers``); each line gives the task's scores and how many predictions changed from float32.
Then the line ``offered`` names the model ``export-model`` keeps, chosen on dev as its check
chooses (:func:`~nlp_tutorials.serving.quantization.kept_recipe`). Choose a recipe on dev;
test is the split to report.
"""
import argparse
import sys
import tempfile
from pathlib import Path

# Beside the two models export-model chooses between (int8_candidates, named by it):
OTHER_RECIPES = ("per-tensor, every matmul", "7-bit, classifier float", "7-bit, pre-processed")


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="a model folder from finetune")
    parser.add_argument("--data", default=None,
                        help="the task's data folder (default: MRPC's shipped copy)")
    parser.add_argument("--test", default=None, metavar="FILE",
                        help="a labelled test file, as finetune --test reads it (default: the "
                             "task's own test file, where it has one with labels)")
    parser.add_argument("--splits", default="dev,test", help="splits to score (default dev,test)")
    parser.add_argument("--results-row", default=None, metavar="FILE",
                        help="also write the offered model's figures on the last split as a "
                             "row of benchmarks/results/int8_accuracy (scripts/results_tables.py); "
                             "needs dev among --splits, where the model is chosen")
    parser.add_argument("--label", default="", help="the row's model cell, e.g. 'MRPC, seed 1'")
    return parser.parse_args(argv)


def results_row(path: Path, label: str, task, split: str, scores: dict, offered: str,
                changed: int, examples: int) -> None:
    """The int8_accuracy table's row for the offered model: the task's first metric in float32
    and int8 on ``split``, the points lost and the predictions changed, with this run's
    command, date, machine and revision."""
    import json

    from nlp_tutorials.system.provenance import run_provenance
    from nlp_tutorials.tasks.base import reported

    metric, printed = task.metrics[0]
    before, after = scores["float32"][metric], scores[offered][metric]
    provenance = run_provenance()
    row = {**provenance, "date": provenance["date"][:10],
           "source": "written by benchmarks/quantized_accuracy.py --results-row",
           "figures": {"float32": reported(metric, before), "int8": reported(metric, after),
                       "lost": f"{100 * (before - after):.2f}", "changed": str(changed)},
           "cells": {"model": label, "split, metric": f"{split} ({examples}), {printed}",
                     "float32": "{float32}", "int8": "{int8}", "points lost": "{lost}",
                     "predictions changed": "{changed}"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(row, indent=2) + "\n")


def quantized(model_bytes: bytes, recipe: str, folder: Path) -> bytes:
    """The float model quantized by ``recipe``, one of :data:`OTHER_RECIPES`."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.quantization.shape_inference import quant_pre_process

    source, target = folder / "float32.onnx", folder / "int8.onnx"
    source.write_bytes(model_bytes)
    proto = onnx.load_from_string(model_bytes)
    weights = {initializer.name for initializer in proto.graph.initializer}
    matmuls = [node for node in proto.graph.node if node.op_type == "MatMul"]
    activations = [node.name for node in matmuls if not weights & set(node.input)]
    options = {"per_channel": True, "reduce_range": True, "weight_type": QuantType.QInt8,
               "op_types_to_quantize": ["MatMul"], "nodes_to_exclude": activations}
    if recipe == "per-tensor, every matmul":
        options = {"weight_type": QuantType.QInt8}
    elif recipe == "7-bit, classifier float":
        last = [node.name for node in matmuls if weights & set(node.input)][-1]
        options["nodes_to_exclude"] = activations + [last]
    elif recipe == "7-bit, pre-processed":
        prepared = folder / "prepared.onnx"
        quant_pre_process(str(source), str(prepared), skip_symbolic_shape=True)
        source = prepared
        proto = onnx.load(prepared)  # node names may have changed
        weights = {initializer.name for initializer in proto.graph.initializer}
        options["nodes_to_exclude"] = [node.name for node in proto.graph.node
                                       if node.op_type == "MatMul"
                                       and not weights & set(node.input)]
    quantize_dynamic(source, target, **options)
    return target.read_bytes()


def main(argv=None):
    args = parse_args(argv)
    splits = args.splits.split(",")
    if args.results_row and "dev" not in splits:
        sys.exit("--results-row: the offered model is chosen on dev; add dev to --splits")
    from nlp_tutorials.finetuned.folders import task_with_data
    from nlp_tutorials.serving.onnx_export import convert, onnx_runner
    from nlp_tutorials.serving.quantization import (answers, candidate_report,
                                                    int8_candidates, kept_recipe)
    from nlp_tutorials.serving.savedmodel import serving_module
    from nlp_tutorials.system.startup import start_tensorflow

    start_tensorflow()
    module, task, tokenizer = serving_module(args.model_dir, strings=False)
    task = task_with_data(task, args.model_dir, args.data, dev_size=None)
    if args.test:
        task = task.replace(paths={**task.paths, "test": args.test})
    float_model, _ = convert(module, task, module.head.backbone.config.vocab_size)
    candidates = int8_candidates(float_model)
    models = {"float32": float_model, **candidates}
    with tempfile.TemporaryDirectory() as tmp:
        for recipe in OTHER_RECIPES:
            folder = Path(tmp) / recipe.replace(" ", "_").replace(",", "")
            folder.mkdir()
            models[recipe] = quantized(float_model, recipe, folder)
    runners = {name: onnx_runner(model) for name, model in models.items()}
    metric = task.metrics[0][0]
    offered = None
    for split in splits:
        examples = task.examples(split)
        arrays = task.encode(tokenizer, examples, module.max_len)
        logits, largest = answers(runners, module, arrays, display=None)
        predictions = {name: task.predictions(found, arrays, examples)
                       for name, found in logits.items()}
        scores = {name: task.score(examples, found) for name, found in predictions.items()}
        reports = {name: candidate_report(scores, predictions, largest, name, metric)
                   for name in models if name != "float32"}
        print(f"{task.title} {split} ({len(examples)}), float32: "
              f"{task.describe(scores['float32'])}", flush=True)
        for name, found in reports.items():
            print(f"{task.title} {split} ({len(examples)}), {name}: "
                  f"{task.describe(found['scores'])}; {found['changed_predictions']} changed",
                  flush=True)
        if split == "dev":
            offered = kept_recipe({name: reports[name] for name in candidates}, metric)
            print(f"offered: {offered}, kept on dev as export-model's check keeps it",
                  flush=True)
    if args.results_row:
        results_row(Path(args.results_row), args.label, task, split, scores, offered,
                    reports[offered]["changed_predictions"], len(examples))


if __name__ == "__main__":
    sys.exit(main())
