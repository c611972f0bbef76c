"""Pre-training a GPT or BERT: settling the run, its text, its model, and the test score.

One tensor's way: :func:`pretrain` settles the run (:func:`settle_run`; :func:`run_text` says
what it learns from: MRPC's pairs, a corpus or shards), builds the model and its optimizer
(:func:`build_training_state`), writes the run's settings once all of that has passed
(:func:`save_run`), and feeds the text's batches
(:class:`~nlp_tutorials.sources.source.PretrainingSource`) to the training loop
(:func:`~nlp_tutorials.training.loop.train_steps`, once per phase: :func:`train_in_phases`),
which runs the model's compiled ``step()``, reports to
:class:`~nlp_tutorials.training.loop.Progress` and saves checkpoints. It hands back the trained
model, which :func:`evaluate` has scored on the MRPC test split. The optimizer and schedule
are in :mod:`nlp_tutorials.training.optimization`, checkpoints in :mod:`nlp_tutorials.training.checkpoints`.

Files in ``model_dir`` (so ``export``, ``finetune`` and ``--resume`` need no flags repeated):
``config.json`` (model), ``train_config.json`` (run), ``vocab.txt`` + ``tokenizer_config.json``,
``checkpoints/`` (``tf.train.CheckpointManager``: the newest few, each written before the
``checkpoint`` index file is atomically switched to it), ``logs/`` (TensorBoard), and after a
run from a real checkpoint (``--init-from``) ``pretrained/``, which ``finetune --init-from``
reads (:mod:`nlp_tutorials.training.continued`). ``--resume``
continues from the newest intact checkpoint
(:func:`~nlp_tutorials.training.checkpoints.newest_intact_checkpoint`: a damaged newer one is reported
in one line and passed over).
"""
import contextlib
import dataclasses
import functools
import json
import math
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from nlp_tutorials.training import continued
from nlp_tutorials.training import distribute
from nlp_tutorials.training.checkpoints import (
    CHECKPOINT_DIR,
    build_model,
    holds_checkpoint,
    newest_intact_checkpoint,
    rewrite_index,
    restore_checkpoint,
    training_checkpoint,
)
from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.system.settings import read_saved_settings
from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.training.loop import Hook, Logs, Progress, train_steps
from nlp_tutorials.sources.corpus import DEFAULT_MAX_LEN as DEFAULT_CORPUS_MAX_LEN
from nlp_tutorials.sources.corpus import CorpusData, check_max_len as check_corpus_max_len
from nlp_tutorials.sources.corpus import corpus_files, learn_tokenizer
from nlp_tutorials.sources.mrpc import PretrainingData
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.text.packing import longest_pair_length, trim_padding
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.files import read_json_object, write_text_atomic
from nlp_tutorials.system.outputs import Interrupted
from nlp_tutorials.training.optimization import HeadsFirst, WarmupLinearDecay, bert_adamw
from nlp_tutorials.sources.shards import ShardData, check_same_tokenizer, read_description
from nlp_tutorials.text.tokenization import WordPieceTokenizer, WordTokenizer, load_tokenizer

TRAIN_CONFIG_NAME = "train_config.json"
# Under --jit, batch lengths are rounded up to a multiple of this: XLA compiles each distinct
# shape once (several seconds each), and MRPC batches would otherwise bring dozens of lengths.
JIT_LENGTH_MULTIPLE = 16


def prepare_run(config: TrainConfig, given: set, resume: bool):
    """Settle the run's config, tokenizer and model config (:func:`settle_run`), saving them
    into ``model_dir`` (:func:`save_run`) unless it resumes one saved there.

    Returns (config, tokenizer, model_config, the run's text: :func:`run_text`).
    """
    settled = settle_run(config, given, resume)
    if not resume:
        save_run(*settled[:3])
    return settled


