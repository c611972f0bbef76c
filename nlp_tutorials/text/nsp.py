"""Next-sentence pairing: keep a pair's second sentence (IsNext) or swap in another (NotNext).

Numpy only.
"""

import numpy as np

from nlp_tutorials.system.errors import UserError


NSP_MODES = ("random", "paraphrase")  # the first is the default (train --nsp-mode)


IS_NEXT, NOT_NEXT = 0, 1  # BERT's and HuggingFace's next-sentence labels


def check_nsp_mode(mode):
    if mode not in NSP_MODES:
        raise UserError(f"unknown NSP mode {mode!r}; expected one of {', '.join(NSP_MODES)}")


def nsp_pairing(num_pairs: int, mode: str, rng, labels=None):
    """Choose each pair's second sentence for next-sentence prediction.

    Modes:
        "random": as the BERT paper, each pair keeps its own second sentence with probability
            0.5 (label 0 = IsNext) or gets the second sentence of another pair chosen uniformly
            (label 1 = NotNext).
        "paraphrase": every pair keeps its second sentence and the label is the MRPC ``labels``
            entry (1 = paraphrase, 0 = not); note 1 means the opposite of NotNext here.
    Returns:
        second [n] int64: index of the pair whose second sentence to use;
        nsp_labels [n] int32.
    """
    check_nsp_mode(mode)
    own = np.arange(num_pairs)
    if mode == "paraphrase":
        if labels is None or len(labels) != num_pairs:
            raise UserError("paraphrase NSP mode needs one MRPC label per pair")
        return own, np.asarray(labels, dtype=np.int32)
    if num_pairs < 2:
        raise UserError(f"random NSP mode needs at least 2 sentence pairs, got {num_pairs}")
    not_next = rng.random(num_pairs) < 0.5
    # A shift of 1..n-1 places picks uniformly among the other pairs, never the pair itself.
    other = (own + rng.integers(1, num_pairs, size=num_pairs)) % num_pairs
    return np.where(not_next, other, own), np.where(not_next, NOT_NEXT, IS_NEXT).astype(np.int32)

