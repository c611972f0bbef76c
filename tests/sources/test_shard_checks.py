"""A ``--data`` folder is checked before training: every field of corpus.json, and the first
record of every shard; a shard damaged further on is named when training meets it.

The plain-Python TFRecord and ``tf.train.Example`` reader those checks use is compared with
TensorFlow's own on the same bytes.
"""
import itertools
import json
import os
import random
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings, strategies as st

from nlp_tutorials.cli import main
from nlp_tutorials.sources import corpus
from nlp_tutorials.sources.records import (
    RecordError,
    example_features,
    masked_crc32c,
    read_first_record,
)
from nlp_tutorials.sources.shard_batches import ShardData
from nlp_tutorials.sources.shards import prepare_shards, read_description
from nlp_tutorials.system.errors import UserError
from support import fails_without_tensorflow

SHARD = "shard-00001-of-00002.tfrecord"
EXPECTED = ("expected the pre-training pairs `prepare` writes (int64 features input_ids, "
            "token_type_ids, nsp_label); prepare the folder again")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """Two shards of a 40-document corpus (max_len 32), as `prepare` writes them."""
    root = tmp_path_factory.mktemp("prepared")
    rng = random.Random(0)
    with open(root / "corpus.txt", "w", encoding="utf-8") as handle:
        for _ in range(40):
            for _ in range(rng.randint(2, 6)):
                handle.write(" ".join(f"w{rng.randrange(60)}" for _ in range(rng.randint(2, 12)))
                             + " .\n")
            handle.write("\n")
    tokenizer = corpus.learn_tokenizer("word", 8000, [root / "corpus.txt"], 1)
    prepare_shards(str(root / "corpus.txt"), root / "shards", 2, tokenizer, max_len=32, seed=1,
                   printer=lambda *_: None)
    return root / "shards"


@pytest.fixture
def shards(prepared, tmp_path) -> Path:
    """A copy of the prepared folder to damage."""
    return Path(shutil.copytree(prepared, tmp_path / "shards"))


DELETE = object()  # a change that removes the field


def edit_description(folder: Path, **changes) -> Path:
    path = folder / "corpus.json"
    values = json.loads(path.read_text())
    for name, value in changes.items():
        if value is DELETE:
            del values[name]
        else:
            values[name] = value
    path.write_text(json.dumps(values))
    return path


def refusal(folder) -> str:
    with pytest.raises(UserError) as info:
        read_description(folder)
    assert "\n" not in str(info.value)
    return str(info.value)


# --- corpus.json, field by field ---

@pytest.mark.parametrize("changes, expected", [
    ({"max_len": "32"}, 'max_len is "32"; expected an integer of at least 8'),
    ({"max_len": 4}, "max_len is 4; expected an integer of at least 8"),
    ({"max_len": DELETE}, "no max_len; expected an integer of at least 8"),
    ({"seed": -1}, "seed is -1; expected a non-negative integer"),
    ({"vocab_size": True}, "vocab_size is true; expected a positive integer"),
    ({"documents": 1.5}, "documents is 1.5; expected a non-negative integer"),
    ({"split_lines": float("nan")}, "split_lines is NaN; expected a non-negative integer"),
    ({"examples": 0}, "examples is 0; expected a positive integer"),
    ({"is_next": 1}, r"is_next 1 \+ not_next \d+ is not examples \d+; expected the counts"),
    ({"source": 5}, "source is 5; expected text"),
    ({"vocab_sha256": "abc"}, 'vocab_sha256 is "abc"; expected 64 hexadecimal digits'),
    ({"shards": []}, 'shards is \\[\\]; expected a list of 1 to 512 {"file": name, "examples": '
                     'count} entries'),
    ({"shards": "shard-00000-of-00002.tfrecord"}, 'shards is "shard-00000-of-00002.tfrecord"; '
                                                  'expected a list'),
])
def test_each_bad_field_of_corpus_json_is_named(shards, changes, expected):
    path = edit_description(shards, **changes)
    message = refusal(shards)
    assert message.startswith(f"{path}: "), message
    assert re.search(expected, message), message


def shard_list(folder) -> list:
    return json.loads((folder / "corpus.json").read_text())["shards"]


def test_shards_listed_as_plain_names_are_refused(shards):
    path = edit_description(shards, shards=[entry["file"] for entry in shard_list(shards)])
    assert refusal(shards) == (f'{path}: shards[0] is "shard-00000-of-00002.tfrecord"; '
                               f'expected {{"file": name, "examples": count}}')


@pytest.mark.parametrize("edit, expected", [
    (lambda entries: entries[1].update(examples=0), "shards[1].examples is 0; expected a "
                                                    "positive integer"),
    (lambda entries: entries[1].update(examples="9"), 'shards[1].examples is "9"; expected'),
    (lambda entries: entries[1].update(file="../corpus.txt"),
     'shards[1].file is "../corpus.txt"; expected the name of a file in the folder'),
    (lambda entries: entries[1].update(file=entries[0]["file"]),
     'shards[1].file is "shard-00000-of-00002.tfrecord"; expected the name of a file in the '
     'folder, listed once'),
    (lambda entries: entries[1].update(file=None), "shards[1].file is null; expected text"),
])
def test_each_bad_shard_entry_is_named(shards, edit, expected):
    entries = shard_list(shards)
    edit(entries)
    path = edit_description(shards, shards=entries)
    message = refusal(shards)
    assert message.startswith(f"{path}: ") and expected in message, message


