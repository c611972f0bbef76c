"""MRPC: reading the corpus, encoding pairs, and BERT's pre-training examples (MLM + NSP).

Everything here is numpy; TensorFlow is imported only by :meth:`PretrainingData.dataset` and
:func:`trim_padding` (batch preparation inside a ``tf.data`` pipeline).
"""
import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlp_tutorials.errors import UserError
from nlp_tutorials.tokenization import pad_ragged

DEFAULT_DATA_DIR = Path(__file__).resolve().parent.parent / "data" / "MRPC"
SPLIT_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}
HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")

NSP_MODES = ("random", "paraphrase")
IS_NEXT, NOT_NEXT = 0, 1  # BERT's and HuggingFace's next-sentence labels


@dataclass(frozen=True)
class Pair:
    """One MRPC line: label 1 if s2 paraphrases s1, else 0."""
    label: int
    id1: str
    id2: str
    s1: str
    s2: str


def load_mrpc(split: str, data_dir=None) -> list[Pair]:
    """Read the "train" or "test" pairs from ``data_dir`` (default: the repo's data/MRPC).

    The files are tab-separated with literal ``"`` inside sentences, so lines are split on tabs
    by hand: a CSV reader would treat an unclosed quote as the start of a multi-line field.
    """
    if split not in SPLIT_FILES:
        raise UserError(f"unknown MRPC split {split!r}; expected one of {', '.join(SPLIT_FILES)}")
    data_dir = Path(DEFAULT_DATA_DIR if data_dir is None else data_dir)
    path = data_dir / SPLIT_FILES[split]
    if not data_dir.is_dir():
        raise UserError(f"{data_dir}: MRPC data folder not found; expected {path} in it")
    if not path.is_file():
        raise UserError(f"{path}: MRPC file not found")
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    # Bytes are split before decoding so a bad byte can be reported with its line number.
    lines = raw.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UserError(f"{path}: file is empty; expected the MRPC header {_tabbed(HEADER)}")
    pairs = []
    for number, line in enumerate(lines, start=1):
        try:
            fields = line.removesuffix(b"\r").decode("utf-8").split("\t")
        except UnicodeDecodeError as err:
            raise UserError(f"{path}:{number}: not valid UTF-8 "
                            f"(byte {line[err.start]:#04x} at column {err.start + 1})") from None
        if number == 1:
            if tuple(fields) != HEADER:
                raise UserError(f"{path}:1: expected the header {_tabbed(HEADER)}, "
                                f"found {_tabbed(fields)[:200]}")
            continue
        if len(fields) != len(HEADER):
            raise UserError(f"{path}:{number}: expected {len(HEADER)} tab-separated columns "
                            f"({', '.join(HEADER)}), found {len(fields)}")
        if fields[0] not in ("0", "1"):
            raise UserError(f"{path}:{number}: Quality must be 0 or 1, found {fields[0][:50]!r}")
        pairs.append(Pair(int(fields[0]), *fields[1:]))
    if not pairs:
        raise UserError(f"{path}: has a header but no sentence pairs")
    return pairs


def _tabbed(fields) -> str:
    return repr("\t".join(fields))


def pair_tokens(tokenizer, pairs) -> list[tuple[list[str], list[str]]]:
    """(s1 tokens, s2 tokens) of every pair."""
    return [(tokenizer.tokenize(p.s1), tokenizer.tokenize(p.s2)) for p in pairs]


def longest_pair_length(tokenizer, pairs) -> int:
    """Tokens in the longest ``[CLS] s1 [SEP] s2 [SEP]``: a max_len that truncates nothing."""
    if not pairs:
        raise UserError("no sentence pairs to measure")
    return _longest_pair_length(pair_tokens(tokenizer, pairs))


def _longest_pair_length(tokens) -> int:
    return max(len(a) + len(b) for a, b in tokens) + 3


def encode_pair(tokenizer, s1_tokens, s2_tokens, max_len: int):
    """``(input_ids, token_type_ids)`` lists of length ``max_len``.

    Layout ``[CLS] s1 [SEP] s2 [SEP]`` with segment 0 for ``[CLS] s1 [SEP]`` and 1 for
    ``s2 [SEP]``, or ``[CLS] s1 [SEP]`` when ``s2_tokens`` is None; padded with the ``[PAD]``
    id, segment 0. A pair that does not fit is truncated longest-first as google-research/bert:
    drop the last token of the longer sentence (the second on a tie) until it fits.
    """
    return tokenizer.encode_tokens(s1_tokens, s2_tokens, max_len)


