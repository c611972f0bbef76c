"""The pre-training loop shared by GPT and BERT: progress, logs, checkpoints, resume.

One tensor's way: :class:`~nlp_tutorials.data.PretrainingData` turns MRPC into batches, the
model's compiled ``step()`` learns from them, :func:`pretrain` settles the run
(:func:`prepare_run`), builds the model and its optimizer (:func:`build_training_state`), runs
the steps (:func:`train_in_phases`, reporting to :class:`Progress`) and hands back the trained
model, which :func:`evaluate` has scored on the MRPC test split. The optimizer and schedule are
in :mod:`nlp_tutorials.optimization`, checkpoints in :mod:`nlp_tutorials.checkpoints`.

Files in ``model_dir`` (so ``export``, ``finetune`` and ``--resume`` need no flags repeated):
``config.json`` (model), ``train_config.json`` (run), ``vocab.txt`` + ``tokenizer_config.json``,
``checkpoints/`` (``tf.train.CheckpointManager``: the newest few, each written before the
``checkpoint`` index file is atomically switched to it), ``logs/`` (TensorBoard), and after a
run from a real checkpoint (``--init-from``) ``pretrained/``, which ``finetune --init-from``
reads (:mod:`nlp_tutorials.continued`). ``--resume``
continues from the newest intact checkpoint
(:func:`~nlp_tutorials.checkpoints.newest_intact_checkpoint`: a damaged newer one is reported
in one line and passed over).
"""
import contextlib
import dataclasses
import functools
import itertools
import json
import math
import signal
import sys
import threading
import time
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
from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.sources.corpus import DEFAULT_MAX_LEN as DEFAULT_CORPUS_MAX_LEN
from nlp_tutorials.sources.corpus import CorpusData, check_max_len as check_corpus_max_len
from nlp_tutorials.sources.corpus import corpus_files, learn_tokenizer
from nlp_tutorials.sources.mrpc import PretrainingData
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.text.packing import longest_pair_length, trim_padding
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.files import read_json_object, write_text_atomic
from nlp_tutorials.training.optimization import HeadsFirst, WarmupLinearDecay, bert_adamw
from nlp_tutorials.sources.shards import ShardData, check_same_tokenizer, read_description
from nlp_tutorials.text.tokenization import WordPieceTokenizer, WordTokenizer, load_tokenizer

TRAIN_CONFIG_NAME = "train_config.json"
# Under --jit, batch lengths are rounded up to a multiple of this: XLA compiles each distinct
# shape once (several seconds each), and MRPC batches would otherwise bring dozens of lengths.
JIT_LENGTH_MULTIPLE = 16


def prepare_run(config: TrainConfig, given: set, resume: bool):
    """Settle the run's config, tokenizer and model config, saving them into ``model_dir``.

    ``given`` names the TrainConfig fields the user set explicitly; on ``--resume`` those must
    agree with the saved run (the rest are taken from it).
    Returns (config, tokenizer, model_config, train_pairs).
    """
    model_dir = Path(config.model_dir)
    if resume:
        config = resumed_config(config, given, model_dir)
        train_pairs = mrpc_train_pairs(config)
        tokenizer = load_tokenizer(model_dir)
        model_config = ModelConfig.load(model_dir)
        if config.data:  # the shards' ids must mean the model's tokens
            check_same_tokenizer(config.data, tokenizer, model_dir)
    else:
        if holds_checkpoint(model_dir):
            raise UserError(f"{model_dir} already holds a checkpoint: pass --resume to continue "
                            f"it, or choose another --model-dir")
        train_pairs = mrpc_train_pairs(config)
        if config.init_from:
            config, tokenizer, model_config = checkpoint_text_run(config, given, train_pairs)
        else:
            config, tokenizer, model_config = new_model_run(config, given, train_pairs)
        tokenizer.save(model_dir)
        model_config.save(model_dir)
        write_text_atomic(model_dir / TRAIN_CONFIG_NAME,
                          json.dumps(dataclasses.asdict(config), indent=2) + "\n")
    return config, tokenizer, model_config, train_pairs


def mrpc_train_pairs(config: TrainConfig):
    """MRPC's train pairs, or None when the run reads a corpus (--corpus or --data)."""
    return None if config.corpus or config.data else load_mrpc("train")


