"""Pre-training on your own text: google-research/bert's corpus format, read as a stream.

The format: UTF-8 text, one sentence per line, a blank line between documents, in one file or
many (``--corpus 'books/*.txt'``; the end of a file also ends a document). Pre-training pairs are
made as google-research/bert's ``create_pretraining_data.py`` makes them
(:func:`document_pairs`): consecutive sentences of one document fill a first segment A and a
second segment B up to a target length; B is the real continuation of A (IsNext) or, half the
time, a stretch of another document (NotNext); with probability 0.1 the target is a random
shorter length, so the model also sees short sequences.

Memory stays bounded whatever the corpus size: files are read line by line, and at most
:data:`DOCUMENT_BUFFER` documents are held at once (:func:`pretraining_pairs`): they are the
pool a document is drawn from (a local shuffle of document order) and the pool NotNext segments
come from. A document longer than :data:`DOCUMENT_PIECE_LINES` lines is cut into pieces of that
many lines, each then treated as a document, so one endless document cannot fill the memory.

A tenth of the documents is held out (:func:`held_out_document`): a ``train --corpus`` run
never trains on them and is scored on them once trained
(:class:`~nlp_tutorials.sources.corpus_text.CorpusHeldOut`).

:class:`~nlp_tutorials.sources.corpus_text.CorpusText` is the corpus as a run's text
(``train --corpus``). Everything here is
plain Python and numpy (TensorFlow only holds the finished batches, in
:meth:`CorpusData.batches`); :mod:`nlp_tutorials.sources.shards` writes the same pairs to TFRecord
files once, so training need not tokenize again.
"""
import dataclasses
import glob
import itertools
import random
import re
import zlib
from pathlib import Path

import numpy as np

from nlp_tutorials.text.nsp import IS_NEXT, NOT_NEXT
from nlp_tutorials.text.masking import default_max_predictions, mask_with_tokenizer
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import decode_line, open_regular
from nlp_tutorials.text.packing import trim_padding
from nlp_tutorials.text.tokenization import pad_ragged

DEFAULT_MAX_LEN = 128  # google-research/bert's max_seq_length for most of pre-training
MIN_MAX_LEN = 8  # room for two segments and three special tokens
SHORT_SEQUENCE_PROB = 0.1
READ_BYTES = 1 << 20  # read a megabyte at a time
LINE_END = re.compile(rb"\r\n|\r|\n")
DOCUMENT_BUFFER = 1000
DOCUMENT_PIECE_LINES = 1000
PAIR_SHUFFLE_BUFFER = 10_000
# One document in this many is held out: a tenth, as fine-tuning holds out a tenth of train.
HELD_OUT_EVERY = 10
# Which documents a CorpusData reads: all of them, those a run trains on, or those held out.
EVERY, TRAINED, HELD_OUT = "every", "trained", "held out"


def corpus_files(pattern: str) -> list[Path]:
    """The files ``pattern`` names, sorted: the file itself when one has that name, else the
    files the glob matches (``**`` reaches into sub-folders).

    A name is tried as a file first because glob characters are legal in file names: read as a
    glob, ``corpus[1].txt`` would match ``corpus1.txt`` and never itself.
    """
    if Path(pattern).is_file():
        return [Path(pattern)]
    if Path(pattern).is_dir():
        raise UserError(f"--corpus {pattern}: a folder; expected a text file or a glob such as "
                        f"'{Path(pattern) / '*.txt'}'")
    paths = sorted(Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file())
    if not paths:
        raise UserError(f"--corpus {pattern}: no file matches; expected a text file or a glob "
                        f"such as 'corpus/*.txt'")
    return paths


def read_lines(path: Path):
    """Yield (line number, text without surrounding whitespace) for each line of ``path``.

    Lines are read as bytes, a megabyte at a time, and decoded alone, so a bad byte is reported
    with its file and line, and no more than a megabyte and one line are ever in memory. A line
    ends with ``\\n``, ``\\r\\n`` or a lone ``\\r`` (old Mac files), as Python's own text
    files read them.
    """
    try:
        with open_regular(path) as handle:
            for number, raw in enumerate(_raw_lines(handle), start=1):
                text = decode_line(raw, path, number, expected="UTF-8 text")
                yield number, text.removeprefix("\ufeff").strip()
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None


def _raw_lines(handle):
    """The bytes of each line of the binary file ``handle``, without its line end."""
    rest = b""
    for block in iter(lambda: handle.read(READ_BYTES), b""):
        text = rest + block
        whole = len(text) - text.endswith(b"\r")  # a last \r may be half of a \r\n
        *lines, rest = LINE_END.split(text[:whole])
        rest += text[whole:]
        yield from lines
    if rest:
        lines = LINE_END.split(rest)
        yield from lines[:-1] if lines[-1] == b"" else lines