def encode_pairs(tokenizer, pairs, max_len: int) -> dict:
    """Encode MRPC pairs for classification, as :func:`encode_pair` does one.

    Returns numpy int32 arrays: ``input_ids`` [n, max_len], ``token_type_ids`` [n, max_len],
    ``labels`` [n].
    """
    ids_a, len_a, ids_b, len_b = _id_matrices(tokenizer, pair_tokens(tokenizer, pairs))
    input_ids, token_type_ids = tokenizer.pack(ids_a, len_a, ids_b, len_b, max_len)
    labels = np.array([p.label for p in pairs], dtype=np.int32)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "labels": labels}


def _id_matrices(tokenizer, tokens):
    """Zero-padded ids and lengths of the first and second sentences: ids_a, len_a, ids_b, len_b."""
    ids_a, len_a = pad_ragged([tokenizer.convert_tokens_to_ids(a) for a, _ in tokens])
    ids_b, len_b = pad_ragged([tokenizer.convert_tokens_to_ids(b) for _, b in tokens])
    return ids_a, len_a, ids_b, len_b


def _num_to_mask(num_real, mask_prob):
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
    return int(_num_to_mask(max(1, max_len - 2), mask_prob))


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
    num_chosen = _num_to_mask(real.sum(axis=1), mask_prob)  # [n]
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


def _check_nsp_mode(mode):
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
    _check_nsp_mode(mode)
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


def nsp_examples(sentence_pairs_tokens, mode: str, rng, labels=None):
    """Next-sentence examples from (first, second) sentence pairs; see :func:`nsp_pairing`.

    Returns (first sentences, second sentences, nsp_labels [n] int32).
    """
    second, nsp_labels = nsp_pairing(len(sentence_pairs_tokens), mode, rng, labels)
    first = [a for a, _ in sentence_pairs_tokens]
    return first, [sentence_pairs_tokens[i][1] for i in second], nsp_labels


