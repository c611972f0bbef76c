"""Progress of long work (training steps, passes over examples): how far, how fast, how long.

On a terminal (or in a notebook) a Keras :class:`keras.utils.Progbar` is redrawn in place, below
its title: the steps done out of all, the time left, the time per step, and the values given
(examples per second, the smoothed loss). Elsewhere (output to a file or a pipe) the bar's carriage returns
and colour codes would leave one line per redraw in the log, so instead one plain line goes to
the printer for the first step, the last, and in between at most every
:data:`PLAIN_LINE_SECONDS` seconds::

    epoch 1/3: step 50/229 - 31s - 25.8 examples/s - 1:51 left - loss: 0.6931

Keras' bar is used rather than one of our own: it is well kept, and Keras is already here.
"""
import contextlib
import dataclasses
import math
import sys
import time
from typing import Callable

# Seconds between two plain progress lines at most: a pass of an hour leaves some 120 lines.
PLAIN_LINE_SECONDS = 30.0
# The values shown smoothed, when the metrics hold them (training's loss and accuracies).
SMOOTHED = ("loss", "mlm_accuracy", "lm_accuracy", "nsp_accuracy")
# Weight of the newest step in the smoothed values: they show what the model does now.
NEWEST_WEIGHT = 0.05
EXAMPLES_PER_SECOND = "examples/s"


def on_a_terminal(stream) -> bool:
    """Whether a bar redrawn in place shows well on ``stream``: a terminal, or a notebook."""
    return getattr(stream, "isatty", lambda: False)() or "ipykernel" in sys.modules


def duration(seconds: float) -> str:
    """``seconds`` as Keras' bar writes a time: ``42s``, ``3:07``, ``1:02:03``."""
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    if seconds >= 60:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds}s"