def settle_run(config: TrainConfig, given: set, resume: bool):
    """The run's config, tokenizer and model config, and its text; nothing is written.

    ``given`` names the TrainConfig fields the user set explicitly; on ``--resume`` those must
    agree with the saved run (the rest are taken from it).
    Returns (config, tokenizer, model_config, the run's text: :func:`run_text`).
    """
    model_dir = Path(config.model_dir)
    if resume:
        config = resumed_config(config, given, model_dir)
        text = run_text(config)
        tokenizer = load_tokenizer(model_dir)
        model_config = ModelConfig.load(model_dir)
        text.check_tokenizer(tokenizer, model_dir)
        return config, tokenizer, model_config, text
    if holds_checkpoint(model_dir):
        raise UserError(f"{model_dir} already holds a checkpoint: pass --resume to continue "
                        f"it, or choose another --model-dir")
    text = run_text(config)
    if config.init_from:
        config, tokenizer, model_config = checkpoint_text_run(config, given, text)
    else:
        tokenizer, config = text.new_tokenizer(config, given)
        model_config = config.model_config(tokenizer.vocab_size, config.max_len)
    return config, tokenizer, model_config, text


def save_run(config: TrainConfig, tokenizer, model_config: ModelConfig) -> None:
    """Write a new run's tokenizer, ``config.json`` and ``train_config.json`` into
    ``model_dir``, each atomically; ``export``, ``finetune`` and ``--resume`` read them."""
    model_dir = Path(config.model_dir)
    tokenizer.save(model_dir)
    model_config.save(model_dir)
    write_text_atomic(model_dir / TRAIN_CONFIG_NAME,
                      json.dumps(dataclasses.asdict(config), indent=2) + "\n")


def run_text(config: TrainConfig):
    """What the run learns from: :class:`CorpusText` (--corpus), :class:`ShardText` (--data)
    or :class:`MrpcText`. The one place that asks; the rest of the run asks the answer."""
    if config.corpus:
        return CorpusText(config.corpus)
    if config.data:
        return ShardText(config.data)
    return MrpcText()


class MrpcText:
    """MRPC's train pairs, read from disk once here (``train_pairs``): the tokenizer's text,
    the default max_len (the longest pair), and the pre-training pairs."""

    def __init__(self):
        self.train_pairs = load_mrpc("train")

    def new_tokenizer(self, config: TrainConfig, given: set):
        """(tokenizer, config with max_len settled) of a new run; the vocabulary comes from the
        TRAIN split only, so test words stay unknown."""
        refuse_vocab_size_without_wordpiece(config, given)
        tokenizer = build_tokenizer(config, [s for p in self.train_pairs for s in (p.s1, p.s2)])
        if not config.max_len:
            config = dataclasses.replace(config, max_len=self.default_max_len(tokenizer))
        return tokenizer, config

    def default_max_len(self, tokenizer) -> int:
        return longest_pair_length(tokenizer, self.train_pairs)

    def settle(self, config: TrainConfig, given: set) -> TrainConfig:
        return config

    def check_tokenizer(self, tokenizer, model_dir) -> None:
        """Any tokenizer reads MRPC's text."""

    def source(self, config: TrainConfig, tokenizer, printer=print) -> PretrainingData:
        return PretrainingData(tokenizer, self.train_pairs, max_len=config.max_len,
                               nsp_mode=config.nsp_mode, seed=config.seed,
                               whole_word_mask=config.whole_word_mask)


class CorpusText:
    """A text corpus (--corpus), streamed: a tokenizer learned from its start, max_len 128."""

    train_pairs = None

    def __init__(self, pattern: str):
        self.pattern = pattern

    def new_tokenizer(self, config: TrainConfig, given: set):
        """One learned from the corpus' first ``tokenizer_sample_mb`` MB (bounded work and
        memory), and max_len 128 unless given."""
        max_len = config.max_len or DEFAULT_CORPUS_MAX_LEN
        check_corpus_max_len(max_len)
        tokenizer = learn_tokenizer(config.tokenizer, config.vocab_size,
                                    corpus_files(self.pattern), config.tokenizer_sample_mb)
        return tokenizer, dataclasses.replace(config, max_len=max_len)

    def default_max_len(self, tokenizer) -> int:
        return DEFAULT_CORPUS_MAX_LEN

    def settle(self, config: TrainConfig, given: set) -> TrainConfig:
        return config

    def check_tokenizer(self, tokenizer, model_dir) -> None:
        """The corpus is tokenized as it is read, by whichever tokenizer the run has."""

    def source(self, config: TrainConfig, tokenizer, printer=print) -> CorpusData:
        return CorpusData(self.pattern, tokenizer, max_len=config.max_len, seed=config.seed,
                          whole_word_mask=config.whole_word_mask, printer=printer)