@dataclasses.dataclass
class CorpusCounts:
    """What one pass over the corpus met; ``split_lines`` counts lines longer than a segment."""
    documents: int = 0
    empty_documents: int = 0
    empty_files: int = 0
    split_lines: int = 0

    def summary(self) -> str:
        return (f"{self.documents} documents; skipped {self.empty_documents} empty documents "
                f"and {self.empty_files} empty files; {self.split_lines} lines longer than a "
                f"segment split into pieces")


def read_documents(paths, counts: CorpusCounts):
    """Yield each document as its list of lines (strings), empty lines and documents skipped.

    A run of several blank lines holds empty documents: they are counted in ``counts``, as are
    files with no text at all.
    """
    for path in paths:
        document, text_lines, previous_blank = [], 0, True
        for _, text in read_lines(path):
            if text:
                document.append(text)
                text_lines += 1
                if len(document) == DOCUMENT_PIECE_LINES:
                    yield document
                    document = []
            elif document:
                yield document
                document = []
            elif previous_blank and text_lines:  # a second blank line in a row
                counts.empty_documents += 1
            previous_blank = not text
        if document:
            yield document
        if not text_lines:
            counts.empty_files += 1


def held_out_document(lines) -> bool:
    """Whether a document (its lines) is held out of training: when the CRC-32 of its text is
    a multiple of :data:`HELD_OUT_EVERY`. Decided by the text alone, so the same documents are
    held out whatever the files' order, every epoch and every run; about a tenth of them."""
    return zlib.crc32("\n".join(lines).encode("utf-8")) % HELD_OUT_EVERY == 0


def documents_of_part(documents, part: str):
    """The documents of ``part``: :data:`EVERY` one, the :data:`TRAINED` ones or the
    :data:`HELD_OUT` ones."""
    if part == EVERY:
        return documents
    return (lines for lines in documents if held_out_document(lines) == (part == HELD_OUT))


def tokenizer_sample(paths, megabytes: int):
    """The corpus' lines up to ``megabytes`` MB (in file order): what a tokenizer learns from."""
    budget = megabytes * 1_000_000
    for path in paths:
        for _, text in read_lines(path):
            if budget <= 0:
                return
            budget -= len(text.encode("utf-8")) + 1
            if text:
                yield text


def learn_tokenizer(kind: str, vocab_size: int, paths, sample_mb: int):
    """A ``kind`` ("word" or "wordpiece") tokenizer learned from the corpus' first
    ``sample_mb`` MB, so learning it costs the same whatever the corpus size.

    A WordPiece vocabulary has at most ``vocab_size`` tokens; so has a word one here (the
    commonest words): a large corpus has far more distinct words than an embedding can hold.
    """
    from nlp_tutorials.text.tokenization import SPECIAL_TOKENS, WordPieceTokenizer, WordTokenizer

    if kind == "wordpiece":
        return WordPieceTokenizer.train(tokenizer_sample(paths, sample_mb), vocab_size)
    if kind != "word":
        raise UserError(f"tokenizer {kind!r}: expected 'word' or 'wordpiece'")
    words = WordTokenizer.build(tokenizer_sample(paths, sample_mb))
    if vocab_size <= len(SPECIAL_TOKENS):
        raise UserError(f"--vocab-size {vocab_size}: expected more than the "
                        f"{len(SPECIAL_TOKENS)} special tokens")
    return WordTokenizer(words.vocab[:vocab_size], words.lower_case)


def tokenized_documents(documents, tokenizer, max_tokens: int, counts: CorpusCounts):
    """Each document as a list of sentences, each an int32 array of at most ``max_tokens`` ids.

    A sentence longer than ``max_tokens`` (the room in one sequence) is split into pieces of
    ``max_tokens`` ids, consecutive sentences of its document, rather than cut short: nothing
    is dropped. A document whose lines give no token at all counts as empty.
    """
    for lines in documents:
        sentences = []
        for line in lines:
            ids = np.asarray(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)),
                             dtype=np.int32)
            if ids.size > max_tokens:
                counts.split_lines += 1
            sentences.extend(ids[start:start + max_tokens]
                             for start in range(0, ids.size, max_tokens))
        if sentences:
            counts.documents += 1
            yield sentences
        else:
            counts.empty_documents += 1


