import subprocess
import sys

import numpy as np
import pytest

from nlp_tutorials.tasks.glue import TextExample
from nlp_tutorials.tasks.mrpc import DEFAULT_DATA_DIR, MrpcTask, load_mrpc
from nlp_tutorials.text.nsp import IS_NEXT, NOT_NEXT, nsp_pairing
from nlp_tutorials.sources.mrpc import MrpcPretrainingData
from nlp_tutorials.text.masking import default_max_predictions, mask_tokens
from nlp_tutorials.text.packing import trim_padding
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import WordPieceTokenizer, WordTokenizer

HEADER = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"


@pytest.fixture(scope="module")
def train():
    return load_mrpc("train")


@pytest.fixture(scope="module")
def tokenizer(train):
    return WordTokenizer.build(s for p in train for s in (p.text, p.pair))


@pytest.fixture(scope="module")
def pretraining(tokenizer, train):
    return MrpcPretrainingData(tokenizer, train, seed=3)


def assert_one_line(err, *parts):
    message = str(err.value)
    assert "\n" not in message
    for part in parts:
        assert str(part) in message


# --- reading MRPC ---------------------------------------------------------------------------

def test_real_files(train):
    test = load_mrpc("test", DEFAULT_DATA_DIR)
    assert (len(train), sum(p.label == "1" for p in train)) == (4076, 2753)
    assert (len(test), sum(p.label == "1" for p in test)) == (1725, 1147)
    assert train[0] == TextExample(
        'Amrozi accused his brother, whom he called "the witness", of deliberately distorting '
        'his evidence.',
        'Referring to him as only "the witness", Amrozi accused his brother of deliberately '
        'distorting his evidence.', "1")
    # An unclosed quote stays inside its sentence instead of swallowing the next lines.
    assert any(p.pair.startswith('"') and p.pair.count('"') == 1 for p in train)


def write_mrpc(tmp_path, body: bytes, name="msr_paraphrase_train.txt"):
    (tmp_path / name).write_bytes(body)
    return tmp_path / name


def test_small_file_with_lf_and_trailing_blank_line(tmp_path):
    write_mrpc(tmp_path, (HEADER + '\n0\t1\t2\t"Hi\tthere\n\n').encode())
    assert load_mrpc("train", tmp_path) == [TextExample('"Hi', "there", "0")]


@pytest.mark.parametrize("body, expected", [
    (b"", "holds no MRPC examples"),
    (b"\xef\xbb\xbf\r\n", "holds no MRPC examples"),
    (b"Quality\tID\r\n1\ta\tb\tc\td\r\n", ":1: no column '#1 String'"),
    (HEADER.encode() + b"\r\n", "holds no MRPC examples"),
    (HEADER.encode() + b"\r\n1\ta\tb\tc\td\r\n1\ta\tb\tc\r\n", ":3: expected 5"),
    (HEADER.encode() + b"\r\n1\ta\tb\tc\td\r\n\r\n1\ta\tb\tc\td\r\n", ":3: expected 5"),
    (HEADER.encode() + b"\r\n2\ta\tb\tc\td\r\n", ":2: unknown label '2'"),
    (HEADER.encode() + b"\r\nyes\ta\tb\tc\td\r\n", ":2: unknown label 'yes'"),
    (HEADER.encode() + b"\r\n1\ta\tb\tc\td\r\n0\ta\tb\tc\xff\td\r\n", ":3: not valid UTF-8"),
])
def test_bad_files(tmp_path, body, expected):
    path = write_mrpc(tmp_path, body)
    with pytest.raises(UserError) as err:
        load_mrpc("train", tmp_path)
    assert_one_line(err, path, expected)


def test_missing_folder_and_file(tmp_path):
    with pytest.raises(UserError) as err:
        load_mrpc("train", tmp_path / "nowhere")
    assert_one_line(err, tmp_path / "nowhere", "msr_paraphrase_train.txt")
    with pytest.raises(UserError) as err:
        load_mrpc("test", tmp_path)
    assert_one_line(err, tmp_path / "msr_paraphrase_test.txt", "not found")


def test_unknown_split():
    with pytest.raises(UserError) as err:
        load_mrpc("dev")
    assert_one_line(err, "'dev'", "train", "test")


# --- encoding -------------------------------------------------------------------------------

