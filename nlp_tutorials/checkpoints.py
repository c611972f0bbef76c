"""Building a GPT or BERT from its config, and its checkpoints: what they hold, where, how to
read one back.

``train`` writes checkpoints under ``<model_dir>/checkpoints/`` (:data:`CHECKPOINT_DIR`) with a
``tf.train.CheckpointManager``; :func:`restore_model` is how ``export``, ``generate`` and
``finetune`` read the newest one back.
"""
from pathlib import Path

import keras
import tensorflow as tf

from nlp_tutorials.config import ModelConfig
from nlp_tutorials.errors import UserError
from nlp_tutorials.tokenization import load_tokenizer

CHECKPOINT_DIR = "checkpoints"


def model_class(model_type: str):
    """The class behind a model type name (imported here so the CLI stays light)."""
    if model_type == "bert":
        from nlp_tutorials.bert import BERT
        return BERT
    if model_type == "gpt":
        from nlp_tutorials.gpt import GPT
        return GPT
    raise UserError(f"model type {model_type!r}: expected 'bert' or 'gpt'")


def build_model(model_config: ModelConfig, seed: int):
    """A freshly initialised model of ``model_config``, its weights drawn from ``seed``."""
    keras.utils.set_random_seed(seed)
    return model_class(model_config.model_type)(model_config)


def latest_checkpoint(model_dir) -> str | None:
    """The newest checkpoint's path prefix in ``model_dir``, or None when there is none."""
    return tf.train.latest_checkpoint(str(Path(model_dir) / CHECKPOINT_DIR))


def training_checkpoint(model, optimizer=None) -> tf.train.Checkpoint:
    """What a checkpoint holds: the model's weights by name, and the optimizer's state.

    Weights are keyed by their Keras path without the model's own name (Keras numbers a second
    model in one process "bert_1"; layers first called outside the model have no prefix), so
    any model of the same config restores them. The
    optimizer's slots follow the order of ``model.trainable_variables``, which is fixed by the
    config; ``iterations`` is the step count a resumed run continues from.
    """
    weights = {variable.path.removeprefix(f"{model.name}/"): variable
               for variable in model.weights}
    if len(weights) != len(model.weights):
        raise ValueError("two of the model's weights share a path")
    if optimizer is None:
        return tf.train.Checkpoint(model=weights)
    return tf.train.Checkpoint(model=weights, optimizer=list(optimizer.variables),
                               iterations=optimizer.iterations)


def restore_model(model_dir, model_name: str = "bert"):
    """Load the model saved by ``train`` in ``model_dir`` (newest checkpoint), for inference.

    Returns (model, tokenizer). ``model_name`` only words the error when nothing is there.
    """
    model_dir = Path(model_dir)
    if not latest_checkpoint(model_dir):
        raise UserError(f"{model_dir}: no trained model; run `python -m nlp_tutorials."
                        f"{model_name} train --model-dir {model_dir}` first")
    model_config = ModelConfig.load(model_dir)
    model = model_class(model_config.model_type)(model_config)
    status = training_checkpoint(model).restore(latest_checkpoint(model_dir))
    status.expect_partial().assert_existing_objects_matched()
    return model, load_tokenizer(model_dir)