def new_model_run(config: TrainConfig, given: set, train_pairs):
    """(config, tokenizer, model config) of a model trained from scratch; ``train_pairs``:
    MRPC's, or None for a corpus run."""
    if "vocab_size" in given and config.tokenizer != "wordpiece" and not config.corpus:
        raise UserError(f"--vocab-size {config.vocab_size}: only --tokenizer wordpiece "
                        f"has a vocabulary size to choose")
    tokenizer, config = run_tokenizer(config, given, train_pairs)
    return config, tokenizer, config.model_config(tokenizer.vocab_size, config.max_len)


def checkpoint_text_run(config: TrainConfig, given: set, train_pairs):
    """(config, tokenizer, model config) of continued pre-training (``--init-from``) on
    MRPC, a corpus or shards: the checkpoint settles the model and tokenizer
    (:func:`~nlp_tutorials.continued.checkpoint_run`), the text the default max_len."""
    if config.data:  # the shards' sequences have their length already
        config = dataclasses.replace(config, max_len=shards_max_len(config, given))
    config, tokenizer, model_config = continued.checkpoint_run(
        config, given, functools.partial(text_max_len, config, train_pairs))
    if config.data:
        check_same_tokenizer(config.data, tokenizer, config.init_from)
    return config, tokenizer, model_config


def text_max_len(config: TrainConfig, train_pairs, tokenizer) -> int:
    """The default sequence length for ``tokenizer`` on the run's text: 128 for a corpus,
    the longest MRPC train pair otherwise."""
    if config.corpus:
        return DEFAULT_CORPUS_MAX_LEN
    return longest_pair_length(tokenizer, train_pairs)


def shards_max_len(config: TrainConfig, given: set) -> int:
    """The max_len the shards in ``config.data`` were written for; a different --max-len is
    refused."""
    max_len = read_description(config.data)["max_len"]
    if "max_len" in given and config.max_len != max_len:
        raise UserError(f"--max-len {config.max_len}: the shards in {config.data} were "
                        f"written for --max-len {max_len}; drop the flag or prepare again")
    return max_len


def run_tokenizer(config: TrainConfig, given: set, train_pairs):
    """(tokenizer, config with max_len settled) of a new run: learned from MRPC train, or
    from the corpus (:func:`corpus_tokenizer`)."""
    if config.corpus or config.data:
        return corpus_tokenizer(config, given)
    # The vocabulary comes from the TRAIN split only: test words stay unknown.
    tokenizer = build_tokenizer(config, [s for p in train_pairs for s in (p.s1, p.s2)])
    if not config.max_len:
        config = dataclasses.replace(config, max_len=longest_pair_length(tokenizer, train_pairs))
    return tokenizer, config