def test_shard_counts_that_do_not_add_up_are_refused(shards):
    entries = shard_list(shards)
    examples = sum(entry["examples"] for entry in entries)
    entries[1]["examples"] += 1
    path = edit_description(shards, shards=entries)
    assert refusal(shards) == (f"{path}: the shards' examples add up to {examples + 1}, not "
                               f"examples {examples}; expected the counts `prepare` wrote")


@pytest.mark.parametrize("held_out, expected", [
    ("held-out.tfrecord", 'held_out is "held-out.tfrecord"; expected {"file": name, '
                          '"examples": count}'),
    ({"file": "../corpus.txt", "examples": 3}, 'held_out.file is "../corpus.txt"; expected the '
                                               'name of a file in the folder, listed once'),
    ({"file": "shard-00000-of-00002.tfrecord", "examples": 3},
     'held_out.file is "shard-00000-of-00002.tfrecord"; expected the name of a file in the '
     'folder, listed once'),
    ({"file": "held-out.tfrecord", "examples": -1}, "held_out.examples is -1; expected a "
                                                    "non-negative integer"),
])
def test_each_bad_held_out_entry_is_named(shards, held_out, expected):
    path = edit_description(shards, held_out=held_out)
    assert refusal(shards) == f"{path}: {expected}"


def test_the_held_out_file_is_checked_as_the_shards_are(shards):
    held_out = shards / "held-out.tfrecord"
    assert read_first_record(held_out)  # the 40 documents hold out enough for pairs
    write_records(held_out, [foreign_example()])
    assert refusal(shards) == (f"{held_out}: record 1 has no int64 feature 'input_ids'; "
                               f"{EXPECTED}")
    edit_description(shards, held_out={"file": held_out.name, "examples": 0})
    assert refusal(shards) == (f"{held_out}: not empty, but corpus.json says it holds 0 "
                               f"examples; expected the folder as `prepare` wrote it")
    held_out.write_bytes(b"")
    assert read_description(shards)["held_out"]["examples"] == 0
    held_out.unlink()
    assert refusal(shards) == (f"--data {shards}: held-out file held-out.tfrecord listed in "
                               f"corpus.json is missing")


def test_a_vocab_size_other_than_the_vocabulary_is_refused(shards):
    path = edit_description(shards, vocab_size=999)
    assert refusal(shards).startswith(f"{path}: vocab_size is 999, but the vocabulary beside "
                                      f"it has ")


def test_a_prepared_folder_reads(prepared):
    description = read_description(prepared)
    assert description["max_len"] == 32 and len(description["shards"]) == 2


# --- the first record of each shard ---

def foreign_example() -> bytes:
    return tf.train.Example(features=tf.train.Features(feature={
        "text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"hello"]))
    })).SerializeToString()


def pair(ids, types=None, label=(0,)) -> bytes:
    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    types = [0] * len(ids) if types is None else types
    return tf.train.Example(features=tf.train.Features(feature={
        "input_ids": ints(ids), "token_type_ids": ints(types), "nsp_label": ints(label)
    })).SerializeToString()


def write_records(path, records):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in records:
            writer.write(record)


@pytest.mark.parametrize("records, expected", [
    ([foreign_example()] * 3, "record 1 has no int64 feature 'input_ids'"),
    ([pair([2, 5, 3], label=(2,))], r"record 1 has nsp_label \[2\]; expected \[0\] or \[1\]"),
    ([pair([2, 5000, 3])], r"record 1 has token id 5000 in input_ids; expected ids 0 to \d+"),
    ([pair([2, 5, 3], types=[0, 1])], "record 1 has token_type_ids that are not one 0 or 1"),
    ([pair([2] + [5] * 40 + [3])], "record 1 has 42 input_ids; expected 3 to max_len 32"),
    ([], "holds no record"),
])
def test_a_shard_whose_first_record_is_no_pair_is_named(shards, records, expected):
    write_records(shards / SHARD, records)
    message = refusal(shards)
    assert message.startswith(f"{shards / SHARD}: ") and message.endswith(EXPECTED), message
    assert re.search(expected, message), message


def claiming(length: int, data: bytes) -> bytes:
    """``data`` (a TFRecord file) with a first record length of ``length``, its CRC right."""
    header = struct.pack("<Q", length)
    return header + struct.pack("<I", masked_crc32c(header)) + data[12:]