class PretrainingData:
    """BERT pre-training examples (masked LM + next sentence) from MRPC pairs, epoch by epoch.

    Sentences are tokenized once here; each epoch then pairs, packs, masks and shuffles them
    with numpy alone, fresh every epoch but reproducible: epoch k draws from a generator seeded
    with (seed, k). ``whole_word_mask`` masks all pieces of a chosen word together (see
    :func:`mask_tokens`).
    """

    def __init__(self, tokenizer, pairs, max_len=None, nsp_mode="random", max_predictions=None,
                 seed=0, mask_prob=0.15, whole_word_mask=False):
        if not pairs:
            raise UserError("no sentence pairs to pre-train on")
        _check_nsp_mode(nsp_mode)
        if not isinstance(seed, int) or seed < 0:
            raise UserError(f"seed={seed!r}: expected a non-negative integer")
        if not 0.0 < mask_prob <= 1.0:
            raise UserError(f"mask_prob={mask_prob!r}: expected a probability in (0, 1]")
        self.tokenizer = tokenizer
        self.nsp_mode = nsp_mode
        self.seed = seed
        self.mask_prob = mask_prob
        # Whole words need the tokenizer's ## pieces; a word-level one has none (words = tokens).
        self._continuation_ids = tokenizer.continuation_ids if whole_word_mask else None
        tokens = pair_tokens(tokenizer, pairs)
        self.max_len = _longest_pair_length(tokens) if max_len is None else max_len
        if not isinstance(self.max_len, int) or self.max_len < 3:
            raise UserError(f"max_len={self.max_len!r}: expected an integer of at least 3")
        self.max_predictions = (default_max_predictions(self.max_len, mask_prob)
                                if max_predictions is None else max_predictions)
        if not isinstance(self.max_predictions, int) or self.max_predictions < 1:
            raise UserError(
                f"max_predictions={self.max_predictions!r}: expected a positive integer")
        self._ids_a, self._len_a, self._ids_b, self._len_b = _id_matrices(tokenizer, tokens)
        self._labels = np.array([p.label for p in pairs], dtype=np.int32)
        # Fail now rather than mid-training: the most real tokens any pairing can give.
        most = min(self.max_len - 3, int(self._len_a.max() + self._len_b.max()))
        needed = int(_num_to_mask(most, mask_prob))
        if needed > self.max_predictions:
            raise UserError(f"max_predictions={self.max_predictions} is too small for max_len="
                            f"{self.max_len}; expected at least {needed}")

    @property
    def num_examples(self) -> int:
        return len(self._labels)

    def steps_per_epoch(self, batch_size: int) -> int:
        """Full batches in one epoch (the last partial batch is dropped)."""
        if not isinstance(batch_size, int) or not 1 <= batch_size <= self.num_examples:
            raise UserError(f"batch_size={batch_size!r}: expected an integer from 1 to "
                            f"{self.num_examples} (the number of examples)")
        return self.num_examples // batch_size

    def epoch(self, rng_or_epoch_index, masked: bool = True, shuffle: bool = True) -> dict:
        """One epoch of examples, as numpy arrays with n = number of pairs.

        Args:
            rng_or_epoch_index: an epoch number k (uses the generator seeded with (seed, k)) or a
                numpy.random.Generator.
            masked: apply BERT's masking; False gives clean ids for next-token (GPT) training.
            shuffle: put the examples in a random order.
        Returns:
            ``input_ids`` [n, max_len] int32, ``token_type_ids`` [n, max_len] int32,
            ``nsp_labels`` [n] int32 (see :func:`nsp_pairing`) and, when masked, ``mlm_positions``,
            ``mlm_ids`` [n, max_predictions] int32 and ``mlm_weights`` [n, max_predictions]
            float32 (see :func:`mask_tokens`).
        """
        rng = rng_or_epoch_index
        if not isinstance(rng, np.random.Generator):
            if int(rng) < 0:
                raise UserError(f"epoch index {rng} is negative")
            rng = np.random.default_rng([self.seed, int(rng)])
        second, nsp_labels = nsp_pairing(self.num_examples, self.nsp_mode, rng, self._labels)
        order = rng.permutation(self.num_examples) if shuffle else np.arange(self.num_examples)
        second = second[order]
        input_ids, token_type_ids = self.tokenizer.pack(
            self._ids_a[order], self._len_a[order], self._ids_b[second], self._len_b[second],
            self.max_len)
        examples = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                    "nsp_labels": nsp_labels[order]}
        if masked:
            examples.update(mask_with_tokenizer(
                self.tokenizer, input_ids, rng, self.max_predictions, self.mask_prob,
                self._continuation_ids))
        return examples

    def dataset(self, batch_size: int, masked: bool = True, repeat: bool = True):
        """A tf.data.Dataset of dict batches of :meth:`epoch` arrays, batch_size rows each.

        Shapes are static ([batch_size, max_len], ...); each epoch's last partial batch is
        dropped. ``repeat=True`` runs epoch 0, 1, 2, ... forever; ``repeat=False`` yields one
        epoch per pass, and each new pass (e.g. each Keras epoch) moves on to the next epoch
        number, so masking is never repeated. Two datasets with the same seed are identical.
        """
        import tensorflow as tf

        steps = self.steps_per_epoch(batch_size)
        spec = {"input_ids": tf.TensorSpec((batch_size, self.max_len), tf.int32),
                "token_type_ids": tf.TensorSpec((batch_size, self.max_len), tf.int32),
                "nsp_labels": tf.TensorSpec((batch_size,), tf.int32)}
        if masked:
            predictions = (batch_size, self.max_predictions)
            spec.update(mlm_positions=tf.TensorSpec(predictions, tf.int32),
                        mlm_ids=tf.TensorSpec(predictions, tf.int32),
                        mlm_weights=tf.TensorSpec(predictions, tf.float32))
        next_epoch = itertools.count()

        def batches():
            while True:
                examples = self.epoch(next(next_epoch), masked)
                for start in range(0, steps * batch_size, batch_size):
                    yield {key: value[start:start + batch_size] for key, value in examples.items()}
                if not repeat:
                    return

        return tf.data.Dataset.from_generator(batches, output_signature=spec).prefetch(
            tf.data.AUTOTUNE)


def trim_padding(batch, multiple: int = 1):
    """Cut the columns that are padding in every row: [batch, max_len] -> [batch, length].

    ``length`` is the longest row rounded up to a multiple of ``multiple`` (at most max_len).
    MRPC pairs average 49 word tokens against a longest of 100, so most of a fixed-length batch
    is padding; attention and dense layers cost in proportion to length. Meant for
    ``tf.data.Dataset.map``; ``input_ids`` and ``token_type_ids`` are cut, the rest kept.
    """
    import tensorflow as tf

    lengths = tf.reduce_sum(tf.cast(batch["input_ids"] != 0, tf.int32), axis=1)  # [PAD] is 0
    longest = tf.minimum(-(-tf.reduce_max(lengths) // multiple) * multiple,
                         tf.shape(batch["input_ids"])[1])
    return {name: value[:, :longest] if name in ("input_ids", "token_type_ids") else value
            for name, value in batch.items()}
