"""A text corpus as a run's text (``train --corpus``): :class:`CorpusText`, and the held-out
documents the run is scored on, :class:`CorpusHeldOut`. The reading, pairing and batching are
:mod:`nlp_tutorials.sources.corpus`'s.
"""
import dataclasses
import itertools

import numpy as np

from nlp_tutorials.sources.corpus import (
    DEFAULT_MAX_LEN,
    HELD_OUT,
    HELD_OUT_EVERY,
    TRAINED,
    CorpusData,
    check_max_len,
    corpus_files,
    learn_tokenizer,
)
from nlp_tutorials.sources.source import HELD_OUT_SEED_OFFSET, PretrainingText, TextSettings
from nlp_tutorials.system.errors import UserError

# The most-frequent-token baseline counts the masks of this many batches of the training part.
BASELINE_BATCHES = 100


class CorpusHeldOut:
    """The corpus' held-out documents
    (:func:`~nlp_tutorials.sources.corpus.held_out_document`), on which a corpus run is scored:
    paired and masked as training pairs its own (one fixed masking), never trained on. The
    baseline's masks are those of the training part's first :data:`BASELINE_BATCHES` batches,
    so that it costs the same whatever the corpus size."""

    described = (f"the corpus' held-out documents (one in {HELD_OUT_EVERY}, chosen by a "
                 f"checksum of their text)")

    def __init__(self, pattern: str, tokenizer, settings: TextSettings):
        self.pattern, self.tokenizer, self.settings = pattern, tokenizer, settings

    def data(self, part: str, seed: int) -> CorpusData:
        return CorpusData(self.pattern, self.tokenizer, max_len=self.settings.max_len, seed=seed,
                          whole_word_mask=self.settings.whole_word_mask, printer=lambda _: None,
                          part=part)

    def batches(self, batch_size: int, masked: bool = True) -> list[dict]:
        """The held-out pairs' full batches; [] when they fill none (a small corpus may hold
        out too few documents, or one, from which no NotNext pair can be drawn)."""
        held_out = self.data(HELD_OUT, self.settings.seed + HELD_OUT_SEED_OFFSET)
        try:
            return list(held_out.epoch_batches(0, batch_size, masked))
        except UserError:
            return []

    def train_masked_ids(self, batch_size: int) -> np.ndarray:
        trained = self.data(TRAINED, self.settings.seed).epoch_batches(0, batch_size)
        return np.concatenate([batch["mlm_ids"][batch["mlm_weights"] > 0] for batch in
                               itertools.islice(trained, BASELINE_BATCHES)])


class CorpusText(PretrainingText):
    """A text corpus (``--corpus``), streamed: a tokenizer learned from its start, max_len 128
    unless given; a tenth of its documents held out (:class:`CorpusHeldOut`)."""

    def __init__(self, pattern: str):
        self.pattern = pattern

    def new_tokenizer(self, settings: TextSettings):
        """One learned from the corpus' first ``tokenizer_sample_mb`` MB (bounded work and
        memory; held-out documents there included)."""
        max_len = settings.max_len or DEFAULT_MAX_LEN
        check_max_len(max_len)
        tokenizer = learn_tokenizer(settings.tokenizer, settings.vocab_size,
                                    corpus_files(self.pattern), settings.tokenizer_sample_mb)
        return tokenizer, dataclasses.replace(settings, max_len=max_len)

    def default_max_len(self, tokenizer) -> int:
        return DEFAULT_MAX_LEN

    def source(self, settings: TextSettings, tokenizer, worker: tuple,
               printer) -> CorpusData:
        """Every process reads the whole corpus but its held-out documents (``worker`` is not
        read)."""
        return CorpusData(self.pattern, tokenizer, max_len=settings.max_len, seed=settings.seed,
                          whole_word_mask=settings.whole_word_mask, printer=printer,
                          part=TRAINED)

    def held_out(self, settings: TextSettings, tokenizer) -> CorpusHeldOut:
        return CorpusHeldOut(self.pattern, tokenizer, settings)