class ShardText:
    """Shards ``prepare`` wrote (--data): their tokenizer and max_len are fixed, and under
    --strategy multiworker each worker reads its own shards."""

    train_pairs = None

    def __init__(self, directory: str):
        self.directory = directory

    def new_tokenizer(self, config: TrainConfig, given: set):
        """The tokenizer the shards were written with, and their max_len."""
        refuse_vocab_size_without_wordpiece(config, given)
        fixed = sorted({"tokenizer", "vocab_size", "tokenizer_sample_mb"} & given)
        if fixed:
            raise UserError(f"--{fixed[0].replace('_', '-')}: with --data the tokenizer is the "
                            f"one the shards were written with (set it at `prepare`)")
        max_len = self.max_len(config, given)
        tokenizer = load_tokenizer(self.directory)
        kind = "word" if isinstance(tokenizer, WordTokenizer) else "wordpiece"
        return tokenizer, dataclasses.replace(config, max_len=max_len, tokenizer=kind,
                                              vocab_size=tokenizer.vocab_size)

    def max_len(self, config: TrainConfig, given: set) -> int:
        """The max_len the shards were written for; a different --max-len is refused."""
        max_len = read_description(self.directory)["max_len"]
        if "max_len" in given and config.max_len != max_len:
            raise UserError(f"--max-len {config.max_len}: the shards in {self.directory} were "
                            f"written for --max-len {max_len}; drop the flag or prepare again")
        return max_len

    def default_max_len(self, tokenizer) -> int:
        return read_description(self.directory)["max_len"]

    def settle(self, config: TrainConfig, given: set) -> TrainConfig:
        """The config with the shards' max_len: their sequences have their length already."""
        return dataclasses.replace(config, max_len=self.max_len(config, given))

    def check_tokenizer(self, tokenizer, model_dir) -> None:
        """The shards' ids must mean the model's tokens."""
        check_same_tokenizer(self.directory, tokenizer, model_dir)

    def source(self, config: TrainConfig, tokenizer, printer=print) -> ShardData:
        return ShardData(self.directory, tokenizer, seed=config.seed,
                         whole_word_mask=config.whole_word_mask,
                         worker=distribute.input_pipeline(config.strategy))


def refuse_vocab_size_without_wordpiece(config: TrainConfig, given: set) -> None:
    if "vocab_size" in given and config.tokenizer != "wordpiece":
        raise UserError(f"--vocab-size {config.vocab_size}: only --tokenizer wordpiece "
                        f"has a vocabulary size to choose")


def checkpoint_text_run(config: TrainConfig, given: set, text):
    """(config, tokenizer, model config) of continued pre-training (``--init-from``) on
    MRPC, a corpus or shards: the checkpoint settles the model and tokenizer
    (:func:`~nlp_tutorials.training.continued.checkpoint_run`), the text the default max_len."""
    config, tokenizer, model_config = continued.checkpoint_run(
        text.settle(config, given), given, text.default_max_len)
    text.check_tokenizer(tokenizer, config.init_from)
    return config, tokenizer, model_config


def build_tokenizer(config: TrainConfig, texts):
    """The run's tokenizer, its vocabulary learned from ``texts``."""
    if config.tokenizer == "word":
        return WordTokenizer.build(texts)
    if config.tokenizer == "wordpiece":
        return WordPieceTokenizer.train(texts, config.vocab_size)
    raise UserError(f"tokenizer {config.tokenizer!r}: expected 'word' or 'wordpiece'")


