"""Tokenizers: text -> tokens -> ids, and the ``[CLS] a [SEP] b [SEP]`` input layout.

The layout and truncation are the same for every tokenizer, so they live here once:
:meth:`Tokenizer.pack` builds whole batches with numpy, and :meth:`Tokenizer.encode` is a batch
of one. A vocabulary is saved as BERT's ``vocab.txt`` (line i is the token with id i) next to a
small ``tokenizer_config.json`` naming the tokenizer class.
"""
import itertools
import json
import re
import unicodedata
from pathlib import Path

import numpy as np

from nlp_tutorials.errors import UserError
from nlp_tutorials.files import read_json_object, write_text_atomic

PAD = "[PAD]"
UNK = "[UNK]"
CLS = "[CLS]"
SEP = "[SEP]"
MASK = "[MASK]"
# Their ids are their positions: [PAD] is 0 so zero-padding an id array pads it with [PAD].
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)

# An ordinary word, not a special: it is masked and predicted like any other word.
NUM = "<num>"

VOCAB_NAME = "vocab.txt"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"

_TOKEN_RE = re.compile(r"""
    (?P<number>(?<![^\W_])[0-9]+(?:[.,:/-][0-9]+)*(?![^\W_]))  # 19, 2.5, 1,520.15, 10/21/03
  | (?P<word>[^\W_]+)                                          # letters and digits
  | (?P<other>\S)                                              # punctuation: one char a token
""", re.VERBOSE)