def test_encode_pair_layout_and_segments(tokenizer):
    a, b = ["the", "company"], ["a", "dog", "ran"]
    ids, types = tokenizer.encode_tokens(a, b, 9)
    assert ids == [2] + tokenizer.convert_tokens_to_ids(a) + [3] \
        + tokenizer.convert_tokens_to_ids(b) + [3, 0]
    assert types == [0, 0, 0, 0, 1, 1, 1, 1, 0]
    ids, types = tokenizer.encode_tokens(a, None, 6)
    assert ids == [2] + tokenizer.convert_tokens_to_ids(a) + [3, 0, 0]
    assert types == [0] * 6


@pytest.mark.parametrize("len_a, len_b, max_len, kept", [
    (10, 10, 18, (8, 7)),
    (3, 20, 18, (3, 12)),
    (20, 3, 18, (12, 3)),
    (8, 9, 18, (8, 7)),
    (5, 5, 13, (5, 5)),
    (4, 4, 3, (0, 0)),
])
def test_longest_first_truncation(tokenizer, len_a, len_b, max_len, kept):
    words = tokenizer.vocab[5:]
    a, b = words[:len_a], words[100:100 + len_b]
    ids, types = tokenizer.encode_tokens(a, b, max_len)
    expected = ([2] + tokenizer.convert_tokens_to_ids(a[:kept[0]]) + [3]
                + tokenizer.convert_tokens_to_ids(b[:kept[1]]) + [3])
    assert ids == expected + [0] * (max_len - len(expected))
    assert types.count(1) == kept[1] + 1


def test_mrpc_encoding_matches_encoding_each_pair_alone(tokenizer, train):
    # Its speed (every MRPC pair in under 2 s) is benchmarks/encoding_speed.py's to measure.
    pairs = train + load_mrpc("test")
    encoded = MrpcTask().encode(tokenizer, pairs, 64)
    assert encoded["input_ids"].shape == encoded["token_type_ids"].shape == (len(pairs), 64)
    assert all(v.dtype == np.int32 for v in encoded.values())
    assert encoded["labels"].tolist() == [int(p.label) for p in pairs]
    for i, pair in enumerate(pairs[::97]):
        ids, types = tokenizer.encode_tokens(tokenizer.tokenize(pair.text),
                                             tokenizer.tokenize(pair.pair), 64)
        assert encoded["input_ids"][i * 97].tolist() == ids
        assert encoded["token_type_ids"][i * 97].tolist() == types


def test_mrpc_longest_pair_length(tokenizer, train):
    longest = MrpcTask().longest(tokenizer, train)
    encoded = MrpcTask().encode(tokenizer, train, longest)
    assert (encoded["input_ids"] != 0).sum(axis=1).max() == longest
    assert (encoded["input_ids"][:, -1] != 0).any()


# --- masking --------------------------------------------------------------------------------

def test_masking_statistics():
    rng = np.random.default_rng(0)
    n, step, vocab_size, specials = 20_000, 40, 50, frozenset(range(5))
    lengths = rng.integers(1, step - 2, size=n)  # real tokens per row
    ids = rng.integers(5, vocab_size, size=(n, step))
    ids[:, 0] = 2
    ids[np.arange(n), lengths + 1] = 3
    ids[np.arange(step)[None, :] > lengths[:, None] + 1] = 0
    ids[::7, 5] = 1  # some [UNK]s, which are special too
    max_predictions = default_max_predictions(step)

    out = mask_tokens(ids, np.random.default_rng(1), vocab_size=vocab_size, mask_id=4,
                      special_ids=specials, max_predictions=max_predictions)
    assert out["input_ids"].dtype == out["mlm_positions"].dtype == out["mlm_ids"].dtype == np.int32
    assert out["mlm_weights"].dtype == np.float32
    assert out["mlm_positions"].shape == (n, max_predictions)

    chosen = out["mlm_weights"] == 1.0
    assert set(np.unique(out["mlm_weights"])) <= {0.0, 1.0}
    real = ~np.isin(ids, list(specials))
    counts = chosen.sum(axis=1)
    assert (counts >= 1).all()
    assert (counts == np.maximum(1, np.rint(real.sum(axis=1) * 0.15))).all()
    assert abs(counts.sum() / real.sum() - 0.15) < 0.01
    # Chosen positions come first, increasing, and point at real tokens; padding is all zero.
    rows = np.broadcast_to(np.arange(n)[:, None], chosen.shape)
    positions = out["mlm_positions"]
    assert (positions[~chosen] == 0).all() and (out["mlm_ids"][~chosen] == 0).all()
    assert real[rows[chosen], positions[chosen]].all()
    assert (np.diff(positions, axis=1)[chosen[:, 1:]] > 0).all()
    assert (out["mlm_ids"][chosen] == ids[rows[chosen], positions[chosen]]).all()
    # Everything not chosen is untouched.
    changed = out["input_ids"] != ids
    changed[rows[chosen], positions[chosen]] = False
    assert not changed.any()

    new = out["input_ids"][rows[chosen], positions[chosen]]
    old = out["mlm_ids"][chosen]
    masked = new == 4
    randomised = (new != 4) & (new != old)
    assert abs(masked.mean() - 0.8) < 0.02
    # A random id can equal the original: 1 in 45 ordinary ids here.
    assert abs(randomised.mean() - 0.1 * 44 / 45) < 0.02
    assert abs((new == old).mean() - (0.1 + 0.1 / 45)) < 0.02
    assert not np.isin(new[~masked], list(specials)).any()


