"""Pre-training a GPT or BERT: settling the run, its text, its model, and the test score.

One tensor's way: :func:`pretrain` settles the run (:func:`settle_run`) with its text (a
:class:`~nlp_tutorials.sources.source.PretrainingText`, given or picked by :func:`run_text`:
MRPC's pairs, a corpus or shards), builds the model and its optimizer
(:func:`build_training_state`), writes the run's settings once all of that has passed
(:func:`save_run`), and feeds the text's batches
(:class:`~nlp_tutorials.sources.source.PretrainingSource`) to the training loop
(:func:`~nlp_tutorials.training.loop.train_steps`, once per phase: :func:`train_in_phases`),
which runs the model's compiled ``step()``, reports to
:class:`~nlp_tutorials.system.progress.Progress` and saves checkpoints. It hands back the trained
model, which :func:`~nlp_tutorials.training.pretraining_evaluation.score_on_test` has scored on
the text's held-out part (MRPC's test split, or a corpus' held-out documents). The optimizer
and schedule are in :mod:`nlp_tutorials.training.optimization`, checkpoints in
:mod:`nlp_tutorials.training.checkpoints`.

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
import json
from pathlib import Path

import keras
import tensorflow as tf

from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.sources.corpus_text import CorpusText
from nlp_tutorials.sources.mrpc import MrpcText
from nlp_tutorials.sources.shard_batches import ShardText
from nlp_tutorials.sources.source import PretrainingSource, PretrainingText, TextSettings
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.json_files import read_json_object
from nlp_tutorials.system.outputs import Interrupted
from nlp_tutorials.system.progress import Progress
from nlp_tutorials.system.settings import flag_of, read_saved_settings
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.text.tokenization import load_tokenizer
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
from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.training.loop import Hook, Logs, train_steps
from nlp_tutorials.training.optimization import HeadsFirst, WarmupLinearDecay, bert_adamw
from nlp_tutorials.training.pretraining_evaluation import (describe_continuation,
                                                          describe_predictions, score_on_test)

TRAIN_CONFIG_NAME = "train_config.json"
# Under --jit, batch lengths are rounded up to a multiple of this: XLA compiles each distinct
# shape once (several seconds each), and MRPC batches would otherwise bring dozens of lengths.
JIT_LENGTH_MULTIPLE = 16


def settle_run(config: TrainConfig, given: set, resume: bool,
               text: PretrainingText | None = None):
    """The run's config, tokenizer and model config, and its text; nothing is written.

    ``given`` names the TrainConfig fields the user set explicitly; on ``--resume`` those must
    agree with the saved run (the rest are taken from it). ``text``: what the run learns from
    (a :class:`~nlp_tutorials.sources.source.PretrainingText`), by default the one ``config``
    names (:func:`run_text`).
    Returns (config, tokenizer, model_config, text).
    """
    model_dir = Path(config.model_dir)
    if resume:
        config = resumed_config(config, given, model_dir)
        text = text or run_text(config)
        tokenizer = load_tokenizer(model_dir)
        model_config = ModelConfig.load(model_dir)
        text.check_tokenizer(tokenizer, model_dir)
        return config, tokenizer, model_config, text
    if holds_checkpoint(model_dir):
        raise UserError(f"{model_dir} already holds a checkpoint: pass --resume to continue "
                        f"it, or choose another --model-dir")
    text = text or run_text(config)
    if config.init_from:
        config, tokenizer, model_config = checkpoint_text_run(config, given, text)
    else:
        tokenizer, settings = text.new_tokenizer(text_settings(config, given))
        config = with_text_settings(config, settings)
        model_config = config.model_config(tokenizer.vocab_size, config.max_len)
    return config, tokenizer, model_config, text


def settled_run(config: TrainConfig, given: set, resume: bool, text: PretrainingText | None,
                printer=print):
    """:func:`settle_run` in the precision the run computes in, said in the run's first line.

    ``--precision auto`` is resolved first (:func:`~nlp_tutorials.training.distribute.
    resolve_precision`; GPUs are asked of TensorFlow), so that ``--resume`` compares, and the
    run saves, a precision, never "auto". A resumed run without ``--precision`` keeps its own.
    """
    precision = distribute.resolve_precision(config.precision)
    config, tokenizer, model_config, text = settle_run(
        dataclasses.replace(config, precision=precision.name), given, resume, text)
    if resume and "precision" not in given:
        precision = distribute.resolve_precision(config.precision)
        precision = precision._replace(reason=precision.reason or "the resumed run's")
        config = dataclasses.replace(config, precision=precision.name)
    printer(precision.line())
    return config, tokenizer, model_config, text


def save_run(config: TrainConfig, tokenizer, model_config: ModelConfig) -> None:
    """Write a new run's tokenizer, ``config.json`` and ``train_config.json`` into
    ``model_dir``, each atomically; ``export``, ``finetune`` and ``--resume`` read them."""
    model_dir = Path(config.model_dir)
    tokenizer.save(model_dir)
    model_config.save(model_dir)
    write_text_atomic(model_dir / TRAIN_CONFIG_NAME,
                      json.dumps(dataclasses.asdict(config), indent=2) + "\n")


def run_text(config: TrainConfig) -> PretrainingText:
    """What the run learns from when the caller names none: :class:`~nlp_tutorials.sources.
    corpus_text.CorpusText` (--corpus), :class:`~nlp_tutorials.sources.shard_batches.ShardText`
    (--data) or :class:`~nlp_tutorials.sources.mrpc.MrpcText`. The one place that asks; the
    rest of the run asks the answer."""
    if config.corpus:
        return CorpusText(config.corpus)
    if config.data:
        return ShardText(config.data)
    return MrpcText(load_mrpc("train"), load_mrpc("test"))


def text_settings(config: TrainConfig, given: set) -> TextSettings:
    """The run's settings a text reads, as plain values."""
    values = {field.name: getattr(config, field.name)
              for field in dataclasses.fields(TextSettings) if field.name != "given"}
    return TextSettings(**values, given=frozenset(given))