@pytest.mark.parametrize("damage, expected", [
    (lambda data: os.urandom(3000), "not a TFRecord file (the first record's length fails its "
                                    "CRC check)"),
    (lambda data: data[:30], "not a whole TFRecord file (it ends inside the first record"),
    (lambda data: data[:20] + bytes([data[20] ^ 1]) + data[21:],
     "damaged (the first record's data fail their CRC check)"),
    # A length whose own check holds, claiming a terabyte (2 ** 40) or the most 8 bytes hold.
    (lambda data: claiming(2**40, data[:12]), "not a whole TFRecord file (it ends inside the "
                                              "first record, 1099511627776 bytes long)"),
    (lambda data: claiming(2**64 - 1, data), "not a whole TFRecord file (it ends inside the "
                                             "first record, 18446744073709551615 bytes long)"),
])
def test_a_shard_that_is_no_tfrecord_file_is_named(shards, damage, expected):
    path = shards / SHARD
    path.write_bytes(damage(path.read_bytes()))
    message = refusal(shards)
    assert message.startswith(f"{path}: {expected}") and message.endswith(EXPECTED), message


def test_train_on_foreign_shards_is_refused_before_tensorflow_starts(shards, tmp_path):
    write_records(shards / SHARD, [foreign_example()] * 3)
    line = fails_without_tensorflow("train", "--data", str(shards), "--model-dir",
                                    str(tmp_path / "model"), "--no-plots", timeout=120)
    assert line == (f"python -m nlp_tutorials.bert train: error: {shards / SHARD}: record 1 has "
                    f"no int64 feature 'input_ids'; {EXPECTED}")
    assert not (tmp_path / "model").exists()


# --- a shard damaged after its first record ---

def test_a_record_damaged_mid_shard_is_named_when_training_meets_it(shards):
    records = [record.numpy() for record in tf.data.TFRecordDataset(str(shards / SHARD))]
    write_records(shards / SHARD, records[:20] + [foreign_example()] + records[21:])
    data = ShardData(shards, read_tokenizer(shards))
    with pytest.raises(UserError) as info:
        for _ in itertools.islice(data.batches(8), 3 * data.steps_per_epoch(8)):
            pass
    assert str(info.value) == (f"{shards / SHARD}: record 21 has no int64 feature 'input_ids', "
                               f"met during training; {EXPECTED}")


def test_a_shard_cut_short_is_named_when_training_meets_it(shards):
    path = shards / SHARD
    path.write_bytes(path.read_bytes()[:-100])
    data = ShardData(shards, read_tokenizer(shards))
    with pytest.raises(UserError, match=rf"^{path}: record \d+ cannot be read \(truncated record "
                                        rf"at \d+\), met during training; expected the "):
        for _ in itertools.islice(data.batches(8), 3 * data.steps_per_epoch(8)):
            pass


def read_tokenizer(folder):
    from nlp_tutorials.text.tokenization import load_tokenizer

    return load_tokenizer(folder)


@pytest.mark.slow
def test_train_stops_in_one_line_at_a_damaged_record(shards, tmp_path, capsys):
    records = [record.numpy() for record in tf.data.TFRecordDataset(str(shards / SHARD))]
    write_records(shards / SHARD, records[:5] + [foreign_example()] + records[6:])
    status = main("bert", ["train", "--data", str(shards), "--steps", "30", "--dim", "16",
                           "--layers", "1", "--heads", "2", "--batch-size", "8", "--no-plots",
                           "--model-dir", str(tmp_path / "model")])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1, error
    assert f"error: {shards / SHARD}: record 6 has no int64 feature" in error


# --- the plain-Python reader against TensorFlow's ---

FEATURE = st.one_of(
    st.lists(st.binary(max_size=6), max_size=3).map(
        lambda v: tf.train.Feature(bytes_list=tf.train.BytesList(value=v))),
    st.lists(st.floats(width=32, allow_nan=False), max_size=3).map(
        lambda v: tf.train.Feature(float_list=tf.train.FloatList(value=v))),
    st.lists(st.integers(-2 ** 63, 2 ** 63 - 1), max_size=6).map(
        lambda v: tf.train.Feature(int64_list=tf.train.Int64List(value=v))),
    st.just(tf.train.Feature()))


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), FEATURE, max_size=4))
def test_examples_read_as_tensorflow_reads_them(features):
    serialized = tf.train.Example(
        features=tf.train.Features(feature=features)).SerializeToString()
    ours = example_features(serialized)
    theirs = tf.train.Example.FromString(serialized).features.feature
    assert set(ours) == set(theirs)
    for name, feature in theirs.items():
        kind = feature.WhichOneof("kind")
        assert ours[name][0] == kind
        if kind == "int64_list":
            assert ours[name][1] == list(feature.int64_list.value)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80))
def test_any_bytes_are_read_or_refused_as_a_record_error(data):
    try:
        example_features(data)
    except RecordError:
        pass


def test_first_record_read_as_tensorflow_reads_it(prepared, tmp_path):
    for path in sorted(prepared.glob("*.tfrecord")):
        expected = next(iter(tf.data.TFRecordDataset(str(path)))).numpy()
        assert read_first_record(path) == expected
    payload = np.random.default_rng(0).bytes(5000)  # a long record: CRC over many bytes
    write_records(tmp_path / "long.tfrecord", [payload, b"second"])
    assert read_first_record(tmp_path / "long.tfrecord") == payload
    (tmp_path / "empty.tfrecord").write_bytes(b"")
    assert read_first_record(tmp_path / "empty.tfrecord") is None
