"""MRPC test accuracy and F1 of a fine-tuned model as served: ``predict``, the ONNX export in
ONNX Runtime, that export with its matmul weights quantized to int8, and the SavedModel
exported in bfloat16.

    python benchmarks/quantized_accuracy.py --model-dir visual/models/minilm_mrpc

The ONNX model is ``export-model --format onnx``'s; the int8 one is
``onnxruntime.quantization.quantize_dynamic`` of it (weights int8 per tensor, activations
quantized on the fly); the bfloat16 one is ``export-model --precision bfloat16``'s
``predict_ids``. All read the 1,725 MRPC test pairs encoded as ``predict`` encodes them (128
tokens), in batches of 64, each cut to its longest pair. Prints accuracy, F1 and the largest
difference in P(paraphrase) from ``predict``'s.
"""
import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

BATCH = 64


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", default="visual/models/minilm_mrpc",
                        help="an MRPC model from finetune (default visual/models/minilm_mrpc)")
    return parser.parse_args(argv)


def batches(arrays, pad_id: int):
    """``predict_ids``' inputs, int32 [64, step] each, each batch cut to its longest pair."""
    for start in range(0, len(arrays["input_ids"]), BATCH):
        ids = arrays["input_ids"][start:start + BATCH]
        step = int((ids != pad_id).sum(axis=1).max())
        yield {"input_ids": ids[:, :step].astype(np.int32),
               "token_type_ids": arrays["token_type_ids"][start:start + BATCH, :step]
               .astype(np.int32),
               "attention_mask": (ids[:, :step] != pad_id).astype(np.int32)}


def onnx_probabilities(path, arrays, pad_id: int) -> np.ndarray:
    """P(paraphrase) [pairs] from the ONNX model at ``path``."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(["probability"], feeds)[0]
                           for feeds in batches(arrays, pad_id)])


def savedmodel_probabilities(version, arrays, pad_id: int) -> np.ndarray:
    """P(paraphrase) [pairs] from the SavedModel's ``predict_ids`` in ``version``."""
    import tensorflow as tf

    predict_ids = tf.saved_model.load(str(version)).signatures["predict_ids"]
    return np.concatenate([predict_ids(**{k: tf.constant(v) for k, v in feeds.items()})
                           ["probability"].numpy() for feeds in batches(arrays, pad_id)])


def scores(probabilities, labels) -> str:
    predicted = probabilities > 0.5
    true_positive = np.sum(predicted & (labels == 1))
    f1 = 2 * true_positive / (predicted.sum() + (labels == 1).sum())
    return f"accuracy {np.mean(predicted == labels):.2%}, F1 {f1:.2%}"


def main(argv=None):
    args = parse_args(argv)
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from nlp_tutorials.serving.onnx_export import export_onnx
    from nlp_tutorials.serving.savedmodel import export_model
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.inference import class_probabilities

    head, tokenizer, task = load_finetuned(args.model_dir)
    pairs = load_mrpc("test")
    arrays = task.encode(tokenizer, pairs, task.max_len)
    labels = task.label_array(pairs)
    want = class_probabilities(head, arrays)[:, 1]
    print(f"predict (TensorFlow): {scores(want, labels)}")
    with tempfile.TemporaryDirectory() as tmp:
        path = export_onnx(args.model_dir, Path(tmp) / "onnx", printer=lambda *_: None)
        quantized = Path(tmp) / "int8.onnx"
        quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8)
        for name, model in (("ONNX Runtime, float32", path), ("ONNX Runtime, int8", quantized)):
            got = onnx_probabilities(model, arrays, tokenizer.pad_id)
            print(f"{name}: {scores(got, labels)}; largest difference in P(paraphrase) "
                  f"from predict's {np.abs(got - want).max():.2g}")
        version = export_model(args.model_dir, Path(tmp) / "bfloat16", ids_only=True,
                               precision="bfloat16", printer=lambda *_: None)
        got = savedmodel_probabilities(version, arrays, tokenizer.pad_id)
        print(f"SavedModel, bfloat16: {scores(got, labels)}; largest difference in "
              f"P(paraphrase) from predict's {np.abs(got - want).max():.2g}")


if __name__ == "__main__":
    sys.exit(main())
