"""The one training loop: pre-training, fine-tuning and the recovery epochs after pruning.

What it does, step after step::

    batch -> compiled step -> metrics -> progress, TensorBoard, hooks -> Ctrl-C? -> next batch

:func:`train_steps` runs the model's own ``step()`` (compiled by
:func:`~nlp_tutorials.training.distribute.compiled_step`, so it runs on every replica) over an
iterator of dict batches. It does not know where the batches come from (MRPC pairs, a streamed
corpus, TFRecord shards, encoded fine-tuning pairs) nor which model it trains: whatever differs
comes in as a :class:`Hook` (an evaluation at each epoch's end, a masked-token example, a
checkpoint every N steps). A first Ctrl-C is only noted (:func:`ctrl_c_stops_between_steps`) and
the loop stops after the current step, so the caller can save a checkpoint that is whole.
"""
import contextlib
import dataclasses
import signal
import threading
from typing import Callable

import tensorflow as tf

from nlp_tutorials.system.progress import Progress
from nlp_tutorials.training import distribute


@dataclasses.dataclass
class Hook:
    """``call(step, batch, metrics)`` after every ``every``-th step; ``every`` 0 never calls it.

    ``step`` counts from 1 over the whole run, ``batch`` is the dict of tensors the step
    trained on, ``metrics`` its dict of floats (``loss`` and the model's accuracies).
    """

    every: int
    call: Callable[[int, dict, dict], object]

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0


@dataclasses.dataclass
class Logs:
    """TensorBoard scalars of every metric, into ``folder``, every ``every`` steps and at the
    run's last step."""

    folder: str
    every: int


def train_steps(model, batches, first: int, last: int, *, strategy=None, total: int = 0,
                progress: Progress | None = None, logs: Logs | None = None,
                hooks: tuple = (), checkpoint: Hook | None = None, jit: bool = False,
                input_pipelines: int = 1) -> bool:
    """Train ``model`` on steps ``first`` to ``last`` (counted from 1 over the run), one batch
    of ``batches`` each; return True when Ctrl-C stopped them early.

    Args:
        model: a compiled :class:`~nlp_tutorials.models.trainable.TrainableModel` (its
            ``step()`` computes the loss and applies the gradients).
        batches: an iterator of dicts of tensors [batch, ...]; the first one fixes the compiled
            step's signature (batch size and dtypes; lengths stay free).
        strategy: the ``tf.distribute`` strategy the model was built under (default: none).
        total: the run's last step, when a phase ends before it (default: ``last``); the
            TensorBoard logs always get it, and ``checkpoint`` never saves it (the caller saves
            once training is over).
        progress: a :class:`~nlp_tutorials.system.progress.Progress` to report each step's
            metrics to.
        logs: where and how often to write TensorBoard scalars; None writes none.
        hooks: :class:`Hook` s called in order after each step's logs (evaluation, examples).
        checkpoint: the :class:`Hook` that saves a checkpoint, called after the others.
        jit: XLA-compile the step. input_pipelines: how many processes feed one global batch,
            each its own rows (see :func:`~nlp_tutorials.training.distribute.compiled_step`).
    """
    total = total or last
    strategy = strategy or tf.distribute.get_strategy()
    batch = next(batches)
    step_fn = distribute.compiled_step(strategy, model, batch, jit_compile=jit,
                                       input_pipelines=input_pipelines)
    writer = tf.summary.create_file_writer(logs.folder) if logs else None
    with ctrl_c_stops_between_steps() as stop_requested:
        try:
            for step in range(first, last + 1):
                metrics = step_fn(batch)
                if progress or writer or any(h.due(step) for h in hooks):
                    metrics = {name: float(value) for name, value in metrics.items()}
                if progress:
                    progress.update(step, metrics)
                if writer and (step % logs.every == 0 or step == total):
                    write_scalars(writer, step, metrics)
                for hook in hooks:
                    if hook.due(step):
                        hook.call(step, batch, metrics)
                if checkpoint and checkpoint.due(step) and step != total:
                    checkpoint.call(step, batch, metrics)
                if stop_requested.is_set():
                    return True
                if step < last:
                    batch = next(batches)
        except KeyboardInterrupt:  # a second Ctrl-C, inside a step
            return True
        finally:
            if writer:
                writer.flush()
    return False


def write_scalars(writer, step: int, metrics: dict) -> None:
    """One TensorBoard scalar per metric (a dict of floats) at ``step``."""
    with writer.as_default(step=step):
        for name, value in metrics.items():
            tf.summary.scalar(name, value)


def epoch_batches(make_epoch, epochs: int):
    """One iterator over ``epochs`` epochs: ``make_epoch()`` is called for each epoch when the
    one before has run out, so each draws its order only then."""
    for _ in range(epochs):
        yield from make_epoch()


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