def _word_rows(rng, n, step):
    """Rows of [CLS] tokens [SEP] [PAD]... with ids 5..49 for the tokens."""
    ids = rng.integers(5, 50, size=(n, step))
    lengths = rng.integers(1, step - 2, size=n)
    ids[:, 0] = 2
    ids[np.arange(n), lengths + 1] = 3
    ids[np.arange(step)[None, :] > lengths[:, None] + 1] = 0
    return ids


def test_whole_word_masking_statistics():
    rng = np.random.default_rng(0)
    n, step, specials = 20_000, 40, frozenset(range(5))
    continuation = frozenset(range(30, 50))  # ids 30..49 are "##" pieces: 40% of tokens
    ids = _word_rows(rng, n, step)
    max_predictions = default_max_predictions(step)
    out = mask_tokens(ids, np.random.default_rng(1), vocab_size=50, mask_id=4,
                      special_ids=specials, max_predictions=max_predictions,
                      continuation_ids=continuation)
    chosen = out["mlm_weights"] == 1.0
    real = ~np.isin(ids, list(specials))
    counts = chosen.sum(axis=1)
    target = np.maximum(1, np.rint(real.sum(axis=1) * 0.15))
    assert (counts <= target).all()  # whole words that fit, never more than the count
    assert counts.sum() / real.sum() > 0.14  # ... and nearly always exactly the count
    rows = np.broadcast_to(np.arange(n)[:, None], chosen.shape)
    positions = out["mlm_positions"]
    assert real[rows[chosen], positions[chosen]].all()
    assert (positions[~chosen] == 0).all() and (np.diff(positions, axis=1)[chosen[:, 1:]] > 0).all()
    # Whole words: a piece is masked exactly when the token before it is (the word's start).
    masked = np.zeros(ids.shape, dtype=bool)
    masked[rows[chosen], positions[chosen]] = True
    piece = np.isin(ids, list(continuation)) & real
    piece[:, 0] = False
    inner = piece & np.roll(real, 1, axis=1)
    assert (masked[:, 1:][inner[:, 1:]] == masked[:, :-1][inner[:, 1:]]).all()
    assert masked[inner].sum() > 0.1 * inner.sum() * 0.15  # pieces do get masked
    # The 80/10/10 choice stays per token.
    new = out["input_ids"][rows[chosen], positions[chosen]]
    old = out["mlm_ids"][chosen]
    assert abs((new == 4).mean() - 0.8) < 0.02
    assert abs((new == old).mean() - (0.1 + 0.1 / 45)) < 0.02
    assert not np.isin(new[new != 4], list(specials)).any()


def test_whole_word_masking_by_hand():
    # [CLS] un ##aff ##able cat ##s [SEP] with 2 to mask: "cat ##s" is the only word that fits.
    cls, sep, un, aff, able, cat, s = 2, 3, 5, 6, 7, 8, 9
    ids = np.array([[cls, un, aff, able, cat, s, sep, 0]] * 50)
    for seed in range(10):
        out = mask_tokens(ids, np.random.default_rng(seed), vocab_size=10, mask_id=4,
                          special_ids=frozenset(range(5)), max_predictions=3, mask_prob=0.4,
                          continuation_ids={aff, able, s})
        assert (out["mlm_positions"] == [4, 5, 0]).all()
        assert (out["mlm_ids"] == [cat, s, 0]).all()
    # A "##" piece right after [CLS] has no word to join, so it starts one.
    out = mask_tokens(np.array([[cls, s, sep]]), np.random.default_rng(0), vocab_size=10,
                      mask_id=4, special_ids=frozenset(range(5)), max_predictions=1,
                      continuation_ids={s})
    assert out["mlm_positions"].tolist() == [[1]]


