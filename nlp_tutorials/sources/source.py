"""What a pre-training run learns from: a text (:class:`PretrainingText`), and the batches it
gives (:class:`PretrainingSource`).

A new kind of pre-training text is one subclass of :class:`PretrainingText`: it makes (or
checks) the run's tokenizer, settles the lengths it needs, and gives a source of batches. Three
come with the package: :class:`~nlp_tutorials.sources.mrpc.MrpcText` (MRPC's train pairs),
:class:`~nlp_tutorials.sources.corpus_text.CorpusText` (a text corpus, streamed) and
:class:`~nlp_tutorials.sources.shard_batches.ShardText` (a corpus written once to TFRecord
shards). Their batch sources (:class:`~nlp_tutorials.sources.mrpc.MrpcPretrainingData`,
:class:`~nlp_tutorials.sources.corpus.CorpusData`,
:class:`~nlp_tutorials.sources.shard_batches.ShardData`) each answer :class:`PretrainingSource`,
so the loop (:mod:`nlp_tutorials.training.loop`) reads any of them the same way and never asks
which one it has. Once trained, a run is scored on the text's held-out part
(:meth:`PretrainingText.held_out`, a :class:`HeldOutText`): MRPC's test split for MRPC, the
corpus' held-out documents for a corpus.

A text sees the run's settings as :class:`TextSettings`, plain values, so this folder needs
nothing from ``training/``, which sits above it.
"""
import abc
import dataclasses
import functools
from typing import Iterator, Protocol

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.packing import trim_padding
from nlp_tutorials.text.tokenization import WordPieceTokenizer, WordTokenizer


class PretrainingSource(Protocol):
    """A source of pre-training batches.

    ``input_pipelines``: how many processes each feed their own rows of one global batch (the
    workers reading their own shards); 1 when every process feeds the whole batch.
    """

    input_pipelines: int

    def batches(self, batch_size: int, masked: bool = True, start: int = 0,
                length_multiple: int = 1) -> Iterator[dict]:
        """Endless batches for steps ``start + 1``, ``start + 2``, ...: dicts of tensors
        ``input_ids``, ``token_type_ids`` [batch, length] int32, ``nsp_labels`` [batch] and,
        when ``masked`` (BERT), ``mlm_positions``, ``mlm_ids`` [batch, predictions] int32 and
        ``mlm_weights`` [batch, predictions] float32.

        ``length`` is the batch's longest row rounded up to ``length_multiple``
        (:func:`~nlp_tutorials.text.packing.trim_padding`). Skipping ``start`` batches replays
        the masking an uninterrupted run drew, so a resumed run sees what it would have seen.
        """

    def describe_epoch(self, batch_size: int) -> str:
        """How long an epoch is, as far as known before it runs: "N steps per epoch"."""


@dataclasses.dataclass(frozen=True)
class TextSettings:
    """The run's settings a pre-training text reads or settles (the fields of the same names
    in :class:`~nlp_tutorials.training.config.TrainConfig`, where their defaults live).

    ``tokenizer`` ("word" or "wordpiece"), ``vocab_size`` and ``tokenizer_sample_mb`` say how
    a new run's tokenizer is made; ``max_len`` is 0 until the text settles it; ``given``
    names the settings the user set explicitly, which a text may refuse or must keep.
    """

    tokenizer: str
    vocab_size: int
    tokenizer_sample_mb: int
    max_len: int
    nsp_mode: str
    seed: int
    whole_word_mask: bool
    given: frozenset


# A held-out text's masking is drawn with the run's seed plus this: unlike any training epoch's,
# and the same in every run of that seed.
HELD_OUT_SEED_OFFSET = 1000


class HeldOutText(Protocol):
    """Text a run never trains on, on which it is scored once trained.

    ``described``: what it is, as the run's output names it ("MRPC's test split").
    """

    described: str

    def batches(self, batch_size: int, masked: bool = True) -> list[dict]:
        """Its full batches of ``batch_size`` rows (arrays or tensors, as
        :meth:`PretrainingSource.batches` gives, untrimmed), masked once with the run's seed +
        :data:`HELD_OUT_SEED_OFFSET`; [] when it holds too little for one."""

    def train_masked_ids(self, batch_size: int):
        """numpy int [k]: the token ids masked in the run's training text (its first epoch,
        or a bounded start of it); the most-frequent-token baseline always guesses the
        commonest."""


