"""Windows over an input too long for one encoding: where each starts.

A CoNLL sentence (:mod:`~nlp_tutorials.tasks.conll`) or a SQuAD passage
(:mod:`~nlp_tutorials.tasks.squad`) of more word pieces than fit beside its special tokens is
cut into overlapping windows, as google-research/bert's ``run_squad.py`` cuts its "doc spans":
each task encodes a window a row, and decoding picks, for every piece, the window where it has
the most context around it.
"""


def window_starts(pieces: int, width: int, step: int) -> list[int]:
    """The first piece of each window of at most ``width`` pieces over ``pieces`` pieces: one
    every ``step`` pieces (never more than ``width``, so no piece falls between two windows),
    until a window reaches the last piece; always at least one window, even of no piece.

    ``window_starts(10, 4, 3)`` is ``[0, 3, 6]``: windows 0-3, 3-6 and 6-9."""
    starts = [0]
    while starts[-1] + width < pieces:
        starts.append(starts[-1] + min(width, step))
    return starts