def resumed_config(config: TrainConfig, given: set, model_dir: Path) -> TrainConfig:
    """The saved run's config, with flags the user gave checked against it.

    ``--steps`` may be larger than the saved run's: :func:`extend_run` then lengthens the run
    once the step to continue from is known; here the saved steps stay.
    """
    path = model_dir / TRAIN_CONFIG_NAME
    if not holds_checkpoint(model_dir) or not path.is_file():
        raise UserError(f"--resume: no checkpoint in {model_dir}; run train without --resume "
                        f"first")
    saved = read_saved_settings(TrainConfig, path)
    mismatched = [f"--{name.replace('_', '-')} {getattr(config, name)} (saved: {saved[name]}"
                  + ("; a resumed run may grow longer, not shorter)" if name == "steps" else ")")
                  for name in TrainConfig.FROZEN
                  if name in given and name in saved and getattr(config, name) != saved[name]
                  and not (name == "steps" and config.steps > saved[name])]
    if mismatched:
        raise UserError(f"--resume: {model_dir} was trained with other settings: "
                        + "; ".join(mismatched))
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    values = {k: v for k, v in saved.items() if k in known and k in TrainConfig.FROZEN}
    resumed = dataclasses.replace(config, **values, schedule_extensions=tuple(
        saved.get("schedule_extensions", ())))
    try:
        run_schedule(resumed)
    except (TypeError, KeyError, ValueError) as error:
        raise UserError(f"{path}: schedule_extensions: expected the records --resume --steps "
                        f"wrote ({error})") from None
    return resumed


def run_schedule(config: TrainConfig) -> WarmupLinearDecay:
    """The run's learning-rate schedule: planned for its first ``steps``, then each extension.

    Raises ValueError (or KeyError, TypeError) when ``schedule_extensions`` is malformed or
    does not end at ``steps``.
    """
    records = config.schedule_extensions
    planned = records[0]["from_steps"] if records else config.steps
    schedule = WarmupLinearDecay(config.learning_rate, int(config.warmup_fraction * planned),
                                 planned, [(r["at_step"], r["to_steps"]) for r in records])
    if schedule.planned_steps != config.steps:
        raise ValueError(f"they end at {schedule.planned_steps} steps, steps is {config.steps}")
    return schedule


def optimizer_schedule(config: TrainConfig):
    """The optimizer's schedule: :func:`run_schedule`, after a heads-only warm-up
    (``--head-warmup-steps``, at ``--head-learning-rate``) planned over the steps left."""
    if not config.head_warmup_steps:
        return run_schedule(config)
    rest = dataclasses.replace(config, steps=config.steps - config.head_warmup_steps)
    return HeadsFirst(config.head_learning_rate, config.head_warmup_steps, run_schedule(rest))


def extend_run(config: TrainConfig, steps: int, at: int, printer=print) -> TrainConfig:
    """``config``'s run lengthened to ``steps``, continuing from step ``at``.

    The learning rate follows :class:`~nlp_tutorials.training.optimization.WarmupLinearDecay`'s rule
    for extensions; the returned config records the new total and the extension, which
    :func:`save_extension` writes into ``train_config.json`` once the run is known to start,
    so a later ``--resume`` rebuilds the same schedule.
    """
    if config.head_warmup_steps:
        raise UserError(f"--steps {steps}: a run with --head-warmup-steps cannot be extended on "
                        f"resume (its schedule restarts after the warm-up); start a new run")
    schedule = run_schedule(config).extended(at, steps)
    piece = schedule.pieces[-1]
    record = {"at_step": at, "from_steps": config.steps, "to_steps": steps,
              "rate_at_step": piece.start_rate}
    printer(f"--steps {steps}: the {config.steps}-step run goes on from step {at}; learning "
            f"rate {piece.start_rate:.3g} -> {piece.rejoin_rate:.3g} at step "
            f"{piece.rejoin_step}, then down to 0 at step {steps}")
    return dataclasses.replace(config, steps=steps, schedule_extensions=(
        *config.schedule_extensions, record))


