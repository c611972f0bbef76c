"""CoNLL-2003 named entities (Tjong Kim Sang and De Meulder, 2003): :class:`ConllTask`, one tag per
word, the token-tagging task of the BERT paper (section 5.3).

The files hold one word a line in space-separated columns, ``word POS chunk NER``, a blank line
between sentences and ``-DOCSTART-`` lines between documents::

    -DOCSTART- -X- O O

    Ada NNP I-NP I-PER
    Lovelace NNP I-NP I-PER
    visited VBD I-VP O
    Turin NNP I-NP I-LOC
    . . O O

Only the first column (the word) and the last (the entity tag) are read. The tags of the
original files are IOB1 (:mod:`nlp_tutorials.tasks.entities`); reading converts them to IOB2,
where ``B-`` starts every entity, so the model learns one way to start an entity whatever the
file's convention. The entities are the same either way, and so are the scores.

BERT's encoding: each word is cut into word pieces on its own, and its tag is learnt and
predicted on its first piece only; the other pieces, ``[CLS]``, ``[SEP]`` and padding are left
out of the loss. A sentence longer than the model's window is cut into overlapping windows, and
each word takes its tag from the window where it has the most context on both sides.
"""
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import numbered_lines
import nlp_tutorials.tasks.entities as entities
from nlp_tutorials.tasks.base import Task, example_lines
from nlp_tutorials.tasks.shapes import TOKEN
from nlp_tutorials.tasks.windows import window_starts

DOCSTART = "-DOCSTART-"

# CoNLL separates columns with single spaces; some copies use tabs.
_COLUMN_SEPARATOR = re.compile(r"[ \t]+")


@dataclass(frozen=True)
class Sentence:
    """One sentence: its ``words``, their IOB2 ``tags`` (empty when unknown, as for ``predict``'s
    input) and ``line``, where it starts in its file (1-based)."""
    words: tuple[str, ...]
    tags: tuple[str, ...]
    line: int


def read_conll(path, columns: int | None = 4, labels=()) -> list[Sentence]:
    """The sentences of a CoNLL-format file, their tags converted to IOB2.

    Args:
        path: the file.
        columns: columns on every word's line (4 for CoNLL-2003: word, POS, chunk, tag); None
            accepts any count of at least 2, the same on every line as on the first (a user's
            own file: the word first, the tag last).
        labels: the tags allowed (those learnt from training), or () for any entity tag.
    A line with the wrong number of columns, a tag that is not ``O``, ``B-TYPE`` or
    ``I-TYPE``, or one outside ``labels`` is a UserError naming ``path:line``.
    """
    path = Path(path)
    sentences, words, tags = [], [], []
    start = expected = None  # the open sentence's first line; the columns a line must have
    for number, line in numbered_lines(path):
        fields = _COLUMN_SEPARATOR.split(line.strip(" \t")) if line.strip(" \t") else []
        if not fields or fields[0] == DOCSTART:
            if words:
                sentences.append(Sentence(tuple(words), tuple(entities.to_iob2(tags)), start))
                words, tags = [], []
            continue
        if columns is None and len(fields) < 2:
            raise UserError(f"{path}:{number}: expected at least 2 space-separated columns "
                            f"(the word first, its tag last), found 1")
        expected = expected or columns or len(fields)
        if len(fields) != expected:
            raise UserError(f"{path}:{number}: expected {_columns_wanted(expected, columns)}, "
                            f"found {len(fields)}")
        _check_tag(fields[-1], labels, f"{path}:{number}")
        start = start if words else number
        words.append(fields[0])
        tags.append(fields[-1])
    if words:
        sentences.append(Sentence(tuple(words), tuple(entities.to_iob2(tags)), start))
    return sentences


def _columns_wanted(expected: int, columns: int | None) -> str:
    """What a line with the wrong number of columns was expected to hold, in words."""
    if columns == 4:
        return "4 space-separated columns (word, POS tag, chunk tag, entity tag)"
    if columns is None:
        return (f"{expected} space-separated columns as on the file's first word line "
                f"(the word first, its tag last)")
    return f"{columns} space-separated columns (the word first, its tag last)"


