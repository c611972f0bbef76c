"""The progress of long work: plain lines on a clock where no terminal shows a bar, Keras' bar
on a terminal, and a pass's progress shown as each step's work comes out."""
import io

import pytest

from nlp_tutorials.system.progress import (
    PLAIN_LINE_SECONDS,
    Progress,
    ProgressDisplay,
    duration,
    shown_steps,
)


class Clock:
    """Seconds that move only when told: ``times`` in turn, one per reading."""

    def __init__(self, *times):
        self.times = list(times)

    def __call__(self):
        return self.times.pop(0)


def test_plain_lines_come_first_last_and_at_most_every_30_seconds(capsys):
    """Started at 0 s, the first step done at 5 s (tracing and compiling), then a step every
    10 s: lines at the first step, at 35 s and 65 s (30 s after the line before) and at the
    last; each with the rate and time left measured from the first step on."""
    assert PLAIN_LINE_SECONDS == 30
    printed = []
    clock = Clock(0, *[5 + 10 * (step - 1) for step in range(1, 11)])
    progress = Progress(10, printed.append, title="epoch 1/2", batch_size=4,
                        interactive=False, clock=clock)
    for step in range(1, 11):
        progress.update(step, {"loss": 2.0 if step == 1 else 1.0, "lm_loss": 9.0})
    smoothed = {4: 0.95 ** 3 * 2 + (1 - 0.95 ** 3), 7: 0.95 ** 6 * 2 + (1 - 0.95 ** 6),
                10: 0.95 ** 9 * 2 + (1 - 0.95 ** 9)}
    # 4 examples in the first 5 s; after it 4 examples per 10 s step, and 10 s a step left.
    assert printed == [
        "epoch 1/2: step 1/10 - 5s - 0.8 examples/s - loss: 2.0000",
        f"epoch 1/2: step 4/10 - 35s - 0.4 examples/s - 1:00 left - loss: {smoothed[4]:.4f}",
        f"epoch 1/2: step 7/10 - 1:05 - 0.4 examples/s - 30s left - loss: {smoothed[7]:.4f}",
        f"epoch 1/2: step 10/10 - 1:35 - 0.4 examples/s - loss: {smoothed[10]:.4f}"]
    assert capsys.readouterr().out == ""  # no bar, no control codes


def test_a_short_last_batch_counts_its_own_examples():
    printed = []
    progress = Progress(3, printed.append, unit="batch", batch_size=4, examples=10,
                        interactive=False, clock=Clock(0, 1, 2, 4))
    for step in range(1, 4):
        progress.update(step)
    # After the first batch: 4 more examples in 1 s, then the last 2 in 2 s.
    assert printed[0] == "batch 1/3 - 1s - 4.0 examples/s"
    assert printed[-1] == "batch 3/3 - 4s - 2.0 examples/s"


def test_steps_without_examples_show_no_rate_and_a_step_is_shown_once():
    printed = []
    progress = Progress(2, printed.append, every_seconds=None, every_steps=1,
                        interactive=False, clock=Clock(0, 1, 3))
    progress.update(1)
    progress.update(1)  # said again: nothing new
    progress.update(2)
    assert printed == ["step 1/2 - 1s", "step 2/2 - 3s"]


def test_on_a_terminal_it_is_a_keras_progbar(capsys):
    printed = []
    progress = Progress(3, printed.append, batch_size=2, interactive=True)
    assert type(progress.bar).__name__ == "Progbar"
    for step in range(1, 4):
        progress.update(step, {"loss": 1.0})
    progress.note("saved checkpoint ckpt-3")
    out = capsys.readouterr().out
    assert "3/3" in out and "loss: 1.0000" in out and "examples/s: " in out and "\r" in out
    assert printed == ["\nsaved checkpoint ckpt-3"]  # below the bar, not over it


def test_a_bar_for_another_stream_is_drawn_there(capsys):
    stream = io.StringIO()
    progress = ProgressDisplay(lambda line: print(line, file=stream), "predict",
                               interactive=True, stream=stream).start(2, unit="line")
    progress.update(1, examples=1)
    progress.update(2, examples=2)
    # The title on a line of its own, then the bar, as Keras' fit writes "Epoch 1/3".
    assert stream.getvalue().startswith("predict\n") and "2/2" in stream.getvalue()
    assert capsys.readouterr().out == ""


def test_a_pass_shows_each_step_once_its_work_is_done():
    """The work of a step (a batch through a model) runs as its result is asked for; its
    line comes after it, and the last step's line without asking past the end."""
    events = []

    def work():
        for batch in range(3):
            events.append(f"work {batch + 1}")
            yield batch

    display = ProgressDisplay(events.append, "dev", interactive=False,
                              clock=Clock(0, *range(1, 100)))
    results = shown_steps(work(), 3, display, unit="batch", every_seconds=0)
    assert [next(results) for _ in range(3)] == [0, 1, 2]
    assert [event.split(" - ")[0] for event in events] == [
        "work 1", "dev: batch 1/3", "work 2", "dev: batch 2/3", "work 3", "dev: batch 3/3"]
    assert list(shown_steps(iter("ab"), 2, None)) == ["a", "b"]  # no display: just the items


def test_a_display_names_its_parts():
    display = ProgressDisplay(title="trial 2/5").named("seed 1").named("epoch 1/3")
    assert display.title == "trial 2/5 seed 1 epoch 1/3"
    assert ProgressDisplay().named("importance").title == "importance"


@pytest.mark.parametrize("seconds, text", [(0, "0s"), (59.9, "59s"), (60, "1:00"),
                                           (3599, "59:59"), (3600, "1:00:00"),
                                           (3723, "1:02:03")])
def test_durations_are_written_as_keras_writes_them(seconds, text):
    assert duration(seconds) == text