def save_extension(config: TrainConfig) -> None:
    """Record an extended run's steps and schedule in its ``train_config.json`` (atomically)."""
    path = Path(config.model_dir) / TRAIN_CONFIG_NAME
    saved = read_json_object(path)
    saved.update(steps=config.steps, schedule_extensions=list(config.schedule_extensions))
    write_text_atomic(path, json.dumps(saved, indent=2) + "\n")


@dataclasses.dataclass
class PretrainedRun:
    """What :func:`pretrain` hands back: the trained model and what it needs besides.

    ``config`` is the run's settled config (``max_len`` filled in, the saved run's settings on
    ``--resume``, ``model_dir`` this worker's); ``evaluation`` the test-split scores of
    :func:`evaluate`, and ``test_pairs`` the MRPC test pairs it read (for the attention export).
    """

    model: keras.Model
    tokenizer: object
    config: TrainConfig
    evaluation: dict
    test_pairs: list


def pretrain(config: TrainConfig, given: set = frozenset(), resume: bool = False,
             printer=print) -> PretrainedRun:
    """Pre-train a GPT or BERT on MRPC train; return it with its test-split evaluation.

    Everything is checked before anything is written into ``model_dir`` (a refused run leaves
    no file of its own). Saves a checkpoint every ``checkpoint_every`` steps, at the end, and on
    Ctrl-C (then raises :class:`~nlp_tutorials.system.outputs.Interrupted`, saying where it
    stopped). Under ``config.strategy`` the model and optimizer live on every replica; a
    checkpoint holds one copy of each variable, so it resumes under any strategy.
    """
    # First: logical CPU devices and the multi-worker runtime need a TensorFlow not yet started.
    strategy = distribute.make_strategy(config.strategy, config.cpu_replicas)
    config = dataclasses.replace(
        config, model_dir=str(distribute.worker_dir(config.model_dir, config.strategy)))
    steps_asked = config.steps
    config, tokenizer, model_config, text = settle_run(config, given, resume)
    distribute.check_batch_size(config.batch_size, strategy)
    distribute.set_precision(config.precision)
    if config.jit:
        check_xla_available()  # before the model is built: a missing XLA fails at once
    restored = newest_intact_checkpoint(config.model_dir) if resume else None
    extended = restored and "steps" in given and steps_asked > config.steps
    if extended:
        config = extend_run(config, steps_asked, restored[1], printer)
    model, manager = build_training_state(config, model_config, strategy,
                                          restored and restored[0])
    data = pretraining_data(config, tokenizer, text, printer)
    epoch = data.describe_epoch(config.batch_size)
    # Every check has passed: only now does the run write its settings.
    if extended:
        save_extension(config)
    elif not resume:
        save_run(config, tokenizer, model_config)
    start = int(model.optimizer.iterations.numpy())
    if restored:
        printer(f"resuming from checkpoint {Path(restored[0]).name} at step {start}")
    printer(f"{config.model_type} {config.dim}d/{config.layers} layers/{config.heads} heads, "
            f"vocab {tokenizer.vocab_size}, max_len {config.max_len}, {epoch}; "
            f"steps {start} -> {config.steps}; {strategy.num_replicas_in_sync} replica(s), "
            f"{config.precision}")
    progress = Progress(config.steps, config.log_every, printer, start=start)
    interrupted = train_in_phases(model, manager, data, strategy, config, tokenizer, progress)
    step = int(model.optimizer.iterations.numpy())
    path = save_last_checkpoint(manager, step)
    progress.note(f"saved checkpoint {path}")
    if interrupted:
        raise Interrupted(f"interrupted at step {step} of {config.steps}: checkpoint saved; "
                          f"continue with --resume ({path} is intact)")
    with interrupted_after_training(path):
        if config.init_from:
            folder = continued.save_for_finetuning(model, tokenizer, config.model_dir)
            progress.note(f"wrote {folder} (finetune --init-from reads it)")
        test_pairs = load_mrpc("test")
        evaluation = evaluate(model, tokenizer, config, printer, text.train_pairs, test_pairs)
    return PretrainedRun(model, tokenizer, config, evaluation, test_pairs)


