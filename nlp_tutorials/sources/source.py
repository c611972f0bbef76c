"""What every pre-training source offers the training loop: the same three things.

:class:`~nlp_tutorials.sources.mrpc.PretrainingData` (MRPC's pairs),
:class:`~nlp_tutorials.sources.corpus.CorpusData` (a text corpus, streamed) and
:class:`~nlp_tutorials.sources.shards.ShardData` (a corpus written once to TFRecord shards)
each answer :class:`PretrainingSource`, so the loop (:mod:`nlp_tutorials.training.loop`) reads
any of them the same way and never asks which one it has.
"""
import functools
from typing import Iterator, Protocol

from nlp_tutorials.text.packing import trim_padding


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


def trimmed_batches(dataset, pad_id: int, length_multiple: int = 1) -> Iterator[dict]:
    """An iterator over a ``tf.data`` pipeline of batches, each trimmed of its padding columns
    (``pad_id`` in every row; lengths rounded up to ``length_multiple``), prepared ahead of the
    step that reads it."""
    import tensorflow as tf

    trim = functools.partial(trim_padding, multiple=length_multiple, pad_id=pad_id)
    return iter(dataset.map(trim, num_parallel_calls=tf.data.AUTOTUNE)
                .prefetch(tf.data.AUTOTUNE))
