"""Where the windows of a long input start (nlp_tutorials.tasks.windows), against hand-worked
cases, and that the tagging and span tasks both cut their inputs there."""
import pytest

from nlp_tutorials.tasks.windows import window_starts


@pytest.mark.parametrize("pieces, width, step, starts", [
    (10, 4, 3, [0, 3, 6]),  # windows 0-3, 3-6, 6-9: the last reaches piece 9
    (10, 4, 2, [0, 2, 4, 6]),  # 6-9 reaches the end; 8 would start a window inside it
    (10, 4, 5, [0, 4, 8]),  # a step past the width is cut to it: no piece between windows
    (4, 4, 2, [0]),  # fits in one window
    (5, 4, 1, [0, 1]),  # one piece too many: a second window, one piece on
    (0, 4, 2, [0]),  # no piece: still one window
])
def test_windows_start_a_step_apart_until_one_reaches_the_last_piece(pieces, width, step,
                                                                     starts):
    assert window_starts(pieces, width, step) == starts


def test_the_tagging_and_span_tasks_cut_where_window_starts_says():
    """Both tasks import the one function (a second copy could drift)."""
    from nlp_tutorials.tasks import conll, squad, windows

    assert conll.window_starts is squad.window_starts is windows.window_starts