def save_last_checkpoint(manager, step: int) -> str:
    """Save the checkpoint of ``step``, the run's last; returns its path prefix. A Ctrl-C while
    it is written may leave it incomplete, which ``--resume`` passes over."""
    try:
        return manager.save(checkpoint_number=step)
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted while saving the step-{step} checkpoint, which may be "
                          f"incomplete; --resume continues from the newest intact one") from None


@contextlib.contextmanager
def interrupted_after_training(checkpoint: str):
    """Ctrl-C after the last step: the run is over and its checkpoint saved."""
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted after the last step: checkpoint saved ({checkpoint} is "
                          f"intact); --resume finishes the run") from None


def build_training_state(config: TrainConfig, model_config: ModelConfig, strategy,
                         restore_from: str | None = None):
    """(model with its optimizer, checkpoint manager), built under ``strategy``.

    Given ``restore_from`` (a checkpoint's path prefix, on ``--resume``), that checkpoint is
    restored into both, every variable accounted for.
    """
    with strategy.scope():
        if config.init_from and not restore_from:
            model = continued.initial_model(config.init_from, config.seed)
        else:
            model = build_model(model_config, config.seed)
        model.compile(optimizer=bert_adamw(optimizer_schedule(config), config.weight_decay))
        model.optimizer.build(model.trainable_variables)
        checkpoint = training_checkpoint(model, model.optimizer)
        if restore_from:
            rewrite_index(config.model_dir, restore_from)  # only if missing or garbled
        manager = tf.train.CheckpointManager(
            checkpoint, str(Path(config.model_dir) / CHECKPOINT_DIR),
            max_to_keep=config.keep_checkpoints)
        if restore_from:
            restore_checkpoint(checkpoint, restore_from)
    return model, manager


def pretraining_data(config: TrainConfig, tokenizer, text=None, printer=print):
    """Where the run's batches come from (:class:`~nlp_tutorials.sources.source.
    PretrainingSource`): MRPC pairs, a streamed corpus, or prepared shards (this worker's share
    of them under --strategy multiworker). ``text``: the run's, default :func:`run_text`."""
    return (text or run_text(config)).source(config, tokenizer, printer)


def training_batches(data, config: TrainConfig, start: int):
    """An iterator over the run's batches from step ``start + 1`` on, trimmed of padding."""
    # XLA compiles once per distinct shape: rounding lengths up bounds the compilations.
    return data.batches(config.batch_size, masked=config.model_type == "bert", start=start,
                        length_multiple=JIT_LENGTH_MULTIPLE if config.jit else 1)


def train_in_phases(model, manager, data, strategy, config: TrainConfig, tokenizer,
                    progress: Progress) -> bool:
    """The run's steps after ``progress.start``, on ``data``'s batches, phase by phase: the
    heads alone during ``head_warmup_steps`` (see :mod:`nlp_tutorials.training.continued`), then the
    whole model. Returns True when Ctrl-C stopped the run early.

    Each phase is one :func:`~nlp_tutorials.training.loop.train_steps`, which compiles its own
    step: a traced step keeps the variables it was traced with.
    """
    batches = training_batches(data, config, progress.start)
    hooks = ()
    if config.model_type == "bert":  # only BERT's batches hold masked tokens to show
        hooks = (Hook(config.sample_every,
                      lambda step, batch, metrics: progress.note(
                          describe_predictions(model, tokenizer, batch))),)
    settings = dict(
        strategy=strategy, total=config.steps, progress=progress, hooks=hooks,
        logs=Logs(str(Path(config.model_dir) / "logs"), config.log_every),
        checkpoint=Hook(config.checkpoint_every,
                        lambda step, batch, metrics: manager.save(checkpoint_number=step)),
        jit=config.jit, input_pipelines=data.input_pipelines)
    for first, last, heads_only in continued.training_phases(
            progress.start, config.head_warmup_steps, config.steps):
        if heads_only:
            progress.note(f"steps {first}-{last}: the pre-training heads alone (encoder frozen)")
        with continued.heads_only(model, heads_only):
            if train_steps(model, batches, first, last, **settings):
                return True
    return False


