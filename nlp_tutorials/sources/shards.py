"""A corpus tokenized once into TFRecord shards: writing them, and checking a folder of them.

``prepare`` (:func:`prepare_shards`) streams a corpus through
:mod:`nlp_tutorials.sources.corpus` and writes each pre-training pair, unmasked, to one of N
shard files in turn: ``input_ids`` (``[CLS] A [SEP] B [SEP]``, no padding), ``token_type_ids``
and ``nsp_label``. Beside them go the tokenizer (``vocab.txt``, ``tokenizer_config.json``) and
``corpus.json``, which names the shards with their example counts, ``max_len`` and the
vocabulary's SHA-256. The corpus' held-out documents
(:func:`~nlp_tutorials.sources.corpus.held_out_document`, the ones a ``train --corpus`` run
holds out) are paired among themselves into a file of their own, :data:`HELD_OUT_NAME`,
named in ``corpus.json`` under ``held_out``: the shards never hold them, and ``train --data``
is scored on them (:class:`~nlp_tutorials.sources.shard_batches.ShardHeldOut`). The folder is
written under a temporary name and renamed when complete, so a failed or killed ``prepare``
leaves no half-written ``--output``; the temporary folder a killed one leaves beside it is
removed by the next ``prepare`` into the same ``--output``.

``train --data`` reads the shards (:mod:`nlp_tutorials.sources.shard_batches`). Before it
does, :func:`read_description` checks every field of ``corpus.json`` and the first record of
every shard, without TensorFlow (:func:`example_problem` says what keeps a record from being
a pair).
"""
import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np

from nlp_tutorials.sources.corpus import (
    HELD_OUT,
    MIN_MAX_LEN,
    TRAINED,
    CorpusCounts,
    CorpusData,
)
from nlp_tutorials.sources.records import RecordError, example_features, read_first_record
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import remove_dead_temporaries, write_text_atomic
from nlp_tutorials.system.json_files import read_json_object
from nlp_tutorials.system.values import (
    check_integer,
    check_text,
    integer_field,
    refuse,
    required,
    text_field,
)
from nlp_tutorials.text.tokenization import load_tokenizer

DESCRIPTION_NAME = "corpus.json"
HELD_OUT_NAME = "held-out.tfrecord"
FORMAT = "nlp_tutorials pre-training shards"
# Every shard stays open while prepare writes (pair i goes to shard i mod N), and a process
# may hold only so many open files (often 1,024).
MAX_SHARDS = 512
COUNTED = ("documents", "empty_documents", "empty_files", "split_lines")  # CorpusCounts' order
SHARD_LIST = f'a list of 1 to {MAX_SHARDS} {{"file": name, "examples": count}} entries'
SHA256 = re.compile(r"[0-9a-f]{64}")
FEATURES = ("input_ids", "token_type_ids", "nsp_label")  # each record's, all int64
RECORDS_EXPECTED = ("the pre-training pairs `prepare` writes (int64 features input_ids, "
                    "token_type_ids, nsp_label); prepare the folder again")


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
    data = CorpusData(pattern, tokenizer, max_len=max_len, seed=seed, printer=printer,
                      part=TRAINED)
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
    printer(f"{description['examples']} pairs in {shards} shards under {output}, "
            f"{description['held_out']['examples']} held-out pairs in {HELD_OUT_NAME}; "
            f"{CorpusCounts(*(description[k] for k in COUNTED)).summary()}")
    return description


def _write_shards(data: CorpusData, work: Path, shards: int, pattern: str) -> dict:
    """Write the shards (the training documents' pairs), the held-out file, the tokenizer
    and ``corpus.json`` into the folder ``work``."""
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
    held_out = _write_held_out(CorpusData(pattern, data.tokenizer, max_len=data.max_len,
                                          seed=data.seed, part=HELD_OUT),
                               work / HELD_OUT_NAME, counts)
    data.tokenizer.save(work)
    description = {
        "format": FORMAT, "source": pattern, "max_len": data.max_len, "seed": data.seed,
        "tokenizer_class": type(data.tokenizer).__name__,
        "vocab_size": data.tokenizer.vocab_size,
        "vocab_sha256": vocab_fingerprint(data.tokenizer),
        "examples": sum(per_shard), "is_next": labels[0], "not_next": labels[1],
        "documents": counts.documents, "empty_documents": counts.empty_documents,
        "empty_files": counts.empty_files, "split_lines": counts.split_lines,
        "shards": [{"file": name, "examples": n} for name, n in zip(names, per_shard)],
        "held_out": held_out}
    write_text_atomic(work / DESCRIPTION_NAME, json.dumps(description, indent=2) + "\n")
    return description


