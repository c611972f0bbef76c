"""Tokenizers: text -> tokens -> ids, and the ``[CLS] a [SEP] b [SEP]`` input layout.

Two tokenizers: :class:`WordTokenizer` (whole words, the tutorial's first one) and
:class:`WordPieceTokenizer` (BERT's sub-words, able to read a real checkpoint's ``vocab.txt``).
The layout and truncation are the same for every tokenizer, so they live here once:
:meth:`Tokenizer.pack` builds whole batches with numpy, and :meth:`Tokenizer.encode` is a batch
of one. A vocabulary is saved as BERT's ``vocab.txt`` (line i is the token with id i) next to a
small ``tokenizer_config.json`` naming the tokenizer class.
"""
import collections
import itertools
import json
import re
import unicodedata
from pathlib import Path

import numpy as np
import tokenizers

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import read_utf8, write_text_atomic
from nlp_tutorials.system.json_files import json_field, read_json_object
from nlp_tutorials.system.values import check_integer
from nlp_tutorials.text.wordpiece_vocab import learn_wordpiece_vocab

PAD = "[PAD]"
UNK = "[UNK]"
CLS = "[CLS]"
SEP = "[SEP]"
MASK = "[MASK]"
# Vocabularies built here put them first, in this order, so [PAD] is 0 and zero-padding an id
# array pads it with [PAD]. A real BERT vocabulary has them elsewhere ([UNK] is 100 there), so
# code asks the tokenizer for their ids (pad_id, ...) instead of assuming these positions.
SPECIAL_TOKENS = (PAD, UNK, CLS, SEP, MASK)
# A WordPiece token starting with this continues the word of the token before it.
CONTINUATION = "##"
# BERT's limit: a longer word is one [UNK] rather than hundreds of pieces.
MAX_WORD_CHARS = 100

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
    """Raise UserError unless ``vocab`` is usable: every special token, no blanks, no duplicates."""
    first_line = {}
    for i, token in enumerate(vocab):
        if not token or token != token.strip() or "\n" in token or "\r" in token:
            raise UserError(f"{source}:{i + 1}: token {token!r} is blank or has spaces around it")
        if token in first_line:
            raise UserError(f"{source}:{i + 1}: duplicate token {token!r} "
                            f"(first at line {first_line[token]})")
        first_line[token] = i + 1
    missing = [token for token in SPECIAL_TOKENS if token not in first_line]
    if missing:
        raise UserError(f"{source}: lacks the special token(s) {' '.join(missing)}; "
                        f"expected all of {' '.join(SPECIAL_TOKENS)}")


def read_vocab(path) -> list[str]:
    """The tokens of a ``vocab.txt`` (line i holds the token with id i), checked."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: vocabulary file not found")
    vocab = read_utf8(path).split("\n")
    if vocab[-1] == "":
        vocab.pop()
    if not vocab:
        raise UserError(f"{path}: vocabulary file is empty; expected one token a line")
    vocab = [token.removesuffix("\r") for token in vocab]
    _check_vocab(vocab, path)
    return vocab


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

    @property
    def continuation_ids(self) -> frozenset:
        """Ids of tokens that continue the word before them (none for whole-word vocabularies)."""
        return frozenset()

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
        return cls(vocab, _lower_case_option(config, "lower_case", source))


class WordPieceTokenizer(Tokenizer):
    """BERT's sub-word tokenizer: basic tokenization, then greedy longest-match WordPiece.

    Basic tokenization, as google-research/bert: drop control characters (and NUL, U+FFFD),
    turn every whitespace character into a space, put spaces around CJK ideographs (Chinese has
    no spaces between words, so each character is a word), lower-case and strip accents when
    ``lower_case`` (é -> e), compose accents (NFC) otherwise, split on whitespace and make every
    punctuation character its own word: "Héllo,世界!" -> ``hello , 世 界 !``.

    WordPiece then cuts each word into vocabulary pieces from the left, always taking the longest
    piece that matches; pieces after the first carry the ``##`` prefix: "unaffable" ->
    ``un ##aff ##able``. A word with no split into known pieces, or longer than 100 characters,
    becomes one ``[UNK]``.

    Both steps are HuggingFace's ``tokenizers`` library (Rust): its ``BertNormalizer``,
    ``BertPreTokenizer`` and ``WordPiece`` model give the reference BERT tokenizer's ids on
    every MRPC sentence (tests/text/test_wordpiece.py), tokenize all 11,602 of them in seconds, and
    a widely used, maintained library is likelier right on rare characters than a copy of ours.
    Special tokens written in the text (e.g. "[MASK]") are ordinary text here, as in
    google-research/bert.
    """

    def __init__(self, vocab, lower_case: bool = True):
        super().__init__(vocab)
        self.lower_case = lower_case
        self._pipeline = _bert_pipeline(
            tokenizers.models.WordPiece(self._ids, unk_token=UNK,
                                        continuing_subword_prefix=CONTINUATION,
                                        max_input_chars_per_word=MAX_WORD_CHARS),
            lower_case)

    @classmethod
    def from_vocab(cls, vocab_file, lower_case: bool = True) -> "WordPieceTokenizer":
        """Read a BERT ``vocab.txt``; ``lower_case`` must match the model (True for uncased)."""
        return cls(read_vocab(vocab_file), lower_case)

    @classmethod
    def train(cls, texts, vocab_size: int, lower_case: bool = True) -> "WordPieceTokenizer":
        """Learn a vocabulary of at most ``vocab_size`` tokens from ``texts``.

        Pass training text only. See
        :func:`~nlp_tutorials.text.wordpiece_vocab.learn_wordpiece_vocab`.
        """
        words = collections.Counter()
        basic = cls(SPECIAL_TOKENS, lower_case)
        for text in texts:
            words.update(basic.basic_tokenize(text))
        return cls(learn_wordpiece_vocab(words, vocab_size, SPECIAL_TOKENS, CONTINUATION),
                   lower_case)

    @property
    def continuation_ids(self) -> frozenset:
        return frozenset(i for i, token in enumerate(self._vocab)
                         if token.startswith(CONTINUATION) and len(token) > len(CONTINUATION))

    def basic_tokenize(self, text: str) -> list[str]:
        """The words of ``text`` before WordPiece splits them (see the class docstring)."""
        normalized = self._pipeline.normalizer.normalize_str(text)
        return [word for word, _ in self._pipeline.pre_tokenizer.pre_tokenize_str(normalized)]

    def tokenize(self, text: str) -> list[str]:
        return self._pipeline.encode(text, add_special_tokens=False).tokens

    def decode(self, ids) -> str:
        """Tokens of ``ids`` with ``[PAD]`` left out and ``##`` pieces glued to their word."""
        return super().decode(ids).replace(" " + CONTINUATION, "")

    def _config(self) -> dict:
        return {"lower_case": self.lower_case}

    @classmethod
    def _from_config(cls, vocab, config: dict, source) -> "WordPieceTokenizer":
        return cls(vocab, _lower_case_option(config, "lower_case", source))