def corpus_tokenizer(config: TrainConfig, given: set):
    """(tokenizer, config with max_len and the tokenizer's settings) of a --corpus/--data run.

    --data: the tokenizer the shards were written with, and their max_len. --corpus: one
    learned from the corpus' first ``tokenizer_sample_mb`` MB (bounded work and memory), and
    max_len 128 unless given.
    """
    if config.data:
        fixed = sorted({"tokenizer", "vocab_size", "tokenizer_sample_mb"} & given)
        if fixed:
            raise UserError(f"--{fixed[0].replace('_', '-')}: with --data the tokenizer is the "
                            f"one the shards were written with (set it at `prepare`)")
        max_len = shards_max_len(config, given)
        tokenizer = load_tokenizer(config.data)
        kind = "word" if isinstance(tokenizer, WordTokenizer) else "wordpiece"
        return tokenizer, dataclasses.replace(config, max_len=max_len, tokenizer=kind,
                                              vocab_size=tokenizer.vocab_size)
    max_len = config.max_len or DEFAULT_CORPUS_MAX_LEN
    check_corpus_max_len(max_len)
    tokenizer = learn_tokenizer(config.tokenizer, config.vocab_size,
                                corpus_files(config.corpus), config.tokenizer_sample_mb)
    return tokenizer, dataclasses.replace(config, max_len=max_len)


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
    saved = read_json_object(path)
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

    The learning rate follows :class:`~nlp_tutorials.optimization.WarmupLinearDecay`'s rule
    for extensions; ``train_config.json`` records the new total and the extension (written
    atomically), so a later ``--resume`` rebuilds the same schedule.
    """
    if config.head_warmup_steps:
        raise UserError(f"--steps {steps}: a run with --head-warmup-steps cannot be extended on "
                        f"resume (its schedule restarts after the warm-up); start a new run")
    schedule = run_schedule(config).extended(at, steps)
    piece = schedule.pieces[-1]
    record = {"at_step": at, "from_steps": config.steps, "to_steps": steps,
              "rate_at_step": piece.start_rate}
    extended = dataclasses.replace(config, steps=steps, schedule_extensions=(
        *config.schedule_extensions, record))
    path = Path(config.model_dir) / TRAIN_CONFIG_NAME
    saved = read_json_object(path)
    saved.update(steps=steps, schedule_extensions=list(extended.schedule_extensions))
    write_text_atomic(path, json.dumps(saved, indent=2) + "\n")
    printer(f"--steps {steps}: the {config.steps}-step run goes on from step {at}; learning "
            f"rate {piece.start_rate:.3g} -> {piece.rejoin_rate:.3g} at step "
            f"{piece.rejoin_step}, then down to 0 at step {steps}")
    return extended


@dataclasses.dataclass
class PretrainedRun:
    """What :func:`pretrain` hands back: the trained model and what it needs besides.

    ``config`` is the run's settled config (``max_len`` filled in, the saved run's settings on
    ``--resume``, ``model_dir`` this worker's); ``evaluation`` the test-split scores of
    :func:`evaluate`.
    """

    model: keras.Model
    tokenizer: object
    config: TrainConfig
    evaluation: dict


def pretrain(config: TrainConfig, given: set = frozenset(), resume: bool = False,
             printer=print) -> PretrainedRun:
    """Pre-train a GPT or BERT on MRPC train; return it with its test-split evaluation.

    Saves a checkpoint every ``checkpoint_every`` steps, at the end, and on Ctrl-C (then raises
    KeyboardInterrupt). Under ``config.strategy`` the model and optimizer live on every
    replica; a checkpoint holds one copy of each variable, so it resumes under any strategy.
    """
    # First: logical CPU devices and the multi-worker runtime need a TensorFlow not yet started.
    strategy = distribute.make_strategy(config.strategy, config.cpu_replicas)
    config = dataclasses.replace(
        config, model_dir=str(distribute.worker_dir(config.model_dir, config.strategy)))
    steps_asked = config.steps
    config, tokenizer, model_config, train_pairs = prepare_run(config, given, resume)
    distribute.check_batch_size(config.batch_size, strategy)
    distribute.set_precision(config.precision)
    if config.jit:
        check_xla_available()  # before the model is built: a missing XLA fails at once
    restored = newest_intact_checkpoint(config.model_dir) if resume else None
    if restored and "steps" in given and steps_asked > config.steps:
        config = extend_run(config, steps_asked, restored[1], printer)
    model, manager = build_training_state(config, model_config, strategy,
                                          restored and restored[0])
    start = int(model.optimizer.iterations.numpy())
    if restored:
        printer(f"resuming from checkpoint {Path(restored[0]).name} at step {start}")
    data = pretraining_data(config, tokenizer, train_pairs, printer)
    printer(f"{config.model_type} {config.dim}d/{config.layers} layers/{config.heads} heads, "
            f"vocab {tokenizer.vocab_size}, max_len {config.max_len}, "
            f"{describe_epoch(data, config.batch_size)}; "
            f"steps {start} -> {config.steps}; {strategy.num_replicas_in_sync} replica(s), "
            f"{config.precision}")
    progress = Progress(config.steps, config.log_every, printer, start=start)
    interrupted = train_in_phases(model, manager, training_batches(data, config, start),
                                  strategy, config, tokenizer, progress)
    path = manager.save(checkpoint_number=int(model.optimizer.iterations.numpy()))
    progress.note(f"saved checkpoint {path}")
    if interrupted:
        raise KeyboardInterrupt
    if config.init_from:
        folder = continued.save_for_finetuning(model, tokenizer, config.model_dir)
        progress.note(f"wrote {folder} (finetune --init-from reads it)")
    return PretrainedRun(model, tokenizer, config, evaluate(model, tokenizer, config, printer))


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


def pretraining_data(config: TrainConfig, tokenizer, train_pairs, printer=print):
    """Where the run's batches come from: MRPC pairs, a streamed corpus, or prepared shards
    (this worker's share of them under --strategy multiworker)."""
    if config.corpus:
        return CorpusData(config.corpus, tokenizer, max_len=config.max_len, seed=config.seed,
                          whole_word_mask=config.whole_word_mask, printer=printer)
    if config.data:
        return ShardData(config.data, tokenizer, seed=config.seed,
                         whole_word_mask=config.whole_word_mask,
                         worker=distribute.input_pipeline(config.strategy))
    return PretrainingData(tokenizer, train_pairs, max_len=config.max_len,
                           nsp_mode=config.nsp_mode, seed=config.seed,
                           whole_word_mask=config.whole_word_mask)


def describe_epoch(data, batch_size: int) -> str:
    """How long an epoch is, as far as known before it runs (a streamed corpus: not yet)."""
    if isinstance(data, CorpusData):
        return "steps per epoch unknown until the corpus has been read once"
    return f"{data.steps_per_epoch(batch_size)} steps per epoch"


def training_batches(data, config: TrainConfig, start: int):
    """An iterator over the run's batches from step ``start + 1`` on, trimmed of padding."""
    # XLA compiles once per distinct shape: rounding lengths up bounds the compilations.
    trim = functools.partial(trim_padding, multiple=JIT_LENGTH_MULTIPLE if config.jit else 1)
    masked = config.model_type == "bert"
    # Skipping replays the same epochs' masking, so a resumed run sees what it would have seen.
    if isinstance(data, CorpusData):
        # A plain generator, not tf.data: a bad line met mid-run stops the run with its one-line
        # UserError rather than a TensorFlow error around it.
        batches = itertools.islice(data.batches(config.batch_size, masked), start, None)
        return (trim({name: tf.constant(value) for name, value in batch.items()})
                for batch in batches)
    if isinstance(data, ShardData):
        dataset = data.dataset(config.batch_size, masked, start)
    else:
        dataset = data.dataset(config.batch_size, masked=masked).skip(start)
    return iter(dataset.map(trim, num_parallel_calls=tf.data.AUTOTUNE)
                .prefetch(tf.data.AUTOTUNE))


def train_in_phases(model, manager, batches, strategy, config: TrainConfig, tokenizer,
                    progress: "Progress") -> bool:
    """:func:`train_steps` over the steps left, phase by phase: the heads alone during
    ``head_warmup_steps`` (see :mod:`nlp_tutorials.continued`), then the whole model.

    Each phase compiles its own step: a traced step keeps the variables it was traced with.
    Returns True when Ctrl-C stopped the run early.
    """
    for first, last, heads_only in continued.training_phases(
            progress.start, config.head_warmup_steps, config.steps):
        if heads_only:
            progress.note(f"steps {first}-{last}: the pre-training heads alone (encoder frozen)")
        with continued.heads_only(model, heads_only):
            if train_steps(model, manager, batches, strategy, config, tokenizer, progress,
                           first, last):
                return True
    return False


def train_steps(model, manager, batches, strategy, config: TrainConfig, tokenizer,
                progress: "Progress", first: int, last: int) -> bool:
    """Run steps ``first`` to ``last``; returns True when Ctrl-C stopped them early.

    Each step reports to ``progress``, writes TensorBoard scalars every ``log_every`` steps,
    shows a masked-token example every ``sample_every`` (BERT) and saves a checkpoint every
    ``checkpoint_every`` (the final one is left to the caller).
    """
    batch = next(batches)
    # With --data each worker feeds its own share of the global batch.
    pipelines = distribute.input_pipeline(config.strategy)[0] if config.data else 1
    step_fn = distribute.compiled_step(strategy, model, batch, jit_compile=config.jit,
                                       input_pipelines=pipelines)
    writer = tf.summary.create_file_writer(str(Path(config.model_dir) / "logs"))
    with ctrl_c_stops_between_steps() as stop_requested:
        try:
            for step in range(first, last + 1):
                metrics = {k: float(v) for k, v in step_fn(batch).items()}
                progress.update(step, metrics)
                if step % config.log_every == 0 or step == config.steps:
                    with writer.as_default(step=step):
                        for name, value in metrics.items():
                            tf.summary.scalar(name, value)
                if config.model_type == "bert" and step % config.sample_every == 0:
                    progress.note(describe_predictions(model, tokenizer, batch))
                if step % config.checkpoint_every == 0 and step != config.steps:
                    manager.save(checkpoint_number=step)
                if stop_requested.is_set():
                    return True
                if step < last:
                    batch = next(batches)
        except KeyboardInterrupt:
            return True
        finally:
            writer.flush()
    return False


class Progress:
    """The run's progress on standard output, with smoothed recent loss and accuracies.

    On a terminal (or in a notebook) a Keras progress bar is redrawn in place every step.
    Elsewhere (output to a file or a pipe) the bar's carriage returns and colour codes would
    leave one line per step in the log, so instead one plain line goes to ``printer`` for the
    run's first step, every ``every`` steps and the last:
    ``step 50/1000 - 31s - loss: 6.1234 - mlm_accuracy: 0.1234 - nsp_accuracy: 0.5012``.
    The values are exponential moving averages (weight 0.05 on the newest step), not Keras'
    average since step 0, so they show what the model does now.
    """

    SHOWN = ("loss", "mlm_accuracy", "lm_accuracy", "nsp_accuracy")

    def __init__(self, total: int, every: int, printer=print, start: int = 0,
                 interactive: bool | None = None):
        if interactive is None:
            interactive = sys.stdout.isatty() or "ipykernel" in sys.modules
        self.total, self.every, self.printer, self.start = total, every, printer, start
        self.smoothed = {}
        self.began = time.perf_counter()
        self.bar = None
        if interactive:
            self.bar = keras.utils.Progbar(total, stateful_metrics=self.SHOWN, unit_name="step")
            self.bar.update(start)

    def update(self, step: int, metrics: dict) -> None:
        """Record step ``step``'s metrics (a dict of floats) and show the progress."""
        for name in self.SHOWN:
            if name in metrics:
                recent = self.smoothed.get(name, metrics[name])
                self.smoothed[name] = 0.95 * recent + 0.05 * metrics[name]
        if self.bar is not None:
            self.bar.update(step, values=list(self.smoothed.items()))
        elif step == self.start + 1 or step % self.every == 0 or step == self.total:
            seconds = time.perf_counter() - self.began
            values = "".join(f" - {name}: {value:.4f}" for name, value in self.smoothed.items())
            self.printer(f"step {step}/{self.total} - {seconds:.0f}s{values}")

    def note(self, text: str) -> None:
        """Print ``text`` on lines of its own (below the bar, which it does not overwrite)."""
        self.printer("\n" + text if self.bar is not None else text)


@contextlib.contextmanager
def ctrl_c_stops_between_steps():
    """Within it, the first Ctrl-C (SIGINT) only sets the yielded threading.Event.

    The training loop checks it after each step, so an interrupt never lands inside a
    TensorFlow call or a checkpoint write (CI once saw an interrupted run abort with a glibc
    heap-corruption error instead of saving). A second Ctrl-C raises KeyboardInterrupt at once.
    Outside the main thread, where signals cannot be caught, the event is never set.
    """
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def request_stop(signum, frame):
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = signal.signal(signal.SIGINT, request_stop)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


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


def evaluate(model, tokenizer, config: TrainConfig, printer=print) -> dict:
    """Masked-token (or next-token) and NSP accuracy on the MRPC test split.

    Test pairs get the same vocabulary (test-only words become [UNK]), the same max_len
    (longer pairs are truncated longest-first) and one fixed masking (seed + 1000). Metrics
    are means over full batches of ``batch_size`` pairs (the last partial batch, under
    ``batch_size`` of the 1,725 pairs, is left out). For BERT it also reports the
    most-frequent-token baseline: the accuracy of always guessing the token most often masked
    in train.
    """
    masked = config.model_type == "bert"
    test = PretrainingData(tokenizer, load_mrpc("test"), max_len=config.max_len,
                           nsp_mode=config.nsp_mode, seed=config.seed + 1000)
    totals = {}
    batches = list(test.dataset(config.batch_size, masked=masked, repeat=False)
                   .map(trim_padding))
    step_fn = model.compiled_step(batches[0], training=False)
    for batch in batches:
        for name, value in step_fn(batch).items():
            totals[name] = totals.get(name, 0.0) + float(value) / len(batches)
    result = dict(totals)
    if masked:
        result["baseline_accuracy"] = most_frequent_token_baseline(tokenizer, config, batches)
        printer(f"test masked-token accuracy {result['mlm_accuracy']:.3f} "
                f"(most-frequent-token baseline {result['baseline_accuracy']:.3f}), "
                f"NSP accuracy {result['nsp_accuracy']:.3f}")
    else:
        result["perplexity"] = math.exp(result["lm_loss"])
        printer(f"test next-token accuracy {result['lm_accuracy']:.3f}, perplexity "
                f"{result['perplexity']:.1f}, NSP accuracy {result['nsp_accuracy']:.3f}")
    return result


def most_frequent_token_baseline(tokenizer, config: TrainConfig, test_batches) -> float:
    """Accuracy on the test masks of always predicting train's most often masked token."""
    train = PretrainingData(tokenizer, load_mrpc("train"), max_len=config.max_len,
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

