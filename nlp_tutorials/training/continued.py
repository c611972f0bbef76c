"""Continued pre-training (Gururangan et al., 2020, "Don't Stop Pretraining"): ``bert train
--init-from DIR`` goes on with BERT's masked-LM + next-sentence pre-training from a real
checkpoint, on this project's text, before fine-tuning.

What changes against a run from scratch, at its start and at its end:

- the model's config (sizes, activation, vocabulary, positions, dropout) and the WordPiece
  vocabulary are the checkpoint's (:func:`checkpoint_run`); a flag that says otherwise is
  refused, since weights of one shape cannot fill a model of another;
- the weights are the checkpoint's (:func:`initial_model`). A checkpoint that ships the
  pre-training heads (HuggingFace's ``BertForPreTraining``, Google's ``cls/...``) brings them
  too. One that does not (sentence encoders such as all-MiniLM-L6-v2) leaves them freshly
  drawn: the masked-LM head's transform (dense + LayerNorm) and output bias, and the
  next-sentence classifier. Its output matrix is tied to the word embeddings, so it is real.
  Random heads send large, meaningless gradients into the encoder, so the run first trains the
  heads alone for ``head_warmup_steps`` (:func:`heads_only`, :func:`training_phases`) and only
  then everything;
- at the end the model is written in HuggingFace's format with its vocabulary
  (:func:`save_for_finetuning`, into ``<model_dir>/pretrained/``), which ``bert finetune
  --init-from`` reads like any downloaded checkpoint.
"""
import contextlib
import dataclasses
from pathlib import Path

import keras

from nlp_tutorials.models import pretrained
from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.settings import flag_of
from nlp_tutorials.text.tokenization import load_tokenizer

PRETRAINED_DIR = "pretrained"  # inside model_dir: the result, as finetune --init-from reads it
HEAD_LAYERS = ("lm_head", "nsp_head")  # the pre-training heads, by their layer names


def checkpoint_run(config: TrainConfig, given: set, default_max_len):
    """(config, tokenizer, model config) of a run starting from ``config.init_from``.

    The model flags (``--dim``, ``--layers``, ``--heads``, ``--dropout``, ``--tokenizer``,
    ``--vocab-size``) must agree with the checkpoint when given; the config records the
    checkpoint's values either way. ``max_len`` defaults to ``default_max_len(tokenizer)`` (the
    text's choice), at most the checkpoint's positions. ``head_warmup_steps`` defaults to ``warmup_fraction`` of the
    steps when the checkpoint has no pre-training heads, else 0. A folder without weights is
    refused here, before the run writes anything. (Only a BERT starts from a checkpoint:
    :meth:`~nlp_tutorials.training.config.TrainConfig.check` refuses another model type.)
    """
    model_config = pretrained.read_config(config.init_from)
    tokenizer = load_tokenizer(config.init_from)
    settled = {"dim": model_config.hidden_size, "layers": model_config.num_hidden_layers,
               "heads": model_config.num_attention_heads,
               "dropout": model_config.hidden_dropout_prob, "tokenizer": "wordpiece",
               "vocab_size": model_config.vocab_size}
    refuse_contradicting_flags(config, given, settled)
    positions = model_config.max_position_embeddings
    if config.max_len > positions:
        raise UserError(f"--max-len {config.max_len}: {config.init_from} has "
                        f"{positions} positions; expected at most {positions}")
    max_len = config.max_len or min(default_max_len(tokenizer), positions)
    warmup = config.head_warmup_steps
    fresh_heads = not has_pretraining_heads(config.init_from)  # reads the weights' names
    if "head_warmup_steps" not in given and fresh_heads:
        warmup = int(config.warmup_fraction * config.steps)
    if warmup >= config.steps:
        raise UserError(f"--head-warmup-steps {warmup}: expected fewer than --steps "
                        f"{config.steps} (the encoder trains after the warm-up)")
    config = dataclasses.replace(config, **settled, max_len=max_len, head_warmup_steps=warmup)
    return config, tokenizer, model_config


def refuse_contradicting_flags(config: TrainConfig, given: set, settled: dict) -> None:
    """UserError naming every given model flag whose value differs from the checkpoint's."""
    wrong = [f"{flag_of(config, name)} {getattr(config, name)} (checkpoint: {value})"
             for name, value in settled.items()
             if name in given and getattr(config, name) != value]
    if wrong:
        raise UserError(f"--init-from {config.init_from}: the model's settings come from the "
                        f"checkpoint; drop {'; '.join(wrong)}")


def has_pretraining_heads(path) -> bool:
    """Whether the checkpoint in folder ``path`` stores the masked-LM and next-sentence heads."""
    fmt, names = pretrained.stored_names(Path(path))
    column = 1 if fmt == pretrained.HF else 2
    return any(row[column] in names for row in pretrained.HEADS)


def initial_model(path, seed: int, printer=print):
    """The BERT of the checkpoint in ``path``; heads it lacks are drawn from ``seed``."""
    from nlp_tutorials.models.bert import BERT

    keras.utils.set_random_seed(seed)
    return BERT.from_pretrained(path, printer)


@contextlib.contextmanager
def heads_only(model, active: bool = True):
    """Within it (when ``active``), only the pre-training heads are trainable.

    Embeddings, encoder and pooler are frozen: they leave ``model.trainable_variables``, so
    ``apply_gradients`` neither computes their gradients nor lets AdamW update or decay them.
    The word embeddings stay frozen although the masked-LM head reads them (tied). Trainability
    is restored on leaving; a step traced inside keeps the variable list it was traced with.
    """
    frozen = [layer for layer in model.layers if layer.name not in HEAD_LAYERS] if active else []
    for layer in frozen:
        layer.trainable = False
    try:
        yield
    finally:
        for layer in frozen:
            layer.trainable = True


def training_phases(start: int, head_warmup_steps: int, steps: int) -> list:
    """The run's remaining steps as (first, last, heads only) phases, after step ``start``.

    Steps 1..head_warmup_steps train the heads alone, the rest everything (the learning rate
    of each: :class:`~nlp_tutorials.training.optimization.HeadsFirst`). A run resumed past the warm-up
    has one phase left.
    """
    phases = []
    if start < head_warmup_steps:
        phases.append((start + 1, head_warmup_steps, True))
    first = max(start, head_warmup_steps) + 1
    if first <= steps:
        phases.append((first, steps, False))
    return phases


def save_for_finetuning(model, tokenizer, model_dir) -> Path:
    """Write ``model`` and ``tokenizer`` into ``<model_dir>/pretrained/`` in HuggingFace's
    format (``config.json``, ``model.safetensors``, ``vocab.txt``, ``tokenizer_config.json``),
    each file atomically; ``finetune --init-from`` reads the folder. Returns it."""
    directory = model.save_pretrained(Path(model_dir) / PRETRAINED_DIR)
    tokenizer.save(directory)
    return directory

