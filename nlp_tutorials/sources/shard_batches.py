"""Reading a ``--data`` folder (:mod:`nlp_tutorials.sources.shards`) into training batches.

``train --data`` (:class:`ShardText`, :class:`ShardData`, :func:`training_dataset`) reads the
shards with ``tf.data``: file order shuffled, several files read at once (interleave), examples
shuffled in a buffer, batches parsed and padded, then masked afresh for every batch (the pairs
are fixed at ``prepare``, the masking is not), all prefetched. Under several workers each reads
only its own shards (:func:`worker_files`), so no example is read twice in an epoch. A record
damaged after the first of its shard (which :func:`~nlp_tutorials.sources.shards.read_description`
checks before any of this) is named when training meets it
(:meth:`ShardData.naming_damaged_shards`). Once trained, the run is scored on the held-out file
``prepare`` wrote beside the shards (:class:`ShardHeldOut`), read and masked the same way.
"""
import dataclasses
import re
from pathlib import Path

import numpy as np

from nlp_tutorials.sources.corpus_text import BASELINE_BATCHES, CorpusHeldOut
from nlp_tutorials.sources.shards import (
    RECORDS_EXPECTED,
    check_same_tokenizer,
    example_problem,
    read_description,
)
from nlp_tutorials.sources.source import (
    HELD_OUT_SEED_OFFSET,
    PretrainingText,
    TextSettings,
    refuse_vocab_size_without_wordpiece,
    trimmed_batches,
)
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.settings import flag_of
from nlp_tutorials.text.masking import default_max_predictions, mask_with_tokenizer
from nlp_tutorials.text.tokenization import WordTokenizer, load_tokenizer

SHUFFLE_BUFFER = 10_000
INTERLEAVE_FILES = 4


def worker_files(directory, description: dict, pipelines: int = 1, pipeline_id: int = 0):
    """The shard paths input pipeline ``pipeline_id`` of ``pipelines`` reads: every
    ``pipelines``-th file (TensorFlow's AutoShardPolicy.FILE, made explicit)."""
    files = [str(Path(directory) / entry["file"]) for entry in description["shards"]]
    if len(files) < pipelines:
        raise UserError(f"--data {directory} has {len(files)} shard(s) for {pipelines} "
                        f"workers; each worker reads its own, so prepare at least {pipelines} "
                        f"(--shards)")
    return files[pipeline_id::pipelines]