def _bert_pipeline(model, lower_case: bool):
    """A ``tokenizers.Tokenizer`` doing BERT's basic tokenization before ``model``."""
    pipeline = tokenizers.Tokenizer(model)
    # strip_accents=None strips exactly when lower-casing, as BERT. NFC afterwards because the
    # reference composes accents before splitting; with lower_case the accents are gone anyway.
    pipeline.normalizer = tokenizers.normalizers.Sequence([
        tokenizers.normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                              strip_accents=None, lowercase=lower_case),
        tokenizers.normalizers.NFC()])
    pipeline.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    return pipeline


def _lower_case_option(config: dict, key: str, source) -> bool:
    lower_case = config.get(key, True)
    if not isinstance(lower_case, bool):
        raise UserError(f"{source}: {key}={lower_case!r}: expected true or false")
    return lower_case


TOKENIZER_CLASSES = {"WordTokenizer": WordTokenizer, "WordPieceTokenizer": WordPieceTokenizer}
# A HuggingFace model folder names the reference tokenizer, slow or fast: both are WordPiece.
HF_BERT_TOKENIZERS = ("BertTokenizer", "BertTokenizerFast")


def load_tokenizer(directory) -> Tokenizer:
    """The tokenizer of a folder: saved by :meth:`Tokenizer.save`, or a real BERT's.

    A HuggingFace folder (``tokenizer_config.json`` with ``"tokenizer_class": "BertTokenizer"``)
    gives a :class:`WordPieceTokenizer` lower-casing as its ``do_lower_case`` says (default
    true); a folder with only ``vocab.txt`` (e.g. Google's original checkpoints) gives an
    uncased one, the common case: pass through :meth:`WordPieceTokenizer.from_vocab` for cased.
    """
    directory = Path(directory)
    config_path = directory / TOKENIZER_CONFIG_NAME
    vocab_path = directory / VOCAB_NAME
    if not vocab_path.is_file():
        raise UserError(f"{vocab_path}: not found; run `train` first to create the tokenizer")
    if not config_path.is_file():
        return WordPieceTokenizer.from_vocab(vocab_path)
    config = read_json_object(config_path)
    name = json_field(config, "tokenizer_class", str, str(config_path), default=None)
    if name in HF_BERT_TOKENIZERS:
        lower_case = _lower_case_option(config, "do_lower_case", config_path)
        return WordPieceTokenizer.from_vocab(vocab_path, lower_case)
    if name not in TOKENIZER_CLASSES:
        raise UserError(f"{config_path}: unknown tokenizer_class {name!r}; expected one of "
                        f"{', '.join(TOKENIZER_CLASSES)} or {', '.join(HF_BERT_TOKENIZERS)}")
    vocab = read_vocab(vocab_path)
    saved_size = check_integer(config.get("vocab_size", len(vocab)), "vocab_size", config_path,
                               minimum=1)
    if saved_size != len(vocab):
        raise UserError(f"{config_path}: vocab_size is {saved_size} but {vocab_path} "
                        f"has {len(vocab)} tokens")
    return TOKENIZER_CLASSES[name]._from_config(vocab, config, config_path)