def check_xla_available():
    """Raise UserError in one line when this TensorFlow cannot XLA-compile (for ``--jit``)."""
    try:
        tf.function(lambda x: x * 2.0, jit_compile=True)(tf.ones([2])).numpy()
    except (tf.errors.OpError, NotImplementedError, ValueError) as error:
        raise UserError(f"--jit: this TensorFlow build cannot XLA-compile ({first_line(error)}); "
                        f"run without --jit") from None


def describe_predictions(model, tokenizer, batch, row: int = 0) -> str:
    """One example: the masked words and what the model predicts there, as two lines."""
    single = {k: v[row:row + 1] for k, v in batch.items()}
    outputs = model(single, training=False)
    chosen = tf.gather(outputs["sequence_output"], single["mlm_positions"], batch_dims=1)
    logits, _ = model.pretraining_heads(chosen, outputs["pooled_output"])
    real = single["mlm_weights"].numpy()[0] > 0
    targets = tokenizer.convert_ids_to_tokens(single["mlm_ids"].numpy()[0][real])
    predicted = tokenizer.convert_ids_to_tokens(np.argmax(logits.numpy()[0], -1)[real])
    return f"  target:    {' '.join(targets)}\n  predicted: {' '.join(predicted)}"


def evaluate(model, tokenizer, config: TrainConfig, printer=print, train_pairs=None,
             test_pairs=None) -> dict:
    """Masked-token (or next-token) and NSP accuracy on the MRPC test split.

    Test pairs get the same vocabulary (test-only words become [UNK]), the same max_len
    (longer pairs are truncated longest-first) and one fixed masking (seed + 1000). Metrics
    are means over full batches of ``batch_size`` pairs (the last partial batch, under
    ``batch_size`` of the 1,725 pairs, is left out). For BERT it also reports the
    most-frequent-token baseline: the accuracy of always guessing the token most often masked
    in train (``train_pairs``, ``test_pairs``: MRPC's pairs when the run has read them already).
    """
    masked = config.model_type == "bert"
    test = PretrainingData(tokenizer, test_pairs or load_mrpc("test"), max_len=config.max_len,
                           nsp_mode=config.nsp_mode, seed=config.seed + 1000)
    totals = {}
    trim = functools.partial(trim_padding, pad_id=tokenizer.pad_id)
    batches = list(test.dataset(config.batch_size, masked=masked, repeat=False).map(trim))
    step_fn = model.compiled_step(batches[0], training=False)
    for batch in batches:
        for name, value in step_fn(batch).items():
            totals[name] = totals.get(name, 0.0) + float(value) / len(batches)
    result = dict(totals)
    if masked:
        result["baseline_accuracy"] = most_frequent_token_baseline(
            tokenizer, config, batches, train_pairs or load_mrpc("train"))
        printer(f"test masked-token accuracy {result['mlm_accuracy']:.3f} "
                f"(most-frequent-token baseline {result['baseline_accuracy']:.3f}), "
                f"NSP accuracy {result['nsp_accuracy']:.3f}")
    else:
        result["perplexity"] = math.exp(result["lm_loss"])
        printer(f"test next-token accuracy {result['lm_accuracy']:.3f}, perplexity "
                f"{result['perplexity']:.1f}, NSP accuracy {result['nsp_accuracy']:.3f}")
    return result


def most_frequent_token_baseline(tokenizer, config: TrainConfig, test_batches,
                                 train_pairs) -> float:
    """Accuracy on the test masks of always predicting the token most often masked in
    ``train_pairs`` (MRPC's train split)."""
    train = PretrainingData(tokenizer, train_pairs, max_len=config.max_len,
                            seed=config.seed).epoch(0)
    chosen = train["mlm_ids"][train["mlm_weights"] > 0]
    if not chosen.size:  # a vocabulary that knows no MRPC word masks nothing
        return 0.0
    guess = np.bincount(chosen).argmax()
    hits = total = 0.0
    for batch in test_batches:
        weights = batch["mlm_weights"].numpy()
        hits += float(((batch["mlm_ids"].numpy() == guess) * weights).sum())
        total += float(weights.sum())
    return hits / max(total, 1.0)