def test_masking_needs_room():
    ids = np.array([[2] + [7] * 20 + [3]])
    with pytest.raises(UserError) as err:
        mask_tokens(ids, np.random.default_rng(0), vocab_size=10, mask_id=4,
                    special_ids=frozenset(range(5)), max_predictions=2)
    assert_one_line(err, "max_predictions=2")


def test_default_max_predictions_always_fits():
    for max_len in range(3, 300):
        limit = default_max_predictions(max_len)
        ids = np.full((1, max_len), 9)
        ids[0, 0], ids[0, -1] = 2, 3
        mask_tokens(ids, np.random.default_rng(0), vocab_size=10, mask_id=4,
                    special_ids=frozenset(range(5)), max_predictions=limit)
    assert default_max_predictions(128) == 19


# --- next sentence prediction ---------------------------------------------------------------

def test_nsp_random_mode():
    second, labels = nsp_pairing(10_000, "random", np.random.default_rng(0))
    assert labels.dtype == np.int32 and set(labels.tolist()) == {IS_NEXT, NOT_NEXT}
    assert abs(labels.mean() - 0.5) < 0.02
    own = np.arange(10_000)
    assert (second[labels == IS_NEXT] == own[labels == IS_NEXT]).all()
    others = second[labels == NOT_NEXT]
    assert (others != own[labels == NOT_NEXT]).all()
    assert ((0 <= others) & (others < 10_000)).all()


def test_nsp_paraphrase_mode(train):
    second, labels = nsp_pairing(50, "paraphrase", None, labels=[int(p.label) for p in train[:50]])
    assert labels.tolist() == [int(p.label) for p in train[:50]]
    assert second.tolist() == list(range(50))  # every pair keeps its own second sentence


def test_nsp_unknown_mode():
    with pytest.raises(UserError) as err:
        nsp_pairing(2, "shuffle", np.random.default_rng(0))
    assert_one_line(err, "shuffle", "random", "paraphrase")


# --- pre-training epochs --------------------------------------------------------------------

def test_epoch_shapes_and_freshness(pretraining, train):
    n, max_len, k = len(train), pretraining.max_len, pretraining.max_predictions
    assert max_len == 100 and k == default_max_predictions(100)
    epoch = pretraining.epoch(0)
    assert {key: (v.shape, v.dtype) for key, v in epoch.items()} == {
        "input_ids": ((n, max_len), np.int32), "token_type_ids": ((n, max_len), np.int32),
        "nsp_labels": ((n,), np.int32), "mlm_positions": ((n, k), np.int32),
        "mlm_ids": ((n, k), np.int32), "mlm_weights": ((n, k), np.float32)}
    again = pretraining.epoch(0)
    assert all((epoch[key] == again[key]).all() for key in epoch)
    later = pretraining.epoch(1)
    assert (epoch["input_ids"] != later["input_ids"]).any()
    assert abs(epoch["nsp_labels"].mean() - 0.5) < 0.05


def test_epoch_unmasked_is_clean(pretraining, tokenizer, train):
    epoch = pretraining.epoch(np.random.default_rng(5), masked=False, shuffle=False)
    assert set(epoch) == {"input_ids", "token_type_ids", "nsp_labels"}
    assert not (epoch["input_ids"] == tokenizer.mask_id).any()
    encoded = MrpcTask().encode(tokenizer, train, pretraining.max_len)
    is_next = epoch["nsp_labels"] == IS_NEXT
    assert (epoch["input_ids"][is_next] == encoded["input_ids"][is_next]).all()
    assert (epoch["token_type_ids"][is_next] == encoded["token_type_ids"][is_next]).all()
    assert (epoch["input_ids"][~is_next] != encoded["input_ids"][~is_next]).any(axis=1).all()


