"""The names of what a model folder holds once a run has saved something worth keeping.

Named here, without TensorFlow, so that the command line can hold a model folder (and tell a
folder worth keeping from an empty one) before TensorFlow loads, and the code that writes and
reads each file uses the same name.
"""

CHECKPOINT_DIR = "checkpoints"  # pre-training's checkpoints
WEIGHTS_NAME = "model.weights.h5"  # the date Transformer's weights
MODEL_FILE = "model.keras"  # a fine-tuned model
SERVED_VERSION = 1  # export-model's version folder, OUTPUT/1, unless told
SERVED_PRECISIONS = ("float32", "bfloat16")  # export-model --precision; the first by default