def truncated_lengths(len_a, len_b, budget):
    """Lengths of a pair after longest-first truncation to ``budget`` tokens in total.

    Same result as google-research/bert ``_truncate_seq_pair``: while the pair is too long,
    drop the last token of the longer sequence, of the second one on a tie. So the longer one
    is cut down to the shorter, then both shrink in turn and the first keeps the odd token.
    Works on ints and, element-wise, on numpy arrays.
    """
    len_a = np.asarray(len_a)
    len_b = np.asarray(len_b)
    new_a = np.minimum(len_a, np.maximum((budget + 1) // 2, budget - len_b))
    new_b = np.minimum(len_b, budget - new_a)
    fits = len_a + len_b <= budget
    return np.where(fits, len_a, new_a), np.where(fits, len_b, new_b)


def pad_ragged(sequences, dtype=np.int32):
    """Stack sequences of different lengths into a zero-padded matrix.

    Returns (values [n, longest] with at least one column, lengths [n] int64).
    """
    lengths = np.fromiter(map(len, sequences), dtype=np.int64, count=len(sequences))
    width = max(1, int(lengths.max(initial=0)))
    values = np.zeros((len(sequences), width), dtype=dtype)
    values[np.arange(width) < lengths[:, None]] = np.fromiter(
        itertools.chain.from_iterable(sequences), dtype=dtype, count=int(lengths.sum()))
    return values, lengths


def _check_vocab(vocab, source):
    """Raise UserError unless ``vocab`` is usable: specials first, no blanks, no duplicates."""
    for i, token in enumerate(SPECIAL_TOKENS):
        if i >= len(vocab) or vocab[i] != token:
            found = repr(vocab[i]) if i < len(vocab) else "nothing"
            raise UserError(f"{source}:{i + 1}: expected special token {token} (id {i}), "
                            f"found {found}")
    first_line = {}
    for i, token in enumerate(vocab):
        if not token or token != token.strip() or "\n" in token or "\r" in token:
            raise UserError(f"{source}:{i + 1}: token {token!r} is blank or has spaces around it")
        if token in first_line:
            raise UserError(f"{source}:{i + 1}: duplicate token {token!r} "
                            f"(first at line {first_line[token]})")
        first_line[token] = i + 1


class Tokenizer:
    """A vocabulary plus a way to split text into its tokens.

    Subclasses implement :meth:`tokenize` and, if they have options, :meth:`_config`.
    """

    def __init__(self, vocab):
        vocab = list(vocab)
        _check_vocab(vocab, "vocabulary")
        self._vocab = vocab
        self._ids = {token: i for i, token in enumerate(vocab)}

    def tokenize(self, text: str) -> list[str]:
        raise NotImplementedError

    @property
    def vocab(self) -> list[str]:
        """All tokens; a token's index is its id."""
        return list(self._vocab)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    @property
    def pad_id(self) -> int:
        return self._ids[PAD]

    @property
    def unk_id(self) -> int:
        return self._ids[UNK]

    @property
    def cls_id(self) -> int:
        return self._ids[CLS]

    @property
    def sep_id(self) -> int:
        return self._ids[SEP]

    @property
    def mask_id(self) -> int:
        return self._ids[MASK]

    @property
    def special_ids(self) -> frozenset:
        return frozenset(self._ids[token] for token in SPECIAL_TOKENS)

    def convert_tokens_to_ids(self, tokens) -> list[int]:
        """Ids of ``tokens``; a token outside the vocabulary gets the ``[UNK]`` id."""
        unk = self.unk_id
        return [self._ids.get(token, unk) for token in tokens]

    def convert_ids_to_tokens(self, ids) -> list[str]:
        tokens = []
        for i in ids:
            if not 0 <= int(i) < len(self._vocab):
                raise UserError(f"token id {int(i)} is outside the vocabulary "
                                f"(expected 0..{len(self._vocab) - 1})")
            tokens.append(self._vocab[int(i)])
        return tokens

    def decode(self, ids) -> str:
        """Tokens of ``ids`` joined by spaces, ``[PAD]`` left out (words, not the original text)."""
        pad = self.pad_id
        return " ".join(self.convert_ids_to_tokens(i for i in ids if int(i) != pad))

    def pack(self, ids_a, len_a, ids_b, len_b, max_len: int):
        """Lay out a batch as ``[CLS] a [SEP] b [SEP]`` or ``[CLS] a [SEP]``, truncated, padded.

        Args:
            ids_a: [n, any] first sentences' ids, zero-padded; len_a: [n] their lengths.
            ids_b, len_b: the same for the second sentences, or both None for single sentences.
            max_len: length of every output row. Pairs are truncated longest-first
                (:func:`truncated_lengths`), single sentences keep their first tokens.
        Returns:
            input_ids [n, max_len] int32, padded with the ``[PAD]`` id, and
            token_type_ids [n, max_len] int32: 0 for ``[CLS] a [SEP]`` and padding,
            1 for ``b [SEP]``.
        """
        specials = 2 if ids_b is None else 3
        if not isinstance(max_len, (int, np.integer)) or max_len < specials:
            raise UserError(f"max_len={max_len!r}: expected an integer of at least {specials} "
                            "(room for the special tokens)")
        len_a = np.asarray(len_a)
        if ids_b is None:
            len_a, len_b = np.minimum(len_a, max_len - 2), np.zeros_like(len_a)
        else:
            len_a, len_b = truncated_lengths(len_a, len_b, max_len - 3)
        j = np.arange(max_len)[None, :]  # [1, max_len] output positions
        len_a, len_b = len_a[:, None], len_b[:, None]  # [n, 1]
        from_a = (j >= 1) & (j <= len_a)
        ids = np.where(from_a, _gather(ids_a, j - 1), self.pad_id)
        types = np.zeros(ids.shape, dtype=np.int32)
        if ids_b is not None:
            from_b = (j >= len_a + 2) & (j < len_a + 2 + len_b)
            ids = np.where(from_b, _gather(ids_b, j - len_a - 2), ids)
            ids = np.where(j == len_a + len_b + 2, self.sep_id, ids)
            types[(j >= len_a + 2) & (j <= len_a + len_b + 2)] = 1
        ids = np.where(j == len_a + 1, self.sep_id, ids)
        ids = np.where(j == 0, self.cls_id, ids)
        return ids.astype(np.int32), types

    def encode_tokens(self, tokens, pair_tokens=None, max_len=None):
        """``(input_ids, token_type_ids)`` lists for already tokenized text; see :meth:`pack`.

        Without ``max_len`` nothing is truncated or padded.
        """
        ids_a, len_a = pad_ragged([self.convert_tokens_to_ids(tokens)])
        ids_b = len_b = None
        if pair_tokens is not None:
            ids_b, len_b = pad_ragged([self.convert_tokens_to_ids(pair_tokens)])
        if max_len is None:
            max_len = int(len_a[0]) + (2 if pair_tokens is None else int(len_b[0]) + 3)
        ids, types = self.pack(ids_a, len_a, ids_b, len_b, max_len)
        return ids[0].tolist(), types[0].tolist()

    def encode(self, text: str, pair: str | None = None, max_len: int | None = None):
        """``(input_ids, token_type_ids)`` lists for a sentence or a pair; see :meth:`pack`."""
        pair_tokens = None if pair is None else self.tokenize(pair)
        return self.encode_tokens(self.tokenize(text), pair_tokens, max_len)

    def _config(self) -> dict:
        """Options a subclass needs to be rebuilt by :meth:`_from_config`."""
        return {}

    @classmethod
    def _from_config(cls, vocab, config: dict, source) -> "Tokenizer":
        """Rebuild from a vocabulary and the saved options; ``source`` names the config file."""
        return cls(vocab)

    def save(self, directory) -> Path:
        """Write ``vocab.txt`` and ``tokenizer_config.json`` into ``directory``; return it."""
        directory = Path(directory)
        config = {"tokenizer_class": type(self).__name__, "vocab_size": self.vocab_size,
                  **self._config()}
        write_text_atomic(directory / VOCAB_NAME, "".join(t + "\n" for t in self._vocab))
        write_text_atomic(directory / TOKENIZER_CONFIG_NAME,
                          json.dumps(config, indent=2, sort_keys=True) + "\n")
        return directory


def _gather(values, positions):
    """values[row, positions[row, j]], positions clipped into range (callers mask the rest)."""
    positions = np.broadcast_to(positions, (values.shape[0], positions.shape[1]))
    return np.take_along_axis(values, np.clip(positions, 0, values.shape[1] - 1), axis=1)


class WordTokenizer(Tokenizer):
    """The tutorial's word-level tokenizer.

    Lower-cases, splits on whitespace, makes every punctuation character its own token and
    turns numbers (digits with optional inner ``. , : / -``, e.g. ``19``, ``2.5``,
    ``1,520.15``) into the one word ``<num>``: "He paid $1,520.15." ->
    ``he paid $ <num> .``. Words outside the vocabulary become ``[UNK]``.
    """

    def __init__(self, vocab, lower_case: bool = True):
        super().__init__(vocab)
        self.lower_case = lower_case

    @classmethod
    def build(cls, texts, min_count: int = 1, lower_case: bool = True) -> "WordTokenizer":
        """Vocabulary of the words in ``texts`` seen at least ``min_count`` times.

        Pass training text only, so test words stay unknown. Order: the specials, then words by
        descending count, ties alphabetically, so the same texts always give the same ids.
        """
        if not isinstance(min_count, int) or min_count < 1:
            raise UserError(f"min_count={min_count!r}: expected a positive integer")
        splitter = cls(SPECIAL_TOKENS, lower_case)
        counts = {}
        for text in texts:
            for token in splitter.tokenize(text):
                counts[token] = counts.get(token, 0) + 1
        words = sorted((t for t, c in counts.items() if c >= min_count),
                       key=lambda t: (-counts[t], t))
        return cls(SPECIAL_TOKENS + tuple(words), lower_case)

    def tokenize(self, text: str) -> list[str]:
        # NFC first so an accent typed as a separate combining mark stays inside its word.
        text = unicodedata.normalize("NFC", text)
        if self.lower_case:
            text = text.lower()
        # Control and format characters (e.g. a stray \x12 in MRPC) carry no meaning: dropped.
        return [NUM if number else word or other
                for number, word, other in _TOKEN_RE.findall(text)
                if number or word or unicodedata.category(other)[0] != "C"]

    def _config(self) -> dict:
        return {"lower_case": self.lower_case}

    @classmethod
    def _from_config(cls, vocab, config: dict, source) -> "WordTokenizer":
        lower_case = config.get("lower_case", True)
        if not isinstance(lower_case, bool):
            raise UserError(f"{source}: lower_case={lower_case!r}: expected true or false")
        return cls(vocab, lower_case)


TOKENIZER_CLASSES = {"WordTokenizer": WordTokenizer}


def load_tokenizer(directory) -> Tokenizer:
    """Rebuild the tokenizer saved by :meth:`Tokenizer.save` in ``directory``."""
    directory = Path(directory)
    config_path = directory / TOKENIZER_CONFIG_NAME
    vocab_path = directory / VOCAB_NAME
    for path in (config_path, vocab_path):
        if not path.is_file():
            raise UserError(f"{path}: not found; run `train` first to create the tokenizer")
    config = read_json_object(config_path)
    name = config.get("tokenizer_class")
    if name not in TOKENIZER_CLASSES:
        raise UserError(f"{config_path}: unknown tokenizer_class {name!r}; "
                        f"expected one of {', '.join(TOKENIZER_CLASSES)}")
    try:
        text = vocab_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise UserError(f"{vocab_path}: not a readable UTF-8 file ({err})") from None
    vocab = text.split("\n")
    if vocab[-1] == "":
        vocab.pop()
    vocab = [token.removesuffix("\r") for token in vocab]
    _check_vocab(vocab, vocab_path)
    if config.get("vocab_size", len(vocab)) != len(vocab):
        raise UserError(f"{config_path}: vocab_size is {config['vocab_size']} but {vocab_path} "
                        f"has {len(vocab)} tokens")
    return TOKENIZER_CLASSES[name]._from_config(vocab, config, config_path)