class PretrainingText(abc.ABC):
    """What a pre-training run learns from: one subclass per kind of text.

    The run asks it, in order: a tokenizer (:meth:`new_tokenizer` for a new run; a resumed run
    or one from a checkpoint has its own, which :meth:`check_tokenizer` may refuse), the
    default ``max_len`` beside a checkpoint's tokenizer (:meth:`default_max_len`), the settings
    the text fixes (:meth:`settle`), then the batches (:meth:`source`), and once trained the
    text it is scored on (:meth:`held_out`).
    """

    # The held-out sentence pairs, when the text has them as pairs (MRPC's test split): the
    # attention export draws them rather than read MRPC's test file again.
    test_pairs = None
    # What the run says when :meth:`held_out` is None.
    unscored = "no held-out text: the run is not scored"

    @abc.abstractmethod
    def new_tokenizer(self, settings: TextSettings):
        """(tokenizer, ``settings`` with ``max_len``, and the tokenizer's kind and size if the
        text decides them, settled) of a new run."""

    @abc.abstractmethod
    def default_max_len(self, tokenizer) -> int:
        """The ``max_len`` of a run that gives none, with ``tokenizer``."""

    def settle(self, settings: TextSettings) -> TextSettings:
        """``settings`` with what the text fixes whatever the tokenizer (a run from a checkpoint
        asks this before the checkpoint settles the rest); by default nothing."""
        return settings

    def check_tokenizer(self, tokenizer, model_dir) -> None:
        """Refuse in one line a tokenizer (the one in ``model_dir``) the text cannot be read
        with; by default any tokenizer reads it."""

    @abc.abstractmethod
    def source(self, settings: TextSettings, tokenizer, worker: tuple,
               printer) -> PretrainingSource:
        """The run's batches, read with ``tokenizer``. ``worker`` is (input pipelines, this
        one's index): under ``--strategy multiworker`` a text may give each worker its own
        share (as shards do); ``printer`` takes what the source reports as it reads."""

    def held_out(self, settings: TextSettings, tokenizer) -> HeldOutText | None:
        """The part of the text the run never trains on, to score it once trained; by
        default none (the run says :attr:`unscored`, and is not scored)."""
        return None


def refuse_vocab_size_without_wordpiece(settings: TextSettings) -> None:
    """Only a WordPiece tokenizer has a vocabulary size to choose."""
    if "vocab_size" in settings.given and settings.tokenizer != "wordpiece":
        raise UserError(f"--vocab-size {settings.vocab_size}: only --tokenizer wordpiece "
                        f"has a vocabulary size to choose")


def build_tokenizer(kind: str, vocab_size: int, texts):
    """A new ``kind`` ("word" or "wordpiece") tokenizer, its vocabulary learned from ``texts``
    (WordPiece: at most ``vocab_size`` tokens)."""
    if kind == "word":
        return WordTokenizer.build(texts)
    if kind == "wordpiece":
        return WordPieceTokenizer.train(texts, vocab_size)
    raise UserError(f"tokenizer {kind!r}: expected 'word' or 'wordpiece'")


def trimmed_batches(dataset, pad_id: int, length_multiple: int = 1) -> Iterator[dict]:
    """An iterator over a ``tf.data`` pipeline of batches, each trimmed of its padding columns
    (``pad_id`` in every row; lengths rounded up to ``length_multiple``), prepared ahead of the
    step that reads it."""
    import tensorflow as tf

    trim = functools.partial(trim_padding, multiple=length_multiple, pad_id=pad_id)
    return iter(dataset.map(trim, num_parallel_calls=tf.data.AUTOTUNE)
                .prefetch(tf.data.AUTOTUNE))
