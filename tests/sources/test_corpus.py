"""Pre-training on a text corpus: reading it as a stream, making pairs, TFRecord shards, bad input.

Pairs are checked on documents whose token ids say where they come from (document, sentence,
position), so every property is verified from the ids alone.
"""
import json
import random
import shutil
import signal
import struct
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nlp_tutorials.sources import corpus
from nlp_tutorials.sources.corpus import (
    HELD_OUT,
    TRAINED,
    CorpusCounts,
    CorpusData,
    corpus_files,
    document_pairs,
    pretraining_pairs,
    read_documents,
    tokenized_documents,
)
from nlp_tutorials.text.nsp import IS_NEXT, NOT_NEXT
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import WordTokenizer
from interrupt import signalled_when_paused
from support import fails_without_tensorflow, run_local_workers, run_main

ROOT = Path(__file__).resolve().parents[2]
WORDS = [f"w{i}" for i in range(200)]


def labelled_document(d: int, sentences: int, rng) -> list:
    """Sentences of ids d * 100000 + s * 100 + t: each id tells its document and place."""
    return [np.array([d * 100_000 + s * 100 + t for t in range(rng.randint(1, 20))],
                     dtype=np.int32) for s in range(sentences)]


def write_corpus(path: Path, documents: int, seed: int = 0, blank_runs: int = 1) -> Path:
    """A corpus file of ``documents`` documents of random words; ``blank_runs`` blank lines
    between documents (more than one makes empty documents)."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as handle:
        for _ in range(documents):
            for _ in range(rng.randint(1, 8)):
                handle.write(" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 15)))
                             + " .\n")
            handle.write("\n" * blank_runs)
    return path


@pytest.fixture
def text(tmp_path) -> Path:
    return write_corpus(tmp_path / "corpus.txt", 40)


@pytest.fixture
def tokenizer(text):
    return corpus.learn_tokenizer("word", 8000, [text], 1)


def test_glob_matching_nothing(tmp_path):
    with pytest.raises(UserError, match=r"no file matches") as err:
        corpus_files(str(tmp_path / "*.txt"))
    assert "\n" not in str(err.value)


def test_glob_finds_files_sorted(tmp_path):
    for name in ("b.txt", "a.txt"):
        write_corpus(tmp_path / name, 2)
    assert [p.name for p in corpus_files(str(tmp_path / "*.txt"))] == ["a.txt", "b.txt"]


def test_not_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"first line\n\nsecond doc\ncaf\xe9 au lait\n")
    with pytest.raises(UserError, match=rf"{path}:4: not valid UTF-8 \(byte 0xe9 at column 4\)"):
        list(read_documents([path], CorpusCounts()))


def test_empty_documents_and_files_are_counted_and_skipped(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("\n\none\ntwo\n\n\n\nthree\n\n", encoding="utf-8")
    empty = tmp_path / "b.txt"
    empty.write_text("\n\n", encoding="utf-8")
    counts = CorpusCounts()
    documents = list(read_documents([path, empty], counts))
    assert documents == [["one", "two"], ["three"]]
    # After "two": one blank line ends the document, the next two are two empty documents.
    assert (counts.empty_documents, counts.empty_files) == (2, 1)


def test_entirely_empty_corpus(tmp_path, tokenizer):
    path = tmp_path / "empty.txt"
    path.write_text("\n \n\n", encoding="utf-8")
    data = CorpusData(str(path), tokenizer, max_len=32)
    with pytest.raises(UserError, match="hold no text"):
        list(data.epoch_batches(0, 4))


def test_long_line_is_split_not_dropped(tokenizer):
    line = " ".join(WORDS[:70])
    counts = CorpusCounts()
    [document] = tokenized_documents([[line, "w1 w2"]], tokenizer, 29, counts)
    expected = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line))
    assert [len(s) for s in document] == [29, 29, 12, 2]
    assert np.concatenate(document[:3]).tolist() == expected
    assert counts.split_lines == 1


def test_long_document_is_cut_into_pieces(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "DOCUMENT_PIECE_LINES", 3)
    path = tmp_path / "long.txt"
    path.write_text("".join(f"s{i}\n" for i in range(7)) + "\n", encoding="utf-8")
    counts = CorpusCounts()
    assert [len(d) for d in read_documents([path], counts)] == [3, 3, 1]
    assert counts.empty_documents == 0


def pairs_of(documents, max_tokens, seed=0, buffer_size=1000):
    return list(pretraining_pairs(iter(documents), max_tokens, random.Random(seed), buffer_size))


def test_pairs_follow_bert_rules():
    rng = random.Random(1)
    documents = [labelled_document(d, rng.randint(1, 12), rng) for d in range(200)]
    max_tokens = 40
    pairs = pairs_of(documents, max_tokens)
    labels = np.array([label for _, _, label in pairs])
    used = set()
    for first, second, label in pairs:
        assert 1 <= first.size and 1 <= second.size and first.size + second.size <= max_tokens
        doc_a, doc_b = set(first // 100_000), set(second // 100_000)
        assert len(doc_a) == 1  # segment A: consecutive sentences of one document
        assert np.all(np.diff(first) > 0)  # in the document's order
        if label == IS_NEXT:
            assert doc_b == doc_a and second.min() > first.max()  # B continues A
            own = np.concatenate([first, second])
        else:
            assert len(doc_b) == 1 and doc_b != doc_a and np.all(np.diff(second) > 0)
            own = first
        assert not used & set(own.tolist())  # no sentence of a document is used twice
        used |= set(own.tolist())
    # NotNext: half of the multi-sentence chunks plus every single-sentence one.
    assert 0.45 < np.mean(labels == NOT_NEXT) < 0.8
    # Short targets (probability 0.1 per document) give pairs far below max_tokens.
    lengths = np.array([a.size + b.size for a, b, _ in pairs])
    assert np.mean(lengths < max_tokens // 2) > 0.02


def test_unused_sentences_start_the_next_chunk():
    """With no truncation (sentences of one token, a wide max), every sentence of a document
    is in exactly one A segment or IsNext B segment."""
    rng = random.Random(2)
    documents = [[np.array([d * 100_000 + s * 100]) for s in range(rng.randint(2, 30))]
                 for d in range(50)]
    pairs = pairs_of(documents, 100)
    own = [np.concatenate([a, b]) if label == IS_NEXT else a for a, b, label in pairs]
    used = np.sort(np.concatenate(own))
    expected = np.sort(np.concatenate([np.concatenate(d) for d in documents]))
    np.testing.assert_array_equal(used, expected)


def test_stream_holds_a_bounded_number_of_documents():
    rng = random.Random(3)
    consumed = []

    def documents():
        for d in range(300):
            consumed.append(d)
            yield labelled_document(d, rng.randint(1, 6), rng)

    buffer_size, taken = 10, set()
    for first, _, _ in pretraining_pairs(documents(), 30, random.Random(0), buffer_size):
        taken.add(int(first[0] // 100_000))  # every taken document gives at least one pair
        # Read but not yet taken: the documents waiting in the pool.
        assert len(consumed) - len(taken) <= buffer_size
    assert len(taken) == 300


def test_one_document_is_refused():
    rng = random.Random(0)
    with pytest.raises(UserError, match="at least two documents"):
        pairs_of([labelled_document(0, 5, rng)], 30)


def test_document_pairs_is_reproducible():
    rng = random.Random(4)
    documents = [labelled_document(d, 6, rng) for d in range(5)]
    runs = [list(document_pairs(documents[0], documents[1:], 30, random.Random(7)))
            for _ in range(2)]
    for (a1, b1, l1), (a2, b2, l2) in zip(*runs):
        assert l1 == l2 and a1.tolist() == a2.tolist() and b1.tolist() == b2.tolist()


SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # never chosen, never drawn


def masking_outcomes(original, batch, tokenizer) -> dict:
    """What BERT's masking did to ``original`` ids [n, step], given the ``batch`` it made:
    the count of chosen positions that became [MASK], another token, or stayed as they were.

    Checks on the way that only chosen positions changed, that ``mlm_ids`` hold the original
    ids there, that each row has round(15% of its real tokens) chosen (at least one), and that
    a replacement is never a special token."""
    masked = np.asarray(batch["input_ids"])
    positions, weights = np.asarray(batch["mlm_positions"]), np.asarray(batch["mlm_weights"]) > 0
    specials = [tokenizer.vocab.index(token) for token in SPECIAL_TOKENS]
    chosen = np.zeros(original.shape, dtype=bool)
    chosen[np.nonzero(weights)[0], positions[weights]] = True
    assert not (masked != original)[~chosen].any(), "an unchosen position changed"
    np.testing.assert_array_equal(np.asarray(batch["mlm_ids"])[weights], original[chosen])
    real = (~np.isin(original, specials)).sum(axis=1)
    np.testing.assert_array_equal(chosen.sum(axis=1), np.maximum(1, np.rint(0.15 * real)))
    now = masked[chosen]
    is_mask, kept = now == tokenizer.mask_id, now == original[chosen]
    assert not np.isin(now[~is_mask & ~kept], specials).any(), "a special token drawn"
    return {"mask": int(is_mask.sum()), "other": int((~is_mask & ~kept).sum()),
            "kept": int(kept.sum())}


def check_bert_proportions(counts: dict, tokenizer, only_mask: bool = False) -> None:
    """Chosen tokens: 80% [MASK], 10% a random ordinary token, 10% kept (a random draw of the
    token itself, 1 in V of them, shows as kept), each count within 5 standard deviations of
    its binomial. Each position is drawn independently, so a right masking misses that band
    with probability under 1e-6 per count; a 100/0/0 or 80/20/0 masking lands far outside it
    once a few hundred positions are counted."""
    total = sum(counts.values())
    ordinary = tokenizer.vocab_size - len(SPECIAL_TOKENS)  # V: what a random draw picks from
    expected = {"mask": 0.8, "other": 0.1 * (1 - 1 / ordinary), "kept": 0.1 + 0.1 / ordinary}
    for outcome, p in expected.items():
        if only_mask and outcome != "mask":
            continue
        band = 5 * np.sqrt(p * (1 - p) / total)
        assert abs(counts[outcome] / total - p) <= band, (outcome, counts, band)


def test_epochs_mask_afresh_and_are_reproducible(tmp_path, text, tokenizer):
    data = CorpusData(str(text), tokenizer, max_len=32, seed=3)
    first = next(data.epoch_batches(0, 4))
    again = next(CorpusData(str(text), tokenizer, max_len=32, seed=3).epoch_batches(0, 4))
    other = next(data.epoch_batches(1, 4))
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    assert not np.array_equal(first["input_ids"], other["input_ids"])
    # Masked positions hold the original id (80/10/10 replaced) and [MASK] shows up.
    assert (first["input_ids"] == tokenizer.mask_id).any()
    assert first["mlm_weights"].sum() > 0
    reseeded = next(CorpusData(str(text), tokenizer, max_len=32, seed=4).epoch_batches(0, 4))
    assert not np.array_equal(first["input_ids"], reseeded["input_ids"])
    # BERT's proportions, counted over every chosen position of an epoch of a larger corpus:
    # the same epoch unmasked gives the same pairs (its order does not depend on masking).
    big = write_corpus(tmp_path / "big.txt", 1000, seed=5)
    words = corpus.learn_tokenizer("word", 8000, [big], 1)
    data = CorpusData(str(big), words, max_len=32, seed=3, printer=lambda _: None)
    counts = {"mask": 0, "other": 0, "kept": 0}
    for clean, batch in zip(data.epoch_batches(0, 64, masked=False), data.epoch_batches(0, 64)):
        np.testing.assert_array_equal(clean["nsp_labels"], batch["nsp_labels"])
        np.testing.assert_array_equal(clean["token_type_ids"], batch["token_type_ids"])
        for outcome, count in masking_outcomes(clean["input_ids"], batch, words).items():
            counts[outcome] += count
    assert sum(counts.values()) > 5000
    check_bert_proportions(counts, words)


def test_word_vocabulary_is_capped(text):
    small = corpus.learn_tokenizer("word", 20, [text], 1)
    assert small.vocab_size == 20


# --- TFRecord shards (TensorFlow) ---

def prepare(text, output, shards, tokenizer, max_len=32, seed=1):
    from nlp_tutorials.sources.shards import prepare_shards

    return prepare_shards(str(text), output, shards, tokenizer, max_len, seed,
                          printer=lambda _: None)


def read_rows(files, shuffle=False):
    """(input_ids, token_type_ids, nsp_label) tuples of every example in ``files``."""
    import tensorflow as tf

    from nlp_tutorials.sources.shard_batches import example_dataset

    rows = []
    for serialized in example_dataset(files, seed=0, shuffle=shuffle):
        example = tf.train.Example.FromString(serialized.numpy()).features.feature
        rows.append(tuple(tuple(example[name].int64_list.value)
                          for name in ("input_ids", "token_type_ids", "nsp_label")))
    return rows


def tfrecords(path: Path) -> list:
    """The records of TFRecord file ``path``, read by hand: each is its length (uint64, little
    endian), 4 bytes of checksum, the bytes, 4 bytes of checksum (checksums not checked)."""
    raw, records, at = path.read_bytes(), [], 0
    while at < len(raw):
        (length,) = struct.unpack_from("<Q", raw, at)
        records.append(raw[at + 12:at + 12 + length])
        at += 12 + length + 4
    assert at == len(raw), f"{path} ends inside a record"
    return records


def shard_rows(path: Path) -> list:
    """(input_ids, token_type_ids, nsp_label) tuples of one shard, parsed from its bytes."""
    import tensorflow as tf

    rows = []
    for record in tfrecords(path):
        feature = tf.train.Example.FromString(record).features.feature
        rows.append(tuple(tuple(feature[name].int64_list.value)
                          for name in ("input_ids", "token_type_ids", "nsp_label")))
    return rows


def corpus_documents(path: Path) -> list:
    """The corpus file's documents as lists of words: lines split at spaces, lower-cased, a
    blank line between documents (the format write_corpus writes)."""
    documents, current = [], []
    for line in path.read_text(encoding="utf-8").splitlines():
        current.extend(line.lower().split())
        if not line.strip() and current:
            documents.append(current)
            current = []
    return documents + ([current] if current else [])


def starts(part: list, document: list) -> list:
    """Where ``part`` (a list of words) occurs in ``document``, as start indices."""
    return [i for i in range(len(document) - len(part) + 1) if document[i:i + len(part)] == part]


def check_pair_against_the_text(tokens, types, label, documents) -> None:
    """One stored pair, as tokens, against the corpus: ``[CLS] A [SEP] B [SEP]``, segment ids
    0 then 1, A a run of words of one document, B a run of the same document after A
    (IsNext) or of another document (NotNext)."""
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and tokens.count("[SEP]") == 2
    middle = tokens.index("[SEP]")
    first, second = tokens[1:middle], tokens[middle + 1:-1]
    assert first and second
    assert list(types) == [0] * (len(first) + 2) + [1] * (len(second) + 1)
    places = [(d, i) for d, document in enumerate(documents) for i in starts(first, document)]
    if label == IS_NEXT:
        assert any(j >= i + len(first) for d, i in places
                   for j in starts(second, documents[d])), (first, second)
    else:
        assert any(starts(second, other) for d, _ in places
                   for e, other in enumerate(documents) if e != d), (first, second)


def test_shards_hold_the_corpus_pairs(tmp_path, text, tokenizer):
    from nlp_tutorials.sources.shard_batches import worker_files
    from nlp_tutorials.sources.shards import read_description

    description = prepare(text, tmp_path / "shards", 3, tokenizer)
    assert description == read_description(tmp_path / "shards")
    # Each shard file read here byte by byte: as many pairs as corpus.json says.
    per_shard = {entry["file"]: shard_rows(tmp_path / "shards" / entry["file"])
                 for entry in description["shards"]}
    assert [len(per_shard[entry["file"]]) for entry in description["shards"]] == [
        entry["examples"] for entry in description["shards"]]
    rows = [row for shard in per_shard.values() for row in shard]
    assert sorted(read_rows(worker_files(tmp_path / "shards", description))) == sorted(rows)
    assert len(rows) == description["examples"] == sum(
        s["examples"] for s in description["shards"])
    labels = [label for _, _, (label,) in rows]
    assert (labels.count(IS_NEXT), labels.count(NOT_NEXT)) == (description["is_next"],
                                                               description["not_next"])
    assert labels.count(IS_NEXT) and labels.count(NOT_NEXT)
    # Every pair is made of the corpus' own words, as next-sentence prediction wants them.
    documents = corpus_documents(text)
    assert len(documents) == description["documents"]
    for ids, types, (label,) in rows:
        tokens = [tokenizer.vocab[i] for i in ids]
        check_pair_against_the_text(tokens, types, label, documents)
    # And the code that made them makes them again from the same seed, without TensorFlow:
    # the shards the trained documents' pairs, the held-out file the held-out ones'.
    held_out = shard_rows(tmp_path / "shards" / description["held_out"]["file"])
    for part, stored in ((TRAINED, rows), (HELD_OUT, held_out)):
        data = CorpusData(str(text), tokenizer, max_len=32, seed=1, part=part)
        expected = []
        for first, second, label in data.pairs(0, CorpusCounts(), random.Random(1)):
            ids = [tokenizer.cls_id, *first.tolist(), tokenizer.sep_id, *second.tolist(),
                   tokenizer.sep_id]
            types = [0] * (first.size + 2) + [1] * (second.size + 1)
            expected.append((tuple(ids), tuple(types), (label,)))
        assert sorted(stored) == sorted(expected)
    assert len(held_out) == description["held_out"]["examples"] > 0
    assert all(len(ids) <= 32 for ids, _, _ in rows + held_out)


def test_two_workers_read_disjoint_shards_covering_all(tmp_path, text, tokenizer):
    from nlp_tutorials.sources.shard_batches import ShardData, worker_files
    from nlp_tutorials.sources.shards import read_description

    description = prepare(text, tmp_path / "shards", 4, tokenizer)
    everything = read_rows(worker_files(tmp_path / "shards", description))
    # What each of two workers reads in one epoch (the files ShardData gives its pipeline).
    seen = [read_rows(ShardData(tmp_path / "shards", tokenizer, worker=(2, i)).files,
                      shuffle=True) for i in range(2)]
    assert len(set(everything)) == len(everything)  # distinct pairs: the check can tell
    assert not set(seen[0]) & set(seen[1])
    assert sorted(seen[0] + seen[1]) == sorted(everything)
    assert read_description(tmp_path / "shards")["examples"] == len(everything)


def test_more_workers_than_shards(tmp_path, text, tokenizer):
    from nlp_tutorials.sources.shard_batches import ShardData

    prepare(text, tmp_path / "shards", 1, tokenizer)
    with pytest.raises(UserError, match=r"1 shard\(s\) for 2 workers"):
        ShardData(tmp_path / "shards", tokenizer, worker=(2, 1))


def test_training_batches_are_masked_afresh(tmp_path, text, tokenizer):
    from nlp_tutorials.sources.shard_batches import ShardData

    prepare(text, tmp_path / "shards", 2, tokenizer)
    data = ShardData(tmp_path / "shards", tokenizer, seed=5)
    steps = data.steps_per_epoch(8)
    clean = [b for b in data.dataset(8, masked=False).take(2 * steps)]
    masked = [b for b in data.dataset(8, masked=True).take(2 * steps)]
    counts = {"mask": 0, "other": 0, "kept": 0}
    for plain, batch in zip(clean, masked):
        ids, original = batch["input_ids"].numpy(), plain["input_ids"].numpy()
        np.testing.assert_array_equal(batch["nsp_labels"], plain["nsp_labels"])
        changed = ids != original
        rows, cols = np.nonzero(changed)
        positions = batch["mlm_positions"].numpy()
        weights = batch["mlm_weights"].numpy() > 0
        assert all(c in positions[r][weights[r]] for r, c in zip(rows, cols))
        np.testing.assert_array_equal(
            np.take_along_axis(original, positions, 1)[weights], batch["mlm_ids"].numpy()[weights])
        for outcome, count in masking_outcomes(original, batch, tokenizer).items():
            counts[outcome] += count
    # The masking changed the batches: most chosen tokens became [MASK] (too few positions
    # here to tell 10% from 10%; test_epochs_mask_afresh_and_are_reproducible does that).
    assert sum(counts.values()) > 300
    check_bert_proportions(counts, tokenizer, only_mask=True)
    # Masking of batch k depends on k: two numbers give two maskings of the same rows.
    from nlp_tutorials.sources.shard_batches import batch_masker

    mask = batch_masker(tokenizer, 5, 0, 32)
    one, two = mask(0, clean[0]), mask(1, clean[0])
    assert not np.array_equal(one["mlm_positions"], two["mlm_positions"])
    np.testing.assert_array_equal(mask(0, clean[0])["mlm_positions"], one["mlm_positions"])


def test_failed_prepare_leaves_nothing(tmp_path, tokenizer):
    path = write_corpus(tmp_path / "c.txt", 30)
    with open(path, "ab") as handle:
        handle.write(b"bad \xff byte\n")
    output = tmp_path / "out" / "shards"
    with pytest.raises(UserError, match=r"c.txt:\d+: not valid UTF-8"):
        prepare(path, output, 2, tokenizer)
    assert not output.exists() and list((tmp_path / "out").iterdir()) == []


def test_output_must_be_new(tmp_path, text, tokenizer):
    output = tmp_path / "shards"
    output.mkdir()
    (output / "keep.txt").write_text("x")
    with pytest.raises(UserError, match="already exists"):
        prepare(text, output, 1, tokenizer)
    assert (output / "keep.txt").read_text() == "x"


def test_too_many_shards(tmp_path, text, tokenizer):
    with pytest.raises(UserError, match="too few to fill every shard"):
        prepare(text, tmp_path / "shards", 500, tokenizer)
    assert not (tmp_path / "shards").exists()
    with pytest.raises(UserError, match="expected 1 to 512"):
        prepare(text, tmp_path / "shards", 100_000, tokenizer)


def test_other_tokenizer_is_refused(tmp_path, text, tokenizer):
    from nlp_tutorials.sources.shards import check_same_tokenizer, read_description

    prepare(text, tmp_path / "shards", 1, tokenizer)
    other = WordTokenizer(tokenizer.vocab[:-1])
    with pytest.raises(UserError, match="tokenized with another vocabulary"):
        check_same_tokenizer(tmp_path / "shards", other, "model")
    check_same_tokenizer(tmp_path / "shards", tokenizer, "model")  # the same one passes
    other.save(tmp_path / "shards")  # vocab.txt swapped after prepare
    with pytest.raises(UserError, match="not the vocabulary the shards were written with"):
        read_description(tmp_path / "shards")


def test_data_folder_errors(tmp_path, text, tokenizer):
    from nlp_tutorials.sources.shards import read_description

    with pytest.raises(UserError, match="no such folder"):
        read_description(tmp_path / "nowhere")
    with pytest.raises(UserError, match="no corpus.json"):
        read_description(tmp_path)
    prepare(text, tmp_path / "shards", 2, tokenizer)
    (tmp_path / "shards" / "shard-00001-of-00002.tfrecord").unlink()
    with pytest.raises(UserError, match="shard shard-00001-of-00002.tfrecord .* is missing"):
        read_description(tmp_path / "shards")


def test_input_pipeline_of_each_worker(monkeypatch):
    from nlp_tutorials.training.distribute import input_pipeline

    cluster = {"chief": ["a:1"], "worker": ["b:1", "c:1"]}
    for task, expected in ((("chief", 0), (3, 0)), (("worker", 1), (3, 2))):
        monkeypatch.setenv("TF_CONFIG", json.dumps(
            {"cluster": cluster, "task": {"type": task[0], "index": task[1]}}))
        assert input_pipeline("multiworker") == expected
    assert input_pipeline("default") == (1, 0)


# --- the command line ---

def run_cli(*args):
    """``python -m nlp_tutorials.bert ARGS``, in this process (support.run_main)."""
    return run_main("bert", *args)


@pytest.mark.parametrize("args, expected", [
    (["--corpus", "a.txt", "--data", "d"], "not allowed with argument"),
    (["--corpus", "a.txt", "--nsp-mode", "paraphrase"], "a corpus has no paraphrase labels"),
    (["--corpus", "/nowhere/*.txt"], "--corpus /nowhere/*.txt: no file matches"),
    (["--data", "/nowhere"], "--data /nowhere: no such folder"),
])
def test_train_flag_errors(args, expected):
    assert expected in fails_without_tensorflow("train", *args)


def test_prepare_errors(tmp_path):
    assert "no file matches" in fails_without_tensorflow(
        "prepare", "--corpus", str(tmp_path / "*.txt"), "--output", "x")
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"fine\n\xff\n")
    assert f"{bad}:2: not valid UTF-8" in fails_without_tensorflow(
        "prepare", "--corpus", str(bad), "--output", str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


TINY = ["--dim", "32", "--layers", "1", "--heads", "2", "--batch-size", "8", "--no-plots"]


@pytest.mark.slow
def test_prepare_train_and_resume(tmp_path, text):
    shards, model_dir = tmp_path / "shards", tmp_path / "model"
    result = run_cli("prepare", "--corpus", str(text), "--output", str(shards), "--shards", "2",
                     "--max-len", "32")
    assert result.returncode == 0, result.stderr
    result = run_cli("train", "--data", str(shards), "--steps", "3", "--model-dir",
                     str(model_dir), *TINY)
    assert result.returncode == 0, result.stderr
    assert json.loads((model_dir / "train_config.json").read_text())["data"] == str(shards)
    result = run_cli("train", "--resume", "--steps", "5", "--model-dir", str(model_dir),
                     "--no-plots")
    assert result.returncode == 0 and "resuming from checkpoint ckpt-3" in result.stdout
    result = run_cli("train", "--data", str(shards), "--tokenizer", "wordpiece",
                     "--model-dir", str(tmp_path / "m2"), *TINY)
    assert result.returncode == 2 and "--tokenizer: with --data" in result.stderr
    # The shards prepared again, in the same folder, with another vocabulary: refused.
    shutil.rmtree(shards)
    assert run_cli("prepare", "--corpus", str(text), "--output", str(shards), "--max-len", "32",
                   "--vocab-size", "50").returncode == 0
    result = run_cli("train", "--resume", "--steps", "6", "--model-dir", str(model_dir),
                     "--no-plots")
    assert result.returncode == 2 and "tokenized with another vocabulary" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_train_on_a_streamed_corpus(tmp_path, text):
    result = run_cli("train", "--corpus", str(text), "--max-len", "32", "--steps", "3",
                     "--model-dir", str(tmp_path / "model"), *TINY)
    assert result.returncode == 0, result.stderr
    assert "steps 0 -> 3" in result.stdout
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\nalso ok\n\xc3(\n")
    result = run_cli("train", "--corpus", str(bad), "--model-dir", str(tmp_path / "m2"), *TINY)
    assert result.returncode == 2 and f"{bad}:4: not valid UTF-8" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1




@pytest.mark.slow
def test_two_workers_train_on_their_own_shards(tmp_path, text):
    shards = tmp_path / "shards"
    assert run_cli("prepare", "--corpus", str(text), "--output", str(shards), "--shards", "2",
                   "--max-len", "32").returncode == 0
    results = run_local_workers(
        ["-m", "nlp_tutorials.bert", "train", "--data", str(shards), "--steps", "3",
         "--strategy", "multiworker", "--model-dir", str(tmp_path / "model"), *TINY])
    counts = [s["examples"] for s in json.loads((shards / "corpus.json").read_text())["shards"]]
    for index, (returncode, out, err) in enumerate(results):
        assert returncode == 0, err[-3000:]
        assert "2 replica(s)" in out and "steps 0 -> 3" in out, out
        # Its epoch is its own shard in its half (4 rows) of each global batch of 8.
        assert f"{counts[index] // 4} steps per epoch" in out, out


@pytest.mark.slow
def test_two_workers_read_each_pair_once_in_an_epoch(tmp_path, text):
    """Two local worker processes, each with its TF_CONFIG, read one epoch through the training
    loop's input path: no pair is read by both, and together they read every pair."""
    shards = tmp_path / "shards"
    assert run_cli("prepare", "--corpus", str(text), "--output", str(shards), "--shards", "4",
                   "--max-len", "32").returncode == 0
    outputs = [tmp_path / f"worker-{index}.json" for index in range(2)]
    results = run_local_workers([str(ROOT / "tests" / "shard_epoch.py"), str(shards),
                                 str(tmp_path)])
    for returncode, _, err in results:
        assert returncode == 0, err[-3000:]
    read = [json.loads(path.read_text()) for path in outputs]
    assert sorted(tuple(r["pipeline"]) for r in read) == [(2, 0), (2, 1)]
    as_tuples = [[(tuple(ids), tuple(types), label) for ids, types, label in r["rows"]]
                 for r in read]
    everything = [(ids, types, label[0]) for ids, types, label in
                  read_rows([str(f) for f in sorted(shards.glob("shard-*.tfrecord"))])]
    assert len(set(everything)) == len(everything)  # distinct pairs: the check can tell
    assert not set(as_tuples[0]) & set(as_tuples[1])
    assert sorted(as_tuples[0] + as_tuples[1]) == sorted(everything)


