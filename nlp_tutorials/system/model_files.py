"""The names of what a model folder holds once a run has saved something worth keeping.

Named here, without TensorFlow, so that the command line can hold a model folder (and tell a
folder worth keeping from an empty one) before TensorFlow loads, and the code that writes and
reads each file uses the same name.
"""

CHECKPOINT_DIR = "checkpoints"  # pre-training's checkpoints
WEIGHTS_NAME = "model.weights.h5"  # the date Transformer's weights
MODEL_FILE = "model.keras"  # a fine-tuned model
RESULTS_FILE = "results.json"  # beside it: the fine-tuning run's settings, scores and provenance
SERVED_VERSION = 1  # export-model's version folder, OUTPUT/1, unless told
SERVED_PRECISIONS = ("float32", "bfloat16")  # export-model --precision; the first by default
SERVED_QUANTIZATIONS = ("none", "int8")  # export-model --quantize; the first by default
# export-model --max-drop: the points of the task's first metric an int8 model may lose
INT8_MAX_DROP = 1.0
QUANTIZATION_FILE = "quantization.json"  # beside an int8 model: how it scored against float32