def example_dataset(files, seed: int, shuffle: bool = True):
    """The serialized examples of ``files``, one pass: files in a seeded random order, read
    ``INTERLEAVE_FILES`` at a time, examples shuffled in a buffer of ``SHUFFLE_BUFFER``.

    tf.data combines ``seed`` with TensorFlow's global seed: a training run sets that from its
    own seed (``build_model``) before it reads, so a resumed run reads in the same order."""
    import tensorflow as tf

    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shuffle:
        dataset = dataset.shuffle(len(files), seed=seed)
    dataset = dataset.interleave(tf.data.TFRecordDataset,
                                 cycle_length=min(INTERLEAVE_FILES, len(files)),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.shuffle(SHUFFLE_BUFFER, seed=seed) if shuffle else dataset


def parse_batch(serialized, max_len: int) -> dict:
    """[batch] serialized examples -> ``input_ids``, ``token_type_ids`` [batch, max_len] int32
    (padded with 0, the ``[PAD]`` id of vocabularies built here) and ``nsp_labels`` [batch]."""
    import tensorflow as tf

    features = tf.io.parse_example(serialized, {
        "input_ids": tf.io.RaggedFeature(tf.int64),
        "token_type_ids": tf.io.RaggedFeature(tf.int64),
        "nsp_label": tf.io.FixedLenFeature([], tf.int64)})
    batch_size = tf.shape(serialized)[0]
    return {name: tf.cast(features[name].to_tensor(shape=[batch_size, max_len]), tf.int32)
            for name in ("input_ids", "token_type_ids")} | {
        "nsp_labels": tf.cast(features["nsp_label"], tf.int32)}


def training_dataset(directory, tokenizer, batch_size: int, seed: int, masked: bool = True,
                     start: int = 0, pipelines: int = 1, pipeline_id: int = 0,
                     whole_word_mask: bool = False):
    """Endless batches of this input pipeline's shards, from batch ``start`` on.

    Each batch is a dict as :meth:`~nlp_tutorials.sources.mrpc.MrpcPretrainingData.dataset`
    yields, with ``batch_size`` rows [batch_size, max_len]. Masking is drawn per batch from a
    generator seeded with (seed, pipeline_id, batch number), so every epoch masks anew and a
    resumed run (``start`` batches skipped before they are parsed) sees what it would have
    seen.
    """
    import tensorflow as tf

    description = read_description(directory)
    max_len = description["max_len"]
    files = worker_files(directory, description, pipelines, pipeline_id)
    batches = (example_dataset(files, seed).repeat().batch(batch_size, drop_remainder=True)
               .skip(start).map(lambda s: parse_batch(s, max_len),
                                num_parallel_calls=tf.data.AUTOTUNE))
    if masked:
        mask = batch_masker(tokenizer, seed, pipeline_id, max_len, whole_word_mask)
        batches = batches.enumerate(start).map(mask, num_parallel_calls=tf.data.AUTOTUNE)
    return batches.prefetch(tf.data.AUTOTUNE)


def batch_masker(tokenizer, seed: int, pipeline_id: int, max_len: int,
                 whole_word_mask: bool = False):
    """A ``Dataset.map`` function (batch number, batch) -> the batch with BERT's masking
    (:func:`~nlp_tutorials.text.masking.mask_tokens`, run as numpy inside the pipeline)."""
    import tensorflow as tf

    max_predictions = default_max_predictions(max_len)
    continuation_ids = tokenizer.continuation_ids if whole_word_mask else None

    def mask_numpy(number, input_ids):
        rng = np.random.default_rng([seed, pipeline_id, int(number)])
        masked = mask_with_tokenizer(tokenizer, input_ids, rng, max_predictions,
                                     continuation_ids=continuation_ids)
        return (masked["input_ids"], masked["mlm_positions"], masked["mlm_ids"],
                masked["mlm_weights"])

    def mask(number, batch):
        ids, positions, original, weights = tf.numpy_function(
            mask_numpy, [number, batch["input_ids"]],
            [tf.int32, tf.int32, tf.int32, tf.float32], stateful=False)
        ids = tf.ensure_shape(ids, batch["input_ids"].shape)  # [batch, max_len]
        predictions = [batch["input_ids"].shape[0], max_predictions]  # [batch, predictions]
        return batch | {"input_ids": ids,
                        "mlm_positions": tf.ensure_shape(positions, predictions),
                        "mlm_ids": tf.ensure_shape(original, predictions),
                        "mlm_weights": tf.ensure_shape(weights, predictions)}

    return mask


class ShardData:
    """A ``--data`` folder as the training loop reads it: this worker's shards, in batches
    (:class:`~nlp_tutorials.sources.source.PretrainingSource`).

    ``worker`` is (input pipelines, this one's index): under ``--strategy multiworker`` each
    worker reads every ``pipelines``-th shard and feeds ``batch_size / pipelines`` rows of
    each global batch.
    """

    def __init__(self, directory, tokenizer, seed: int = 0, whole_word_mask: bool = False,
                 worker: tuple = (1, 0)):
        self.directory = Path(directory)
        self.description = read_description(directory)
        self.tokenizer = tokenizer
        self.seed = seed
        self.whole_word_mask = whole_word_mask
        self.pipelines, self.pipeline_id = worker
        self.max_len = self.description["max_len"]
        self.files = worker_files(directory, self.description, *worker)

    @property
    def input_pipelines(self) -> int:
        """How many workers feed their own rows of each global batch."""
        return self.pipelines

    def worker_batch_size(self, batch_size: int) -> int:
        """Rows this worker feeds of a global batch of ``batch_size``."""
        if batch_size % self.pipelines:
            raise UserError(f"--batch-size {batch_size} is not divisible by the "
                            f"{self.pipelines} workers, each of which feeds its share")
        return batch_size // self.pipelines

    def steps_per_epoch(self, batch_size: int) -> int:
        """Full batches in one pass over this worker's shards."""
        mine = {Path(f).name for f in self.files}
        examples = sum(e["examples"] for e in self.description["shards"] if e["file"] in mine)
        rows = self.worker_batch_size(batch_size)
        if examples < rows:
            raise UserError(f"--batch-size {batch_size}: this worker's shards of "
                            f"{self.directory} hold {examples} pairs, fewer than its "
                            f"{rows} rows of a batch")
        return examples // rows

    def describe_epoch(self, batch_size: int) -> str:
        return f"{self.steps_per_epoch(batch_size)} steps per epoch"

    def dataset(self, batch_size: int, masked: bool = True, start: int = 0):
        """Endless batches from batch ``start`` on; see :func:`training_dataset`."""
        return training_dataset(self.directory, self.tokenizer,
                                self.worker_batch_size(batch_size), self.seed, masked, start,
                                self.pipelines, self.pipeline_id, self.whole_word_mask)

    def batches(self, batch_size: int, masked: bool = True, start: int = 0,
                length_multiple: int = 1):
        """This worker's rows of each global batch from step ``start + 1`` on, trimmed; see
        :meth:`~nlp_tutorials.sources.source.PretrainingSource.batches`."""
        return self.naming_damaged_shards(trimmed_batches(
            self.dataset(batch_size, masked, start), self.tokenizer.pad_id, length_multiple))

    def naming_damaged_shards(self, batches):
        """``batches``, a damaged record met mid-run named (:func:`naming_damaged_records`)."""
        return naming_damaged_records(batches, self.files, self.description)


def naming_damaged_records(batches, files, description: dict):
    """``batches`` (read from ``files``), but a record ``tf.data`` cannot read or parse (a
    file damaged after its first record) ends the run with one line naming the file and the
    record.

    TensorFlow's error names neither (the files are read several at a time), so ``files`` are
    read again, each record checked, to find it; the error stays as it was when every record
    reads well.
    """
    import tensorflow as tf

    batches = iter(batches)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError):
            for path in files:
                problem = damaged_record(path, description)
                if problem:
                    raise UserError(f"{path}: {problem}, met during training; expected "
                                    f"{RECORDS_EXPECTED}") from None
            raise
        yield batch