def test_wordpiece_corpus_with_whole_word_masking(text):
    wordpiece = corpus.learn_tokenizer("wordpiece", 120, [text], 1)
    assert wordpiece.vocab_size == 120 and wordpiece.continuation_ids
    data = CorpusData(str(text), wordpiece, max_len=32, seed=0, whole_word_mask=True)
    batch = next(data.epoch_batches(0, 8))
    weights = batch["mlm_weights"] > 0
    rows = np.nonzero(weights)[0]
    original = batch["input_ids"].copy()
    original[rows, batch["mlm_positions"][weights]] = batch["mlm_ids"][weights]
    # A ## piece right after [CLS] or [SEP] (a segment cut mid-word) starts a word of its own.
    after_special = np.pad(np.isin(original[:, :-1], list(wordpiece.special_ids)),
                           ((0, 0), (1, 0)))
    continues = np.isin(original, list(wordpiece.continuation_ids)) & ~after_special
    assert continues.any()
    chosen = np.zeros(original.shape, dtype=bool)
    chosen[rows, batch["mlm_positions"][weights]] = True
    # A word is masked whole: a ## piece is chosen exactly when the token before it is.
    np.testing.assert_array_equal(chosen[:, 1:][continues[:, 1:]],
                                  chosen[:, :-1][continues[:, 1:]])


