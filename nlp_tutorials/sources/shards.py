"""A corpus tokenized once into TFRecord shards, and the ``tf.data`` pipeline that reads them.

``prepare`` (:func:`prepare_shards`) streams a corpus through :mod:`nlp_tutorials.sources.corpus` and
writes each pre-training pair, unmasked, to one of N shard files in turn: ``input_ids``
(``[CLS] A [SEP] B [SEP]``, no padding), ``token_type_ids`` and ``nsp_label``. Beside them go
the tokenizer (``vocab.txt``, ``tokenizer_config.json``) and ``corpus.json``, which names the
shards with their example counts, ``max_len`` and the vocabulary's SHA-256. The folder is
written under a temporary name and renamed when complete, so a failed or killed ``prepare``
leaves no half-written ``--output``; the temporary folder a killed one leaves beside it is
removed by the next ``prepare`` into the same ``--output``.

``train --data`` (:func:`training_dataset`) reads the shards with ``tf.data``: file order
shuffled, several files read at once (interleave), examples shuffled in a buffer, batches
parsed and padded, then masked afresh for every batch (the pairs are fixed at ``prepare``, the
masking is not), all prefetched. Under several workers each reads only its own shards
(:func:`worker_files`), so no example is read twice in an epoch.
"""
import hashlib
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np

from nlp_tutorials.sources.corpus import CorpusCounts, CorpusData
from nlp_tutorials.sources.source import trimmed_batches
from nlp_tutorials.text.masking import default_max_predictions, mask_with_tokenizer
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import (
    read_json_object,
    remove_dead_temporaries,
    write_text_atomic,
)
from nlp_tutorials.text.tokenization import load_tokenizer

DESCRIPTION_NAME = "corpus.json"
FORMAT = "nlp_tutorials pre-training shards"
SHUFFLE_BUFFER = 10_000
INTERLEAVE_FILES = 4
# Every shard stays open while prepare writes (pair i goes to shard i mod N), and a process
# may hold only so many open files (often 1,024).
MAX_SHARDS = 512
COUNTED = ("documents", "empty_documents", "empty_files", "split_lines")  # CorpusCounts' order


def shard_name(index: int, count: int) -> str:
    return f"shard-{index:05d}-of-{count:05d}.tfrecord"


def vocab_fingerprint(tokenizer) -> str:
    """SHA-256 of what makes token ids mean the same: the tokenizer class, its lower-casing
    and every token of the vocabulary in id order."""
    identity = json.dumps([type(tokenizer).__name__, getattr(tokenizer, "lower_case", None),
                           tokenizer.vocab])
    return hashlib.sha256(identity.encode("utf-8")).hexdigest()


def serialize_pair(tokenizer, first, second, label: int) -> bytes:
    """One ``tf.train.Example``: the unpadded ``[CLS] A [SEP] B [SEP]`` ids, segments, label."""
    import tensorflow as tf

    cls, sep = [tokenizer.cls_id], [tokenizer.sep_id]
    ids = np.concatenate([cls, first, sep, second, sep]).astype(np.int64)
    types = np.repeat([0, 1], [first.size + 2, second.size + 1])

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

    return tf.train.Example(features=tf.train.Features(feature={
        "input_ids": ints(ids), "token_type_ids": ints(types),
        "nsp_label": ints([label])})).SerializeToString()


def prepare_shards(pattern: str, output, shards: int, tokenizer, max_len: int, seed: int,
                   printer=print) -> dict:
    """Tokenize the corpus ``pattern`` once into ``shards`` TFRecord files in ``output``.

    Pair ``i`` goes to shard ``i mod shards``, so the shards hold nearly equal counts. Returns
    the description written to ``corpus.json``.
    """
    output = Path(output)
    if not 1 <= shards <= MAX_SHARDS:
        raise UserError(f"--shards {shards}: expected 1 to {MAX_SHARDS} (all are written at "
                        f"once)")
    if output.exists() and (not output.is_dir() or any(output.iterdir())):
        raise UserError(f"--output {output}: already exists and is not an empty folder; "
                        f"choose a new folder")
    data = CorpusData(pattern, tokenizer, max_len=max_len, seed=seed, printer=printer)
    work = output.parent / f".{output.name}.tmp{os.getpid()}"
    work.parent.mkdir(parents=True, exist_ok=True)
    remove_dead_temporaries(work.parent, output.name)  # what a killed prepare left
    shutil.rmtree(work, ignore_errors=True)  # left by a killed process that had this id
    work.mkdir()
    try:
        description = _write_shards(data, work, shards, pattern)
        if output.exists():
            output.rmdir()  # the empty folder checked above
        os.replace(work, output)
    except BaseException:  # Ctrl-C included: nothing half-written stays behind
        shutil.rmtree(work, ignore_errors=True)
        raise
    printer(f"{description['examples']} pairs in {shards} shards under {output}; "
            f"{CorpusCounts(*(description[k] for k in COUNTED)).summary()}")
    return description