class Progress:
    """The progress of ``total`` steps, updated after each (:meth:`update`).

    Args:
        total: the last step (steps count from 1; a run resumed after ``start`` goes on).
        printer: hears the plain lines, or the title above the bar, and :meth:`note`'s.
        title: what the lines begin with (``"epoch 1/3"``); unit: what a step is called.
        batch_size: examples per step, for the examples per second (0: none shown);
            examples: all the examples of a pass whose last batch is short (0: none is).
        every_seconds: the most seconds between two plain lines (None: no line for time);
            every_steps: a plain line every this many steps too (0: none for steps).
        interactive: draw a bar (default: when ``stream`` is a terminal or a notebook).
        stream: where the bar is drawn (standard output by default). clock: seconds, rising.
    """

    def __init__(self, total: int, printer=print, *, title: str = "", unit: str = "step",
                 batch_size: int = 0, examples: int = 0, start: int = 0,
                 every_seconds: float | None = PLAIN_LINE_SECONDS, every_steps: int = 0,
                 interactive: bool | None = None, stream=None,
                 clock: Callable[[], float] = time.monotonic):
        self.stream = stream or sys.stdout
        if interactive is None:
            interactive = on_a_terminal(self.stream)
        self.total, self.printer, self.title, self.unit = total, printer, title, unit
        self.batch_size, self.examples, self.start = batch_size, examples, start
        self.clock = clock
        self.every_seconds, self.every_steps = every_seconds, every_steps
        self.smoothed = {}
        self.step = start
        self.began = clock()
        self.first = None  # (step, examples, time) of the first update: the rate starts there
        self.last_line = None  # the time of the last plain line
        self.bar = None
        if interactive:
            import keras

            if title:  # on a line of its own above the bar, as Keras' fit writes "Epoch 1/3"
                printer(title)
            self.bar = keras.utils.Progbar(total, stateful_metrics=(*SMOOTHED,
                                                                    EXAMPLES_PER_SECOND),
                                           unit_name=unit)
            self.draw(start)

    def update(self, step: int, metrics: dict | None = None, examples: int | None = None):
        """Step ``step`` is done, with ``metrics`` (a dict of floats; those of
        :data:`SMOOTHED` are shown smoothed) and ``examples`` done since the start (default:
        the steps times the batch size, at most all the examples). A step shown already is not
        shown again."""
        if step == self.step:
            return
        self.step = step
        now = self.clock()
        if examples is None:
            examples = (step - self.start) * self.batch_size
            examples = min(examples, self.examples) if self.examples else examples
        for name in SMOOTHED:
            if metrics and name in metrics:
                recent = self.smoothed.get(name, metrics[name])
                self.smoothed[name] = (1 - NEWEST_WEIGHT) * recent + NEWEST_WEIGHT * metrics[name]
        if self.first is None:
            self.first = (step, examples, now)
        rate = self.examples_per_second(step, examples, now)
        if self.bar is not None:
            shown = [(EXAMPLES_PER_SECOND, rate)] if rate is not None else []
            self.draw(step, shown + list(self.smoothed.items()))
        elif self.line_due(step, now):
            self.last_line = now
            self.printer(self.line(step, now, rate))

    def examples_per_second(self, step: int, examples: int, now: float) -> float | None:
        """Examples done per second since the first step (whose time includes tracing and
        compiling, so the rate starts after it), or since the start at the first step; None
        with no examples counted or no time gone by."""
        first_step, first_examples, first_time = self.first
        if not examples:
            return None
        if step > first_step and now > first_time:
            return (examples - first_examples) / (now - first_time)
        return examples / (now - self.began) if now > self.began else None

    def line_due(self, step: int, now: float) -> bool:
        return (self.last_line is None or step == self.total
                or (self.every_steps and step % self.every_steps == 0)
                or (self.every_seconds is not None
                    and now - self.last_line >= self.every_seconds))

    def line(self, step: int, now: float, rate: float | None) -> str:
        """The plain line of ``step``: see the module's docstring."""
        parts = [f"{self.title + ': ' if self.title else ''}{self.unit} {step}/{self.total}",
                 duration(now - self.began)]
        if rate is not None:  # two figures at least: 25.8, 0.032
            parts.append(f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}")
            parts[-1] += f" {EXAMPLES_PER_SECOND}"
        first_step, _, first_time = self.first
        if first_step < step < self.total and now > first_time:
            per_step = (now - first_time) / (step - first_step)
            parts.append(f"{duration(math.ceil(per_step * (self.total - step)))} left")
        parts += [f"{name}: {value:.4f}" for name, value in self.smoothed.items()]
        return " - ".join(parts)

    def draw(self, step: int, values=()) -> None:
        """Redraw the bar at ``step`` on the stream (Keras' bar writes to standard output)."""
        redirect = (contextlib.nullcontext() if self.stream is sys.stdout
                    else contextlib.redirect_stdout(self.stream))
        with redirect:
            self.bar.update(step, values=list(values))

    def note(self, text: str) -> None:
        """Print ``text`` on lines of its own (below the bar, which it does not overwrite)."""
        self.printer("\n" + text if self.bar is not None else text)


@dataclasses.dataclass(frozen=True)
class ProgressDisplay:
    """Where a piece of work shows its progress, and under which title: handed down to the
    functions that run long work, each of which starts a :class:`Progress` per pass."""

    printer: Callable = print
    title: str = ""
    interactive: bool | None = None
    stream: object = None
    clock: Callable[[], float] = time.monotonic

    def named(self, title: str) -> "ProgressDisplay":
        """The same display, ``title`` after its own (``"seed 1"`` then ``"epoch 2/3"``)."""
        return dataclasses.replace(self, title=f"{self.title} {title}".strip())

    def start(self, total: int, **options) -> Progress:
        """A :class:`Progress` of ``total`` steps here (``options``: its own, as batch_size)."""
        return Progress(total, self.printer, title=self.title, interactive=self.interactive,
                        stream=self.stream, clock=self.clock, **options)


def shown_steps(results, total: int, display: ProgressDisplay | None, **options):
    """``results`` one by one, each the work of a step done as it is asked for (a generator
    that runs a batch through a model), the progress shown as each comes out (none when
    ``display`` is None): a pass of ``total`` steps. ``options``: the :class:`Progress`'s."""
    if display is None:
        yield from results
        return
    progress = display.start(total, **options)
    for step, result in enumerate(results, 1):
        progress.update(step)
        yield result