PAUSED_PREPARE = """
import os, sys
from interrupt import pause_at_write
os.fsync = pause_at_write(1, sys.argv[1])  # its first file: the shards' vocab.txt
from nlp_tutorials.cli import main
sys.exit(main("bert", sys.argv[2:]))
"""


@pytest.mark.slow
def test_interrupted_prepare_leaves_nothing(tmp_path, text):
    """A real Ctrl-C (SIGINT) to a real `prepare`, sent once its shards are written into the
    temporary folder: one line, exit status 130, and nothing left, that folder included."""
    marker, output = tmp_path / "paused", tmp_path / "out" / "shards"
    seen = []

    def at_pause(pid):  # what the interrupt lands on: the shards, written under a hidden name
        seen.extend(sorted(p.name for p in (output.parent / f".shards.tmp{pid}").iterdir()))

    status, _, err = signalled_when_paused(
        ["-c", PAUSED_PREPARE, str(marker), "prepare", "--corpus", str(text), "--output",
         str(output), "--shards", "2"], marker, signal.SIGINT, before_signal=at_pause)
    assert {"shard-00000-of-00002.tfrecord", "shard-00001-of-00002.tfrecord"} <= set(seen)
    assert (status, err) == (130, f"python -m nlp_tutorials.bert prepare: interrupted; "
                                  f"{output} was not written\n")
    assert list((tmp_path / "out").iterdir()) == []


@settings(max_examples=200, deadline=None)
@given(text=st.text(alphabet="ab\r\n", max_size=40), block=st.integers(1, 5))
def test_lines_end_at_each_newline_of_every_system(text, block, tmp_path_factory):
    """\n, \r\n and a lone \r end a line, however the file's blocks fall: as Python's own
    str.splitlines splits text made of these characters only."""
    path = tmp_path_factory.mktemp("lines") / "corpus.txt"
    path.write_bytes(text.encode())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(corpus, "READ_BYTES", block)
        lines = [line for _, line in corpus.read_lines(path)]
    assert lines == [line.strip() for line in text.splitlines()]


def test_a_corpus_with_old_mac_line_ends_holds_its_documents(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(b"One.\rTwo.\r\rThree.\r")
    assert list(corpus.read_documents([path], corpus.CorpusCounts())) == [["One.", "Two."],
                                                                          ["Three."]]