def _write_held_out(held_out: CorpusData, path: Path, counts: CorpusCounts) -> dict:
    """Write the held-out documents' pairs to ``path``, their documents and longer lines
    added to ``counts``; returns ``corpus.json``'s ``held_out`` entry. A second pass over the
    corpus (after the shards' pass has read and checked every line), so that memory stays
    bounded: held-out documents pair only among themselves, as in a ``train --corpus`` run.
    A single held-out document gives no pair (nothing to draw NotNext from): the file stays
    empty."""
    import tensorflow as tf

    met, examples = CorpusCounts(), 0
    with tf.io.TFRecordWriter(str(path)) as writer:
        try:
            for first, second, label in held_out.pairs(0, met, random.Random(held_out.seed)):
                writer.write(serialize_pair(held_out.tokenizer, first, second, label))
                examples += 1
        except UserError:
            if met.documents != 1:
                raise
    counts.documents += met.documents
    counts.split_lines += met.split_lines
    return {"file": path.name, "examples": examples}


def read_description(directory) -> dict:
    """``corpus.json`` of a ``--data`` folder, every field checked (:func:`check_description`),
    then against the files beside it: every shard (and the held-out file, when named) there,
    the vocabulary the one the shards were written with, and the first record of each shard
    and of a non-empty held-out file a pair (:func:`first_record_problem`).
    Plain Python: the command line calls it before TensorFlow starts."""
    directory = Path(directory)
    path = directory / DESCRIPTION_NAME
    if not directory.is_dir():
        raise UserError(f"--data {directory}: no such folder; expected one written by "
                        f"`prepare --corpus ... --output {directory}`")
    if not path.is_file():
        raise UserError(f"--data {directory}: no {DESCRIPTION_NAME}; expected a folder written "
                        f"by `prepare`")
    description = check_description(read_json_object(path), path)
    shards = [directory / entry["file"] for entry in description["shards"]]
    held_out = description.get("held_out")
    listed = [("shard", shard) for shard in shards]
    for kind, file in listed + ([("held-out file", directory / held_out["file"])]
                                if held_out else []):
        if not file.is_file():
            raise UserError(f"--data {directory}: {kind} {file.name} listed in "
                            f"{DESCRIPTION_NAME} is missing")
    tokenizer = load_tokenizer(directory)
    if vocab_fingerprint(tokenizer) != description["vocab_sha256"]:
        raise UserError(f"--data {directory}: vocab.txt is not the vocabulary the shards were "
                        f"written with (its SHA-256 differs from {DESCRIPTION_NAME}'s)")
    if description["vocab_size"] != tokenizer.vocab_size:
        raise UserError(f"{path}: vocab_size is {description['vocab_size']}, but the "
                        f"vocabulary beside it has {tokenizer.vocab_size} tokens; expected the "
                        f"folder as `prepare` wrote it")
    if held_out and held_out["examples"]:
        shards.append(directory / held_out["file"])
    elif held_out and (directory / held_out["file"]).stat().st_size:
        raise UserError(f"{directory / held_out['file']}: not empty, but {DESCRIPTION_NAME} "
                        f"says it holds 0 examples; expected the folder as `prepare` wrote it")
    for shard in shards:
        problem = first_record_problem(shard, description)
        if problem:
            raise UserError(f"{shard}: {problem}; expected {RECORDS_EXPECTED}")
    return description


def check_description(description: dict, path) -> dict:
    """``description`` (``corpus.json``'s object, read from ``path``) if every field is what
    :func:`prepare_shards` writes: texts, counts that are integers in range and add up, and a
    shard list; else a one-line UserError naming the field."""
    if description.get("format") != FORMAT:
        raise UserError(f"{path}: format {description.get('format')!r}; expected {FORMAT!r}")
    for name in ("source", "tokenizer_class"):
        text_field(description, name, path)
    integer_field(description, "max_len", path, minimum=MIN_MAX_LEN)
    integer_field(description, "seed", path, minimum=0)
    integer_field(description, "vocab_size", path, minimum=1)
    if not SHA256.fullmatch(text_field(description, "vocab_sha256", path)):
        raise refuse(path, "vocab_sha256", description["vocab_sha256"],
                     "64 hexadecimal digits (a SHA-256)")
    for name in ("is_next", "not_next", *COUNTED):
        integer_field(description, name, path, minimum=0)
    examples = integer_field(description, "examples", path, minimum=1)
    if description["is_next"] + description["not_next"] != examples:
        raise UserError(f"{path}: is_next {description['is_next']} + not_next "
                        f"{description['not_next']} is not examples {examples}; expected the "
                        f"counts `prepare` wrote")
    shards = check_shard_list(required(description, "shards", path, SHARD_LIST), path)
    if sum(entry["examples"] for entry in shards) != examples:
        raise UserError(f"{path}: the shards' examples add up to "
                        f"{sum(entry['examples'] for entry in shards)}, not examples "
                        f"{examples}; expected the counts `prepare` wrote")
    if "held_out" in description:  # a folder prepared before held-out files has none
        check_held_out(description["held_out"], shards, path)
    return description