@pytest.mark.slow
def test_whole_word_epoch_with_wordpiece(train):
    wordpiece = WordPieceTokenizer.train([s for p in train for s in (p.text, p.pair)], 2000)
    data = MrpcPretrainingData(wordpiece, train[:500], seed=3, whole_word_mask=True)
    examples = data.epoch(0)
    rows = np.broadcast_to(np.arange(500)[:, None], examples["mlm_positions"].shape)
    chosen = examples["mlm_weights"] == 1.0
    masked = np.zeros(examples["input_ids"].shape, dtype=bool)
    masked[rows[chosen], examples["mlm_positions"][chosen]] = True
    clean = data.epoch(0, masked=False)["input_ids"]  # same pairing and order, unmasked
    pieces = np.isin(clean, list(wordpiece.continuation_ids))
    pieces[:, 0] = False
    assert pieces.any() and (masked[:, 1:][pieces[:, 1:]] == masked[:, :-1][pieces[:, 1:]]).all()


def test_epoch_paraphrase_mode(tokenizer, train):
    data = MrpcPretrainingData(tokenizer, train[:300], max_len=48, nsp_mode="paraphrase")
    epoch = data.epoch(0, shuffle=False)
    assert epoch["nsp_labels"].tolist() == [int(p.label) for p in train[:300]]
    assert epoch["input_ids"].shape == (300, 48)


@pytest.mark.parametrize("kwargs, expected", [
    ({"nsp_mode": "next"}, "random, paraphrase"),
    ({"max_predictions": 2}, "max_predictions=2"),
    ({"max_len": 2}, "max_len=2"),
    ({"seed": -1}, "seed=-1"),
])
def test_pretraining_data_rejects_bad_settings(tokenizer, train, kwargs, expected):
    with pytest.raises(UserError) as err:
        MrpcPretrainingData(tokenizer, train[:10], **kwargs)
    assert_one_line(err, expected)


def test_dataset_static_shapes_and_reproducible(tokenizer, train):
    import tensorflow as tf

    def first_batches(seed, masked=True):
        data = MrpcPretrainingData(tokenizer, train[:200], max_len=40, seed=seed)
        return list(data.dataset(16, masked=masked).take(14).as_numpy_iterator())

    batches = first_batches(7)
    data = MrpcPretrainingData(tokenizer, train[:200], max_len=40, seed=7)
    spec = data.dataset(16).element_spec
    assert spec["input_ids"].shape == (16, 40) and spec["input_ids"].dtype == tf.int32
    assert spec["mlm_weights"].shape == (16, data.max_predictions)
    assert spec["mlm_weights"].dtype == tf.float32
    assert spec["nsp_labels"].shape == (16,)
    assert len(batches) == 14  # crosses into the second epoch (12 full batches each)
    same = first_batches(7)
    other = first_batches(8)
    for key in batches[0]:
        assert all((a[key] == b[key]).all() for a, b in zip(batches, same))
    assert any((a["input_ids"] != b["input_ids"]).any() for a, b in zip(batches, other))

    one_pass = data.dataset(16, masked=False, repeat=False)
    assert set(one_pass.element_spec) == {"input_ids", "token_type_ids", "nsp_labels"}
    first, second = list(one_pass.as_numpy_iterator()), list(one_pass.as_numpy_iterator())
    assert len(first) == len(second) == 12
    assert any((a["input_ids"] != b["input_ids"]).any() for a, b in zip(first, second))


def test_trim_padding_rounds_lengths_up_for_xla():
    ids = np.zeros((2, 40), np.int32)
    ids[0, :5] = 7
    ids[1, :19] = 7  # longest row: 19 real tokens
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
             "nsp_labels": np.array([0, 1], np.int32)}
    assert trim_padding(batch)["input_ids"].shape == (2, 19)
    rounded = trim_padding(batch, multiple=16)
    assert rounded["input_ids"].shape == rounded["token_type_ids"].shape == (2, 32)
    np.testing.assert_array_equal(rounded["input_ids"], ids[:, :32])
    assert rounded["nsp_labels"].shape == (2,)
    assert trim_padding(batch, multiple=64)["input_ids"].shape == (2, 40)  # never past max_len


def test_import_does_not_load_tensorflow():
    code = "import nlp_tutorials.tasks.mrpc, nlp_tutorials.text.packing, nlp_tutorials.text.masking, nlp_tutorials.text.nsp, nlp_tutorials.sources.mrpc, sys; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