class ShardHeldOut:
    """The held-out file of a ``--data`` folder: the pairs ``prepare`` made of the corpus'
    held-out documents, which the shards do not hold. Parsed and masked as training batches
    are (:func:`parse_batch`, :func:`batch_masker`), in file order, with one fixed masking;
    the baseline's masks are those of the shards' first :data:`BASELINE_BATCHES` batches."""

    described = CorpusHeldOut.described

    def __init__(self, directory, tokenizer, settings: TextSettings):
        self.directory, self.tokenizer, self.settings = Path(directory), tokenizer, settings
        self.description = read_description(directory)
        self.path = self.directory / self.description["held_out"]["file"]

    def batches(self, batch_size: int, masked: bool = True) -> list[dict]:
        max_len = self.description["max_len"]
        batches = (example_dataset([str(self.path)], seed=0, shuffle=False)
                   .batch(batch_size, drop_remainder=True)
                   .map(lambda serialized: parse_batch(serialized, max_len)))
        if masked:
            batches = batches.enumerate().map(batch_masker(
                self.tokenizer, self.settings.seed + HELD_OUT_SEED_OFFSET, 0, max_len,
                self.settings.whole_word_mask))
        return list(naming_damaged_records(batches, [self.path], self.description))

    def train_masked_ids(self, batch_size: int) -> np.ndarray:
        trained = training_dataset(self.directory, self.tokenizer, batch_size,
                                   self.settings.seed,
                                   whole_word_mask=self.settings.whole_word_mask)
        return np.concatenate([batch["mlm_ids"].numpy()[batch["mlm_weights"].numpy() > 0]
                               for batch in trained.take(BASELINE_BATCHES)])