def _write_shards(data: CorpusData, work: Path, shards: int, pattern: str) -> dict:
    """Write the shards, the tokenizer and ``corpus.json`` into the folder ``work``."""
    import tensorflow as tf

    counts, rng = CorpusCounts(), random.Random(data.seed)
    per_shard, labels = [0] * shards, [0, 0]
    names = [shard_name(i, shards) for i in range(shards)]
    writers = [tf.io.TFRecordWriter(str(work / name)) for name in names]
    try:
        for i, (first, second, label) in enumerate(data.pairs(0, counts, rng)):
            writers[i % shards].write(serialize_pair(data.tokenizer, first, second, label))
            per_shard[i % shards] += 1
            labels[label] += 1
    finally:
        for writer in writers:
            writer.close()
    if counts.documents == 0:
        raise UserError(f"--corpus {pattern}: no text; expected one sentence a line, a blank "
                        f"line between documents")
    if min(per_shard) == 0:
        raise UserError(f"--shards {shards}: the corpus gives only {sum(per_shard)} pairs, "
                        f"too few to fill every shard; expected fewer shards or more text")
    data.tokenizer.save(work)
    description = {
        "format": FORMAT, "source": pattern, "max_len": data.max_len, "seed": data.seed,
        "tokenizer_class": type(data.tokenizer).__name__,
        "vocab_size": data.tokenizer.vocab_size,
        "vocab_sha256": vocab_fingerprint(data.tokenizer),
        "examples": sum(per_shard), "is_next": labels[0], "not_next": labels[1],
        "documents": counts.documents, "empty_documents": counts.empty_documents,
        "empty_files": counts.empty_files, "split_lines": counts.split_lines,
        "shards": [{"file": name, "examples": n} for name, n in zip(names, per_shard)]}
    write_text_atomic(work / DESCRIPTION_NAME, json.dumps(description, indent=2) + "\n")
    return description


def read_description(directory) -> dict:
    """``corpus.json`` of a ``--data`` folder, checked against the files beside it."""
    directory = Path(directory)
    path = directory / DESCRIPTION_NAME
    if not directory.is_dir():
        raise UserError(f"--data {directory}: no such folder; expected one written by "
                        f"`prepare --corpus ... --output {directory}`")
    if not path.is_file():
        raise UserError(f"--data {directory}: no {DESCRIPTION_NAME}; expected a folder written "
                        f"by `prepare`")
    description = read_json_object(path)
    if description.get("format") != FORMAT:
        raise UserError(f"{path}: format {description.get('format')!r}; expected {FORMAT!r}")
    for entry in description.get("shards", []):
        if not (directory / entry["file"]).is_file():
            raise UserError(f"--data {directory}: shard {entry['file']} listed in "
                            f"{DESCRIPTION_NAME} is missing")
    tokenizer = load_tokenizer(directory)
    if vocab_fingerprint(tokenizer) != description.get("vocab_sha256"):
        raise UserError(f"--data {directory}: vocab.txt is not the vocabulary the shards were "
                        f"written with (its SHA-256 differs from {DESCRIPTION_NAME}'s)")
    return description


def check_same_tokenizer(data_dir, tokenizer, model_dir) -> None:
    """Refuse shards whose ids come from another vocabulary than the model's."""
    description = read_description(data_dir)
    if description["vocab_sha256"] != vocab_fingerprint(tokenizer):
        raise UserError(f"--data {data_dir} was tokenized with another vocabulary than the "
                        f"model in {model_dir} (vocabulary SHA-256 "
                        f"{description['vocab_sha256'][:12]}... against "
                        f"{vocab_fingerprint(tokenizer)[:12]}...); prepare it again with "
                        f"--tokenizer-from {model_dir}")


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
    ``INTERLEAVE_FILES`` at a time, examples shuffled in a buffer of ``SHUFFLE_BUFFER``."""
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

    Each batch is a dict as :meth:`~nlp_tutorials.sources.mrpc.PretrainingData.dataset` yields, with
    ``batch_size`` rows [batch_size, max_len]. Masking is drawn per batch from a generator
    seeded with (seed, pipeline_id, batch number), so every epoch masks anew and a resumed run
    (``start`` batches skipped before they are parsed) sees what it would have seen.
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
        return trimmed_batches(self.dataset(batch_size, masked, start),
                               self.tokenizer.pad_id, length_multiple)