def with_text_settings(config: TrainConfig, settings: TextSettings) -> TrainConfig:
    """``config`` with what the text settled (its max_len, and the tokenizer's kind and size
    when the text fixes them)."""
    return dataclasses.replace(config, tokenizer=settings.tokenizer,
                               vocab_size=settings.vocab_size, max_len=settings.max_len)


def checkpoint_text_run(config: TrainConfig, given: set, text: PretrainingText):
    """(config, tokenizer, model config) of continued pre-training (``--init-from``) on
    MRPC, a corpus or shards: the checkpoint settles the model and tokenizer
    (:func:`~nlp_tutorials.training.continued.checkpoint_run`), the text the default max_len."""
    settled = with_text_settings(config, text.settle(text_settings(config, given)))
    config, tokenizer, model_config = continued.checkpoint_run(settled, given,
                                                               text.default_max_len)
    text.check_tokenizer(tokenizer, config.init_from)
    return config, tokenizer, model_config


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
    mismatched = [f"{flag_of(config, name)} {getattr(config, name)} (saved: {saved[name]}"
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
    :func:`evaluate` on the text's held-out part ({} when it has none), and ``test_pairs`` the
    MRPC test pairs an MRPC run read (for the attention export; None for other texts).
    """

    model: keras.Model
    tokenizer: object
    config: TrainConfig
    evaluation: dict
    test_pairs: list | None


def pretrain(config: TrainConfig, given: set = frozenset(), resume: bool = False,
             printer=print, text: PretrainingText | None = None) -> PretrainedRun:
    """Pre-train a GPT or BERT on ``text``; return it scored on the text's held-out part.

    ``text`` (a :class:`~nlp_tutorials.sources.source.PretrainingText`) is what the run learns
    from: by default ``config``'s (:func:`run_text`); a resumed run's must be the one it began with.

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
    config, tokenizer, model_config, text = settled_run(config, given, resume, text, printer)
    distribute.check_batch_size(config.batch_size, strategy)
    distribute.set_precision(config.precision)
    distribute.set_op_determinism(config.deterministic)
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
    progress = Progress(config.steps, printer, batch_size=config.batch_size, start=start,
                        every_steps=config.log_every, every_seconds=None)
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
        held_out = text.held_out(text_settings(config, given), tokenizer)
        evaluation = score_on_test(model, tokenizer, config, held_out, printer, text.unscored)
    return PretrainedRun(model, tokenizer, config, evaluation, text.test_pairs)


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


def pretraining_data(config: TrainConfig, tokenizer, text: PretrainingText | None = None,
                     printer=print) -> PretrainingSource:
    """Where the run's batches come from: ``text``'s source (by default :func:`run_text`'s),
    this worker's share of it under --strategy multiworker."""
    text = text or run_text(config)
    return text.source(text_settings(config, ()), tokenizer,
                       distribute.input_pipeline(config.strategy), printer)


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
    # BERT shows its guesses at a batch's masked tokens; GPT continues a batch's first words.
    describe = describe_predictions if config.model_type == "bert" else describe_continuation
    hooks = (Hook(config.sample_every,
                  lambda step, batch, metrics: progress.note(describe(model, tokenizer, batch))),)
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