def truncate_pair(first, second, max_tokens: int, rng: random.Random):
    """Cut the longer segment, one token at a time from its front or back at random, until
    the two fit in ``max_tokens`` (google-research/bert's ``truncate_seq_pair``: cutting only
    the end would teach the model that sequences always end at a sentence's end)."""
    while len(first) + len(second) > max_tokens:
        if len(first) > len(second):
            first = first[1:] if rng.random() < 0.5 else first[:-1]
        else:
            second = second[1:] if rng.random() < 0.5 else second[:-1]
    return first, second


def random_segment(others, length: int, rng: random.Random):
    """At least ``length`` ids (or the rest of the document) from a random sentence on of a
    random document in ``others``: the NotNext second segment."""
    document = others[rng.randrange(len(others))]
    start = rng.randrange(len(document))
    pieces, total = [], 0
    for sentence in document[start:]:
        pieces.append(sentence)
        total += sentence.size
        if total >= length:
            break
    return np.concatenate(pieces)


def document_pairs(document, others, max_tokens: int, rng: random.Random):
    """Yield (first ids, second ids, NSP label) pairs made from one document.

    As google-research/bert: sentences are gathered into a chunk until it reaches the target
    length (``max_tokens``, or with probability 0.1 a random length from 2, chosen once per
    document). A random number of the chunk's sentences, at least one, make segment A. Segment
    B is the rest of the chunk (IsNext), or, when the chunk has one sentence or with
    probability 0.5, a stretch of a document from ``others`` (NotNext); the sentences it did
    not use are put back to start the next chunk. The pair is then truncated to
    ``max_tokens`` by :func:`truncate_pair`.
    """
    target = max_tokens
    if rng.random() < SHORT_SEQUENCE_PROB:
        target = rng.randint(2, max_tokens)
    chunk, length, i = [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += document[i].size
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            first = np.concatenate(chunk[:a_end])
            if len(chunk) == 1 or rng.random() < 0.5:
                second = random_segment(others, max(1, target - first.size), rng)
                label = NOT_NEXT
                i -= len(chunk) - a_end  # the unused sentences start the next chunk
            else:
                second, label = np.concatenate(chunk[a_end:]), IS_NEXT
            first, second = truncate_pair(first, second, max_tokens, rng)
            yield first, second, label
            chunk, length = [], 0
        i += 1


def pretraining_pairs(documents, max_tokens: int, rng: random.Random,
                      buffer_size: int = DOCUMENT_BUFFER):
    """Yield the pairs of :func:`document_pairs` over a stream of tokenized documents.

    Up to ``buffer_size`` documents wait in a pool; each turn one of them is taken at random,
    and NotNext segments come from the others still waiting (at the end of the stream, when
    none wait, from the document taken just before). So memory holds ``buffer_size`` + 1
    documents, not the corpus.
    """
    pool, previous = [], None

    def take():
        index = rng.randrange(len(pool))
        pool[index], pool[-1] = pool[-1], pool[index]
        return pool.pop()

    def pairs_of(document):
        if not pool and previous is None:
            raise UserError("the corpus has one document, and next-sentence prediction needs "
                            "another to draw NotNext segments from; expected at least two "
                            "documents separated by a blank line")
        return document_pairs(document, pool or [previous], max_tokens, rng)

    for document in documents:
        pool.append(document)
        if len(pool) > buffer_size:
            taken = take()
            yield from pairs_of(taken)
            previous = taken
    while pool:
        taken = take()
        yield from pairs_of(taken)
        previous = taken


def shuffled(items, size: int, rng: random.Random):
    """``items`` in a locally random order: a buffer of ``size``, from which a random one
    leaves as each new one comes in (as ``tf.data.Dataset.shuffle``)."""
    buffer = []
    for item in items:
        if len(buffer) < size:
            buffer.append(item)
            continue
        index = rng.randrange(size)
        yield buffer[index]
        buffer[index] = item
    rng.shuffle(buffer)
    yield from buffer


def check_max_len(max_len: int) -> None:
    if max_len < MIN_MAX_LEN:
        raise UserError(f"--max-len {max_len}: a corpus pair needs room for two segments and "
                        f"three special tokens; expected at least {MIN_MAX_LEN}")


class CorpusData:
    """BERT pre-training batches streamed from a text corpus, afresh every epoch.

    Epoch k reads the files (in a random order) from the start, and draws its pairs and
    masking from a generator seeded with (seed, k): pairs and masks change from epoch to epoch,
    a run is reproducible, and nothing but the buffers stays in memory. The same interface as
    every source (:class:`~nlp_tutorials.sources.source.PretrainingSource`), but the number of
    examples is not known before a pass over the corpus. ``part``: the documents read, every
    one, those a run trains on or those held out (:func:`documents_of_part`).
    """

    input_pipelines = 1  # every process reads the whole corpus

    def __init__(self, pattern: str, tokenizer, max_len: int = DEFAULT_MAX_LEN, seed: int = 0,
                 mask_prob: float = 0.15, whole_word_mask: bool = False, printer=print,
                 part: str = EVERY):
        check_max_len(max_len)
        self.part = part
        self.paths = corpus_files(pattern)
        self.tokenizer = tokenizer
        self.max_len = max_len
        self.seed = seed
        self.mask_prob = mask_prob
        self.max_predictions = default_max_predictions(max_len, mask_prob)
        self._continuation_ids = tokenizer.continuation_ids if whole_word_mask else None
        self.printer = printer

    def pairs(self, epoch: int, counts: CorpusCounts, rng: random.Random):
        """Epoch ``epoch``'s pairs, in a locally shuffled order."""
        paths = list(self.paths)
        rng.shuffle(paths)
        documents = documents_of_part(read_documents(paths, counts), self.part)
        documents = tokenized_documents(documents, self.tokenizer, self.max_len - 3, counts)
        return shuffled(pretraining_pairs(documents, self.max_len - 3, rng),
                        PAIR_SHUFFLE_BUFFER, rng)

    def epoch_batches(self, epoch: int, batch_size: int, masked: bool = True):
        """Yield epoch ``epoch``'s batches as dicts of numpy arrays (see :func:`pack_batch`);
        the last partial batch is dropped. Raises UserError on an empty corpus."""
        numpy_rng = np.random.default_rng([self.seed, epoch])
        rng = random.Random(int(numpy_rng.integers(2 ** 62)))
        counts = CorpusCounts()
        batches = 0
        pairs = iter(self.pairs(epoch, counts, rng))
        while group := list(itertools.islice(pairs, batch_size)):
            if len(group) < batch_size:
                break
            batches += 1
            yield self.pack_batch(group, numpy_rng, masked)
        if counts.documents == 0:
            raise UserError(f"--corpus: {', '.join(map(str, self.paths[:3]))}"
                            f"{' ...' if len(self.paths) > 3 else ''} hold no text; expected "
                            f"one sentence a line, a blank line between documents")
        if batches == 0:
            raise UserError(f"--corpus: the corpus gives fewer than --batch-size {batch_size} "
                            f"pairs; expected more text or a smaller batch")
        if epoch == 0:
            self.printer(f"corpus epoch 0: {batches} batches; {counts.summary()}")

    def pack_batch(self, group, rng, masked: bool) -> dict:
        """A batch from (first, second, label) pairs; see
        :meth:`~nlp_tutorials.sources.mrpc.MrpcPretrainingData.epoch`."""
        ids_a, len_a = pad_ragged([first for first, _, _ in group])
        ids_b, len_b = pad_ragged([second for _, second, _ in group])
        input_ids, token_type_ids = self.tokenizer.pack(ids_a, len_a, ids_b, len_b,
                                                        self.max_len)
        batch = {"input_ids": input_ids, "token_type_ids": token_type_ids,
                 "nsp_labels": np.array([label for _, _, label in group], dtype=np.int32)}
        if masked:
            batch.update(mask_with_tokenizer(
                self.tokenizer, input_ids, rng, self.max_predictions, self.mask_prob,
                self._continuation_ids))
        return batch

    def describe_epoch(self, batch_size: int) -> str:
        return "steps per epoch unknown until the corpus has been read once"

    def batches(self, batch_size: int, masked: bool = True, start: int = 0,
                length_multiple: int = 1):
        """Epoch after epoch of :meth:`epoch_batches`, forever, from step ``start + 1`` on, as
        trimmed tensors; see :meth:`~nlp_tutorials.sources.source.PretrainingSource.batches`.

        A plain generator, not ``tf.data``: a bad line met mid-run stops the run with its
        one-line UserError rather than a TensorFlow error around it. Resuming reads the
        ``start`` batches before it again, so their pairs and masking are drawn as before.
        """
        import tensorflow as tf

        every_epoch = (batch for epoch in itertools.count()
                       for batch in self.epoch_batches(epoch, batch_size, masked))
        for batch in itertools.islice(every_epoch, start, None):
            yield trim_padding({name: tf.constant(value) for name, value in batch.items()},
                               length_multiple, pad_id=self.tokenizer.pad_id)