def _check_tag(tag: str, labels, where: str) -> None:
    """UserError unless ``tag`` is an entity tag, and one of ``labels`` when they are set."""
    if not entities.is_entity_tag(tag):
        raise UserError(f"{where}: tag {tag[:50]!r} in the last column is not an entity tag; "
                        f"expected O, B-TYPE or I-TYPE")
    if labels and tag not in labels:
        raise UserError(f"{where}: tag {tag!r} never occurs in the training file; expected one "
                        f"of {', '.join(labels)}")


class ConllTask(Task):
    """Named-entity recognition on CoNLL-2003: a sentence in, a tag per word out.

    Files in ``--data``: ``eng.train``, ``eng.testa`` (dev) and ``eng.testb`` (test) as the
    shared task distributed them, or ``train.txt``, ``valid.txt`` and ``test.txt`` as other
    copies name them. The tags are learnt from the train file: ``O``, then ``B-`` and ``I-`` of
    each entity type it holds (IOB2; IOB1 files are converted on reading). Scored as conlleval
    scores: entity-level F1 (micro), precision and recall, and each per type (``f1_LOC`` ...).

    The same class reads a user's own tagging files (``columns=None``): two or more columns, the
    word first, its tag last, any entity types.

    Examples are :class:`Sentence`; a prediction is a list of IOB2 tags, one per word.

    Args:
        columns: columns on each word's line: 4 for CoNLL-2003, None for any count of at least
            2 (the same throughout a file). Other arguments: see :class:`Task`.
    """

    name = "conll2003"
    title = "CoNLL-2003"
    shape = TOKEN
    labels = ()
    file_names = {"train": ("eng.train", "train.txt"), "dev": ("eng.testa", "valid.txt"),
                  "test": ("eng.testb", "test.txt")}
    default_max_len = 128
    metrics = (("f1", "F1"), ("precision", "precision"), ("recall", "recall"))
    tags_first_pieces = True

    def __init__(self, *args, columns: int | None = 4, **kwargs):
        super().__init__(*args, **kwargs)
        self.columns = columns

    def settings(self) -> dict:
        return {**super().settings(), "columns": self.columns}

    # Reading.

    def read_file(self, path) -> list[Sentence]:
        return read_conll(path, self.columns, self.labels)

    def learn_labels(self, train) -> list[str]:
        """``O``, then ``B-TYPE`` and ``I-TYPE`` for each type in train, types sorted by name
        (both prefixes, so a dev entity longer than any of its type in train can be tagged)."""
        types = sorted({entities.split_tag(tag)[1] for s in train for tag in s.tags} - {""})
        return [entities.OUTSIDE] + [f"{prefix}-{entity_type}" for entity_type in types
                                     for prefix in (entities.BEGIN, entities.INSIDE)]

    def summarize(self, sentences) -> str:
        """``14,041 sentences, 23,499 entities (LOC 7,140, MISC 3,438, ORG 6,321, PER 6,600)``,
        entities counted as conlleval counts them."""
        counts = entities.count_entities(s.tags for s in sentences)
        by_type = ", ".join(f"{entity_type} {count:,}" for entity_type, count in counts.items())
        return (f"{_counted(len(sentences), 'sentence')}, "
                f"{_counted(sum(counts.values()), 'entity', 'entities')}"
                + (f" ({by_type})" if by_type else ""))

    def texts(self, examples) -> list[str]:
        return [" ".join(s.words) for s in examples]

    def longest(self, tokenizer, examples) -> int:
        """[CLS], the pieces of the longest sentence (a word with none counts one [UNK]), [SEP]."""
        return max((sum(len(word_ids(tokenizer, w)) for w in s.words) + 2 for s in examples),
                   default=2)

    # Encoding.

    def window_step(self, max_len: int) -> int:
        """Pieces between the starts of two windows of one sentence: ``stride``, but at most
        half a window, so that neighbouring windows always share half their pieces and every
        word has a window where it sits away from the cut (BERT's max_len 128 with the default
        stride of 128 gives windows of 126 pieces, 63 apart)."""
        return max(1, min(self.stride, (max_len - 2) // 2))

    def encode(self, tokenizer, examples, max_len: int) -> dict:
        """``[CLS] pieces [SEP]`` per window, each word's tag on its first piece.

        Returns numpy arrays, one row per window (``n`` in all):
            ``input_ids``, ``token_type_ids`` (zeros) [n, max_len] int32, padded with
            ``tokenizer.pad_id``; ``tag_ids`` [n, max_len] int32 (an index into ``labels`` on a
            word's first piece, else 0) and ``tag_weights`` [n, max_len] float32 (1.0 on first
            pieces, 0.0 elsewhere). For decoding only: ``window_example`` [n] int32, the
            sentence of each window; ``word_index`` [n, max_len] int32, the word a first piece
            starts (-1 elsewhere); ``word_context`` [n, max_len] int32, the pieces of the
            window on a first piece's shorter side, -1 elsewhere.
        """
        if max_len < 3:
            raise UserError(f"max_len={max_len}: expected at least 3 (room for [CLS], a word "
                            f"piece and [SEP])")
        width, step = max_len - 2, self.window_step(max_len)
        windows = [window for index, sentence in enumerate(examples)
                   for window in self._windows(tokenizer, index, sentence, width, step)]
        arrays = {"input_ids": np.full((len(windows), max_len), tokenizer.pad_id, np.int32),
                  "token_type_ids": np.zeros((len(windows), max_len), np.int32),
                  "tag_ids": np.zeros((len(windows), max_len), np.int32),
                  "tag_weights": np.zeros((len(windows), max_len), np.float32),
                  "window_example": np.zeros(len(windows), np.int32),
                  "word_index": np.full((len(windows), max_len), -1, np.int32),
                  "word_context": np.full((len(windows), max_len), -1, np.int32)}
        for row, (example, ids, words, tag_ids, context) in enumerate(windows):
            arrays["window_example"][row] = example
            arrays["input_ids"][row, :len(ids) + 2] = [tokenizer.cls_id, *ids, tokenizer.sep_id]
            real = slice(1, len(ids) + 1)  # the window's pieces, after [CLS]
            arrays["word_index"][row, real] = words
            arrays["tag_ids"][row, real] = tag_ids
            arrays["tag_weights"][row, real] = words >= 0
            arrays["word_context"][row, real] = np.where(words >= 0, context, -1)
        return arrays

    def _windows(self, tokenizer, example: int, sentence: Sentence, width: int, step: int):
        """Yields ``(example, ids, words, tag_ids, context)`` for each window of ``sentence``:
        its piece ids [pieces], the word each first piece starts (else -1) [pieces], the tag id
        there (else 0) [pieces], and each piece's context as :meth:`encode` describes it."""
        tag_index = {tag: index for index, tag in enumerate(self.labels)}
        ids, words, tag_ids = [], [], []
        for word, text in enumerate(sentence.words):
            pieces = word_ids(tokenizer, text)
            ids += pieces
            words += [word] + [-1] * (len(pieces) - 1)
            tag = tag_index[sentence.tags[word]] if sentence.tags else 0
            tag_ids += [tag] + [0] * (len(pieces) - 1)
        ids, words, tag_ids = (np.array(values, np.int32) for values in (ids, words, tag_ids))
        for start in window_starts(len(ids), width, step):
            stop = min(start + width, len(ids))
            offsets = np.arange(stop - start)  # [pieces in the window]
            yield (example, ids[start:stop], words[start:stop], tag_ids[start:stop],
                   np.minimum(offsets, stop - start - 1 - offsets))

    # Decoding and scores.

    def predictions(self, outputs, encoded: dict, examples) -> list[list[str]]:
        """Each sentence's tags, one per word, from logits [n windows, max_len, labels].

        A word seen in several windows takes its tag from the one where it has the most
        context: where the fewer of the pieces before and after it in the window is the
        largest (the earlier window on a tie), as BERT's SQuAD code picks a piece's window.
        Counting a sentence's own edge as a cut changes no choice: the first window always
        has the most pieces before a word, the last the most after it. The tag is the arg-max
        of the word's first piece's logits.
        The tags are then written as IOB2 (a stray ``I-`` that starts an entity becomes
        ``B-``), which names the same entities as the arg-max does.
        """
        logits = np.asarray(outputs)  # [n, max_len, labels]
        rows, positions = np.nonzero(encoded["word_index"] >= 0)  # every first piece
        sentence = encoded["window_example"][rows]
        word = encoded["word_index"][rows, positions]
        context = encoded["word_context"][rows, positions]
        # By sentence, word, then most context first; lexsort is stable, so ties keep the
        # earlier window. Each (sentence, word)'s first entry is the one to keep.
        order = np.lexsort((-context, word, sentence))
        sentence, word = sentence[order], word[order]
        keep = np.ones(len(order), bool)
        keep[1:] = (sentence[1:] != sentence[:-1]) | (word[1:] != word[:-1])
        chosen = order[keep]
        tag_ids = logits[rows[chosen], positions[chosen]].argmax(axis=-1)  # [words in all]
        words_per_sentence = np.bincount(sentence[keep], minlength=len(examples))
        if words_per_sentence.tolist() != [len(s.words) for s in examples]:
            raise ValueError("encoded arrays do not match the examples given")
        return [entities.to_iob2([self.labels[i] for i in ids])
                for ids in np.split(tag_ids, np.cumsum(words_per_sentence)[:-1])]

    def score(self, examples, predictions) -> dict:
        """Entity-level ``f1``, ``precision``, ``recall`` (micro), per type (``f1_LOC`` ...) and
        word ``accuracy``: see :func:`nlp_tutorials.tasks.entities.score`."""
        return entities.score([s.tags for s in examples], predictions)

    # Prediction from text.

    def parse_lines(self, lines, source: str):
        """A :class:`Sentence` (no tags) per non-blank line, its words split on whitespace;
        lines that hold no sentence at all raise UserError naming ``source``."""
        for number, line in example_lines(
                lines, source, "no sentences found (only blank lines); expected one sentence a "
                "line, its words separated by spaces"):
            yield Sentence(tuple(line.split()), (), number)

    def shown_answer(self, example, tags, row=None) -> dict:
        """The predicted tags under the shown row's tokens: each word's tag under its first
        piece (``word_index``), "" under the other tokens."""
        return {"tags": [tags[word] if word >= 0 else "" for word in row["word_index"]]}

    def format_prediction(self, example, prediction) -> str:
        """``word<TAB>tag`` a line, each ending in a newline: printed, a blank line follows."""
        return "".join(f"{word}\t{tag}\n" for word, tag in zip(example.words, prediction))

    def prediction_file(self, examples, predictions) -> tuple[str, str]:
        """(``.txt``, conlleval's input): ``word gold predicted`` a line, a blank line after each
        sentence, so ``conlleval < predictions_test.txt`` scores it."""
        lines = []
        for sentence, predicted in zip(examples, predictions):
            lines += [f"{word} {gold} {tag}"
                      for word, gold, tag in zip(sentence.words, sentence.tags, predicted)]
            lines.append("")
        return ".txt", "\n".join(lines) + "\n"


def _counted(count: int, one: str, many: str = "") -> str:
    """``"1 sentence"``, ``"14,041 sentences"``."""
    return f"{count:,} {one if count == 1 else many or one + 's'}"


def word_ids(tokenizer, word: str) -> list[int]:
    """The piece ids of one word tokenized on its own; ``[UNK]`` for a word that gives none
    (a control character, say), so every word has a first piece to carry its tag."""
    return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word)) or [tokenizer.unk_id]