def check_held_out(entry, shards: list, path) -> dict:
    """``corpus.json``'s ``held_out``: a file name in the folder, no shard's, and its
    examples, 0 (too few held-out documents for a pair) or more."""
    if not isinstance(entry, dict) or not {"file", "examples"} <= set(entry):
        raise refuse(path, "held_out", entry, '{"file": name, "examples": count}')
    check_file_name(entry["file"], "held_out.file", path, {shard["file"] for shard in shards})
    check_integer(entry["examples"], "held_out.examples", path, minimum=0)
    return entry


def check_shard_list(shards, path) -> list:
    """``corpus.json``'s ``shards``: 1 to MAX_SHARDS entries, each a file name in the folder
    (no path: the folder is read, nothing outside it) listed once and its examples, at least 1."""
    if not isinstance(shards, list) or not 1 <= len(shards) <= MAX_SHARDS:
        raise refuse(path, "shards", shards, SHARD_LIST)
    names = set()
    for index, entry in enumerate(shards):
        field = f"shards[{index}]"
        if not isinstance(entry, dict) or not {"file", "examples"} <= set(entry):
            raise refuse(path, field, entry, '{"file": name, "examples": count}')
        names.add(check_file_name(entry["file"], f"{field}.file", path, names))
        check_integer(entry["examples"], f"{field}.examples", path, minimum=1)
    return shards


def check_file_name(name, field: str, path, taken: set) -> str:
    """``name`` if it names a file in the folder (no path: the folder is read, nothing
    outside it) that no other entry of ``taken`` names."""
    check_text(name, field, path)
    if name in taken or name in ("", ".", "..") or Path(name).name != name:
        raise refuse(path, field, name, "the name of a file in the folder, listed once")
    return name


def check_same_tokenizer(data_dir, tokenizer, model_dir) -> None:
    """Refuse shards whose ids come from another vocabulary than the model's."""
    description = read_description(data_dir)
    if description["vocab_sha256"] != vocab_fingerprint(tokenizer):
        raise UserError(f"--data {data_dir} was tokenized with another vocabulary than the "
                        f"model in {model_dir} (vocabulary SHA-256 "
                        f"{description['vocab_sha256'][:12]}... against "
                        f"{vocab_fingerprint(tokenizer)[:12]}...); prepare it again with "
                        f"--tokenizer-from {model_dir}")


def example_problem(serialized: bytes, max_len: int, vocab_size: int) -> str | None:
    """What keeps one record from being a pair as :func:`serialize_pair` writes it, or None.

    A pair is a ``tf.train.Example`` with int64 features ``input_ids`` (3 to ``max_len`` ids
    below ``vocab_size``), ``token_type_ids`` (as many, each 0 or 1) and ``nsp_label`` (one
    label, 0 or 1). Read without TensorFlow (:mod:`nlp_tutorials.sources.records`).
    """
    try:
        features = example_features(serialized)
    except RecordError as error:
        return str(error)
    for name in FEATURES:
        if features.get(name, (None,))[0] != "int64_list":
            return f"has no int64 feature {name!r}"
    ids, types, label = (np.array(features[name][1], np.int64) for name in FEATURES)
    if not 3 <= ids.size <= max_len:
        return f"has {ids.size} input_ids; expected 3 to max_len {max_len}"
    outside = ids[(ids < 0) | (ids >= vocab_size)]
    if outside.size:
        return f"has token id {outside[0]} in input_ids; expected ids 0 to {vocab_size - 1}"
    if types.size != ids.size or not np.isin(types, (0, 1)).all():
        return "has token_type_ids that are not one 0 or 1 per input id"
    if label.size != 1 or label[0] not in (0, 1):
        return f"has nsp_label {label.tolist()}; expected [0] or [1]"
    return None


def first_record_problem(path, description: dict) -> str | None:
    """What is wrong with the first record of the shard file ``path``, or None; read in plain
    Python, so ``train --data`` checks every shard before TensorFlow starts."""
    try:
        record = read_first_record(path)
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    except RecordError as error:
        return str(error)
    if record is None:
        return "holds no record"
    problem = example_problem(record, description["max_len"], description["vocab_size"])
    return problem and f"record 1 {problem}"
