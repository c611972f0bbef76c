"""Train the encoder-decoder Transformer on the date task, save it, translate with it.

``python -m nlp_tutorials.transformer train`` runs :func:`train`: teacher-forced next-character
loss on the train dates, then greedy decoding (with the key/value cache) of every held-out date
and its exact match. ``model_dir`` gets ``config.json``, ``model.weights.h5`` and
``train_config.json``, each written to a temporary file and renamed, so a crash never leaves
half a file.
"""
import dataclasses
import json
import time
from pathlib import Path

import keras
import numpy as np

from nlp_tutorials.tasks import dates
from nlp_tutorials.training.config import DateTrainConfig
from nlp_tutorials.training.loop import Hook, train_steps
from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.models.decoding import decode, seq2seq_stepper
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.files import save_atomic, write_text_atomic
from nlp_tutorials.system.model_files import WEIGHTS_NAME
from nlp_tutorials.training.optimization import make_optimizer
from nlp_tutorials.models.transformer import Transformer

TRAIN_CONFIG_NAME = "train_config.json"


def train(config: DateTrainConfig, printer=print) -> dict:
    """Train, save, and score on the held-out dates; returns exact match and seconds taken."""
    started = time.perf_counter()
    train_dates, held_out = dates.split()
    sources, targets = dates.encode_sources(train_dates), dates.encode_targets(train_dates)
    keras.utils.set_random_seed(config.seed)
    model = Transformer(config.model_config())
    model.compile(optimizer=make_optimizer(config.learning_rate, config.steps))
    printer(f"transformer {config.dim}d/{config.layers} layers/{config.heads} heads: "
            f"{len(train_dates)} train dates, {len(held_out)} held out, {config.steps} steps "
            f"of {config.batch_size}")

    def report(step, batch, metrics):
        printer(f"step {step}: loss {metrics['loss']:.4f}, "
                f"character accuracy {metrics['token_accuracy']:.4f}")

    # Every log_every steps and the last; a hook due at a step makes the loop wait for its
    # metrics, so the steps between stay asynchronous.
    hooks = (Hook(config.log_every, report),)
    if config.steps % config.log_every:
        hooks += (Hook(config.steps, report),)
    if train_steps(model, random_batches(sources, targets, config.batch_size, config.seed),
                   1, config.steps, hooks=hooks):
        raise KeyboardInterrupt
    save(model, config)
    predictions = translate(model, [dates.source_text(d) for d in held_out])
    score = dates.exact_match(predictions, [dates.target_text(d) for d in held_out])
    seconds = time.perf_counter() - started
    wrong = [(dates.source_text(d), p) for d, p in zip(held_out, predictions)
             if p != dates.target_text(d)]
    printer(f"held-out exact match {100 * score:.2f}% ({len(held_out) - len(wrong)}/"
            f"{len(held_out)} dates never seen in training), {seconds:.0f} s in all")
    for source, prediction in wrong[:5]:
        printer(f"  wrong: {source} -> {prediction}")
    save_run(config, score, seconds)
    return {"exact_match": score, "seconds": seconds}


def random_batches(sources, targets, batch_size: int, seed: int):
    """Endless batches of dates drawn at random with replacement: ``src_ids`` [batch, 8] and
    ``tgt_ids`` [batch, 13] int32 (the encodings of :mod:`nlp_tutorials.tasks.dates`)."""
    rng = np.random.default_rng(seed)
    while True:
        rows = rng.integers(0, len(sources), batch_size)
        yield {"src_ids": sources[rows], "tgt_ids": targets[rows]}


def save_run(config: DateTrainConfig, score: float, seconds: float) -> Path:
    """Write ``train_config.json`` (the config, the held-out exact match, the time taken)
    atomically; return its path."""
    path = Path(config.model_dir) / TRAIN_CONFIG_NAME
    write_text_atomic(path, json.dumps(
        {**dataclasses.asdict(config), "held_out_exact_match": score, "seconds": seconds},
        indent=2) + "\n")
    return path


def save(model, config: DateTrainConfig) -> None:
    """Write config.json, then the weights (temporary file, then rename)."""
    model_dir = Path(config.model_dir)
    model.config.save(model_dir)
    save_atomic(model_dir / WEIGHTS_NAME, model.save_weights)


def load(model_dir) -> Transformer:
    """The model :func:`train` saved in ``model_dir``; a damaged weights file is a one-line
    UserError (it is the only copy: there is no older one to fall back on)."""
    model_dir = Path(model_dir)
    if not (model_dir / WEIGHTS_NAME).is_file():
        raise UserError(f"{model_dir}: no trained model; run `python -m nlp_tutorials."
                        f"transformer train --model-dir {model_dir}` first")
    model = Transformer(ModelConfig.load(model_dir))
    try:  # an HDF5 file of arrays: h5py parses it, no Python code in it runs
        model.load_weights(model_dir / WEIGHTS_NAME)
    except Exception as error:  # h5py and Keras report a damaged or foreign file in many types
        raise UserError(f"{model_dir / WEIGHTS_NAME}: cannot be read whole "
                        f"({first_line(error)}); train again with `python -m "
                        f"nlp_tutorials.transformer train --model-dir {model_dir}`") from None
    return model


def translate(model, texts) -> list:
    """Greedy, cached decoding of ``YY-MM-DD`` strings; returns their ``DD/Mon/YYYY`` texts.

    All texts go in one batch: the 2,000 held-out dates need only a few MB, and one batch
    traces the decoding step once.
    """
    sources = dates.encode_sources([dates.parse_source(t) for t in texts])  # [n, 8]
    start = np.full((len(sources), 1), dates.IDS[dates.BOS], np.int32)
    ids, _ = decode(*seq2seq_stepper(model, sources), start, dates.TARGET_LEN - 1,
                    stop_id=dates.IDS[dates.EOS])
    return [dates.decode_target(row) for row in ids]