def damaged_record(path, description: dict) -> str | None:
    """What is wrong with the first bad record of the shard file ``path`` (read whole, with
    ``tf.data``), or None: a record TensorFlow cannot read (a cut file, flipped bytes) or one
    that is no pair (:func:`example_problem`)."""
    import tensorflow as tf

    records, number = iter(tf.data.TFRecordDataset(str(path))), 0
    while True:
        try:
            record = next(records)
        except StopIteration:
            return None
        except tf.errors.OpError as error:
            return f"record {number + 1} cannot be read ({tensorflow_reason(error)})"
        number += 1
        problem = example_problem(record.numpy(), description["max_len"],
                                  description["vocab_size"])
        if problem:
            return f"record {number} {problem}"


def tensorflow_reason(error) -> str:
    """What a ``tf.data`` error says happened ("corrupted record at 12"), without the
    function and op names TensorFlow puts around it."""
    text = re.sub(r"\{\{[^}]*\}\}\s*", "", first_line(error))
    found = re.search(r"\w+ record at \d+", text)  # "truncated record at 3095"
    if found:
        return found.group(0)
    return re.sub(r"\s*\[Op:.*$", "", text).strip() or type(error).__name__


class ShardText(PretrainingText):
    """Shards ``prepare`` wrote (``--data``): their tokenizer and max_len are fixed, and under
    ``--strategy multiworker`` each worker reads its own shards."""

    def __init__(self, directory):
        self.directory = directory

    def new_tokenizer(self, settings: TextSettings):
        """The tokenizer the shards were written with, and their max_len."""
        refuse_vocab_size_without_wordpiece(settings)
        fixed = sorted({"tokenizer", "vocab_size", "tokenizer_sample_mb"} & settings.given)
        if fixed:
            raise UserError(f"{flag_of(settings, fixed[0])}: with --data the tokenizer is the "
                            f"one the shards were written with (set it at `prepare`)")
        settled = self.settle(settings)
        tokenizer = load_tokenizer(self.directory)
        kind = "word" if isinstance(tokenizer, WordTokenizer) else "wordpiece"
        return tokenizer, dataclasses.replace(settled, tokenizer=kind,
                                              vocab_size=tokenizer.vocab_size)

    def default_max_len(self, tokenizer) -> int:
        return read_description(self.directory)["max_len"]

    def settle(self, settings: TextSettings) -> TextSettings:
        """The shards' max_len: their sequences have their length already. A different
        ``--max-len`` is refused."""
        max_len = read_description(self.directory)["max_len"]
        if "max_len" in settings.given and settings.max_len != max_len:
            raise UserError(f"--max-len {settings.max_len}: the shards in {self.directory} "
                            f"were written for --max-len {max_len}; drop the flag or prepare "
                            f"again")
        return dataclasses.replace(settings, max_len=max_len)

    def check_tokenizer(self, tokenizer, model_dir) -> None:
        """The shards' ids must mean the model's tokens."""
        check_same_tokenizer(self.directory, tokenizer, model_dir)

    def source(self, settings: TextSettings, tokenizer, worker: tuple,
               printer) -> ShardData:
        return ShardData(self.directory, tokenizer, seed=settings.seed,
                         whole_word_mask=settings.whole_word_mask, worker=worker)

    def held_out(self, settings: TextSettings, tokenizer) -> ShardHeldOut | None:
        """The held-out file; None for a folder prepared before ``prepare`` wrote one."""
        if "held_out" not in read_description(self.directory):
            return None
        return ShardHeldOut(self.directory, tokenizer, settings)

    @property
    def unscored(self) -> str:
        return (f"--data {self.directory} has no held-out documents (prepared before "
                f"`prepare` wrote them apart): the run is not scored; prepare the corpus again "
                f"to score on them")
