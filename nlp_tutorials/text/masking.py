"""BERT's masked-LM corruption: choose 15% of the tokens, then 80% [MASK], 10% random, 10% kept.

Numpy only, on ids: works for any tokenizer and any source of pairs.
"""

import numpy as np

from nlp_tutorials.system.errors import UserError


def num_to_mask(num_real, mask_prob):
    """How many of ``num_real`` tokens to mask: round(mask_prob * num_real), at least 1 if any.

    Rounds half to even like Python's round (BERT's choice), element-wise on arrays.
    """
    num_real = np.asarray(num_real)
    return np.where(num_real > 0, np.maximum(1, np.rint(num_real * mask_prob)), 0).astype(np.int64)


def default_max_predictions(max_len: int, mask_prob: float = 0.15) -> int:
    """Smallest max_predictions that always fits: the count for a full single sentence.

    A row of ``max_len`` holds at most max_len - 2 real tokens (``[CLS] s [SEP]``; a pair has
    one fewer) and the count to mask never decreases with more tokens, so that count bounds all.
    """
    return int(num_to_mask(max(1, max_len - 2), mask_prob))


def mask_with_tokenizer(tokenizer, input_ids, rng, max_predictions: int, mask_prob=0.15,
                        continuation_ids=None) -> dict:
    """:func:`mask_tokens` with ``tokenizer``'s vocabulary size, ``[MASK]`` id and special ids."""
    return mask_tokens(input_ids, rng, vocab_size=tokenizer.vocab_size,
                       mask_id=tokenizer.mask_id, special_ids=tokenizer.special_ids,
                       max_predictions=max_predictions, mask_prob=mask_prob,
                       continuation_ids=continuation_ids)


def _ordinary_ids(vocab_size, specials):
    """The ids in [0, vocab_size) that are not in ``specials`` (int array), increasing."""
    # A boolean mask, not np.setdiff1d: that one sorts the whole vocabulary on every batch.
    is_ordinary = np.ones(vocab_size, dtype=bool)
    is_ordinary[specials[specials < vocab_size]] = False
    ordinary = np.flatnonzero(is_ordinary)
    if ordinary.size == 0:
        raise UserError(f"vocabulary of {vocab_size} ids has no ordinary token to mask")
    return ordinary


def mask_tokens(input_ids, rng, *, vocab_size, mask_id, special_ids, max_predictions,
                mask_prob=0.15, continuation_ids=None) -> dict:
    """BERT's masked-LM corruption of a batch, vectorised.

    In each row, round(mask_prob * real tokens) of the real tokens (ids not in ``special_ids``;
    padding and [CLS]/[SEP] are specials), at least one, are chosen at random. Each chosen
    token independently becomes ``mask_id`` with probability 0.8, a random ordinary id (any id in
    [0, vocab_size) not in ``special_ids``) with 0.1, and stays as it is with 0.1.

    With ``continuation_ids`` (the ids of WordPiece ``##`` pieces), whole words are chosen
    instead, as BERT's whole-word masking: a word is a token and the ``##`` pieces after it, and
    words are taken in random order while they fit in the count, so a row gets at most (and
    usually exactly) that many tokens. The 80/10/10 choice is still made per token.

    Args:
        input_ids: [n, step] int token ids.
        rng: numpy.random.Generator.
    Returns:
        dict of ``input_ids`` [n, step] int32 (corrupted), ``mlm_positions`` [n, max_predictions]
        int32 (chosen positions in increasing order, then 0), ``mlm_ids`` [n, max_predictions]
        int32 (the original ids there, then 0) and ``mlm_weights`` [n, max_predictions] float32
        (1.0 for a chosen position, 0.0 for padding).
    """
    if not 0.0 < mask_prob <= 1.0:
        raise UserError(f"mask_prob={mask_prob!r}: expected a probability in (0, 1]")
    input_ids = np.asarray(input_ids)
    specials = np.fromiter(special_ids, dtype=np.int64)
    ordinary = _ordinary_ids(vocab_size, specials)
    n, step = input_ids.shape
    real = ~np.isin(input_ids, specials)  # [n, step]
    num_chosen = num_to_mask(real.sum(axis=1), mask_prob)  # [n]
    if num_chosen.max(initial=0) > max_predictions:
        raise UserError(f"max_predictions={max_predictions} is too small: a sequence needs "
                        f"{num_chosen.max()} masked tokens at mask_prob={mask_prob}")
    if continuation_ids is None:
        selected = _choose_tokens(real, num_chosen, rng)
    else:
        continues = np.isin(input_ids, np.fromiter(continuation_ids, dtype=np.int64))
        selected = _choose_whole_words(real, continues, num_chosen, rng)

    # Selected positions first, in increasing order (a stable sort of "not selected").
    order = np.argsort(~selected, axis=1, kind="stable")[:, :max_predictions]
    order = np.pad(order, ((0, 0), (0, max_predictions - order.shape[1])))
    chosen = np.arange(max_predictions)[None, :] < selected.sum(axis=1)[:, None]
    positions = np.where(chosen, order, 0)  # [n, max_predictions]
    original = np.where(chosen, np.take_along_axis(input_ids, positions, axis=1), 0)

    draw = rng.random((n, max_predictions))
    random_ids = ordinary[rng.integers(ordinary.size, size=(n, max_predictions))]
    replacement = np.where(draw < 0.8, mask_id, np.where(draw < 0.9, random_ids, original))
    corrupted = input_ids.astype(np.int32)  # a copy
    rows = np.broadcast_to(np.arange(n)[:, None], chosen.shape)
    corrupted[rows[chosen], positions[chosen]] = replacement[chosen]
    return {"input_ids": corrupted,
            "mlm_positions": positions.astype(np.int32),
            "mlm_ids": original.astype(np.int32),
            "mlm_weights": chosen.astype(np.float32)}


def _choose_tokens(real, num_chosen, rng):
    """[n, step] bool: ``num_chosen[row]`` of each row's real tokens, uniformly at random."""
    # Each row's real tokens in a random order come first; its head is a uniform sample.
    keys = np.where(real, rng.random(real.shape), 2.0)
    rank = np.argsort(np.argsort(keys, axis=1), axis=1)
    return rank < num_chosen[:, None]


def _choose_whole_words(real, continues, num_chosen, rng):
    """[n, step] bool: whole words of real tokens, at most ``num_chosen[row]`` tokens a row.

    As google-research/bert: shuffle the words, then take each one that still fits.
    ``continues`` [n, step] marks ``##`` pieces; one right after a special starts a word.
    """
    continues_real = continues & np.pad(real[:, :-1], ((0, 0), (1, 0)))
    word = np.cumsum(real & ~continues_real, axis=1) - 1  # [n, step] word index in its row
    selected = np.zeros(real.shape, dtype=bool)
    for row in np.flatnonzero(num_chosen):
        lengths = np.bincount(word[row][real[row]])  # tokens in each word
        taken, total = np.zeros(lengths.size, dtype=bool), 0
        for w in rng.permutation(lengths.size):
            if total + lengths[w] <= num_chosen[row]:
                taken[w], total = True, total + lengths[w]
        selected[row] = real[row] & taken[np.maximum(word[row], 0)]
    return selected
