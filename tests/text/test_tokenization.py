import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import (
    CLS,
    MASK,
    NUM,
    PAD,
    SEP,
    SPECIAL_TOKENS,
    UNK,
    Tokenizer,
    WordTokenizer,
    load_tokenizer,
    truncated_lengths,
)


@pytest.fixture(scope="module")
def mrpc_tokenizer():
    return WordTokenizer.build(s for p in load_mrpc("train") for s in (p.text, p.pair))


@pytest.fixture(scope="module")
def small():
    return WordTokenizer.build(["the cat sat on the mat .", "a dog , 3 dogs"])


def assert_one_line(err, *parts):
    message = str(err.value)
    assert "\n" not in message
    for part in parts:
        assert str(part) in message


def test_special_tokens_have_fixed_ids(small):
    assert SPECIAL_TOKENS == (PAD, UNK, CLS, SEP, MASK)
    assert small.vocab[:5] == list(SPECIAL_TOKENS)
    ids = (small.pad_id, small.unk_id, small.cls_id, small.sep_id, small.mask_id)
    assert ids == (0, 1, 2, 3, 4)
    assert small.special_ids == frozenset(range(5))


def test_lower_cases_and_splits_punctuation():
    tok = WordTokenizer(SPECIAL_TOKENS)
    assert tok.tokenize('He said "Hello,  World!"\tTwice.') == [
        "he", "said", '"', "hello", ",", "world", "!", '"', "twice", "."]
    assert tok.tokenize("don't U.S. (A)") == ["don", "'", "t", "u", ".", "s", ".", "(", "a", ")"]
    assert tok.tokenize("   ") == []


@pytest.mark.parametrize("text, expected", [
    ("19", [NUM]),
    ("2.5 percent", [NUM, "percent"]),
    ("$1,520.15.", ["$", NUM, "."]),
    ("on 10/21/03 at 10:30", ["on", NUM, "at", NUM]),
    ("covid-19, 3-year", ["covid", "-", NUM, ",", NUM, "-", "year"]),
    ("2nd 1990s a380", ["2nd", "1990s", "a380"]),
])
def test_numbers_become_one_word(text, expected):
    assert WordTokenizer(SPECIAL_TOKENS).tokenize(text) == expected


def test_control_characters_are_dropped():
    assert WordTokenizer(SPECIAL_TOKENS).tokenize("a\x12b \u200b c") == ["a", "b", "c"]


def test_build_orders_by_count_then_alphabet(small):
    assert small.vocab[5:] == [
        "the", ",", ".", "<num>", "a", "cat", "dog", "dogs", "mat", "on", "sat"]


def test_num_is_an_ordinary_word(mrpc_tokenizer):
    num_id = mrpc_tokenizer.convert_tokens_to_ids([NUM])[0]
    assert num_id not in mrpc_tokenizer.special_ids and num_id != mrpc_tokenizer.unk_id


def test_min_count(small):
    tok = WordTokenizer.build(["the cat sat on the mat ."], min_count=2)
    assert tok.vocab == list(SPECIAL_TOKENS) + ["the"]
    with pytest.raises(UserError):
        WordTokenizer.build(["x"], min_count=0)


def test_vocab_comes_from_train_only(mrpc_tokenizer):
    train_words = {t for p in load_mrpc("train") for s in (p.text, p.pair)
                   for t in mrpc_tokenizer.tokenize(s)}
    test_only = sorted({t for p in load_mrpc("test") for s in (p.text, p.pair)
                        for t in mrpc_tokenizer.tokenize(s)} - train_words)
    assert test_only  # MRPC's test set has words the train set lacks
    assert set(mrpc_tokenizer.vocab[5:]) == train_words
    unk = mrpc_tokenizer.unk_id
    assert mrpc_tokenizer.convert_tokens_to_ids(test_only) == [unk] * len(test_only)


def test_ids_round_trip_and_decode(small):
    ids = small.convert_tokens_to_ids(["the", "cat", "zebra"])
    assert ids == [5, 10, 1]
    assert small.convert_ids_to_tokens(ids) == ["the", "cat", UNK]
    assert small.decode([2, 5, 10, 3, 0, 0]) == "[CLS] the cat [SEP]"
    with pytest.raises(UserError):
        small.convert_ids_to_tokens([small.vocab_size])


def test_encode_layout(small):
    ids, types = small.encode("the cat", "a dog", max_len=10)
    the, cat, a, dog = small.convert_tokens_to_ids(["the", "cat", "a", "dog"])
    assert ids == [2, the, cat, 3, a, dog, 3, 0, 0, 0]
    assert types == [0, 0, 0, 0, 1, 1, 1, 0, 0, 0]
    assert small.encode("the cat") == ([2, the, cat, 3], [0, 0, 0, 0])
    assert small.encode("the cat", max_len=3) == ([2, the, 3], [0, 0, 0])


def test_encode_rejects_too_small_max_len(small):
    with pytest.raises(UserError) as err:
        small.encode("the", "cat", max_len=2)
    assert_one_line(err, "max_len=2")


def _bert_truncate(len_a, len_b, budget):
    """google-research/bert _truncate_seq_pair on lengths."""
    while len_a + len_b > budget:
        if len_a > len_b:
            len_a -= 1
        else:
            len_b -= 1
    return len_a, len_b


def test_truncation_matches_bert():
    assert tuple(map(int, truncated_lengths(10, 10, 15))) == (8, 7)
    assert tuple(map(int, truncated_lengths(3, 20, 15))) == (3, 12)
    assert tuple(map(int, truncated_lengths(20, 3, 15))) == (12, 3)
    for a in range(25):
        for b in range(25):
            for budget in range(30):
                got = tuple(map(int, truncated_lengths(a, b, budget)))
                assert got == _bert_truncate(a, b, budget)


def test_save_load_round_trip(tmp_path, mrpc_tokenizer):
    assert mrpc_tokenizer.save(tmp_path) == tmp_path
    lines = (tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert lines == mrpc_tokenizer.vocab
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "WordTokenizer" and config["lower_case"] is True
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, WordTokenizer) and loaded.vocab == mrpc_tokenizer.vocab
    for p in load_mrpc("test")[:200]:
        assert loaded.encode(p.text, p.pair, 64) == mrpc_tokenizer.encode(p.text, p.pair, 64)


def test_load_missing_files(tmp_path, small):
    with pytest.raises(UserError) as err:
        load_tokenizer(tmp_path)
    assert_one_line(err, "vocab.txt", "train")
    small.save(tmp_path)
    (tmp_path / "vocab.txt").unlink()
    with pytest.raises(UserError) as err:
        load_tokenizer(tmp_path)
    assert_one_line(err, "vocab.txt", "train")


@pytest.mark.parametrize("config, expected", [
    ("{not json", "tokenizer_config.json"),
    ('{"tokenizer_class": "SentencePiece"}', "SentencePiece"),
    ('["WordTokenizer"]', "JSON object"),
    ('{"tokenizer_class": "WordTokenizer", "lower_case": "yes"}', "lower_case"),
    ('{"tokenizer_class": ["BertTokenizer"]}', "tokenizer_class is an array; expected a string"),
    ('{"tokenizer_class": {}}', "tokenizer_class is an object; expected a string"),
])
def test_load_bad_config(tmp_path, small, config, expected):
    small.save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(config)
    with pytest.raises(UserError) as err:
        load_tokenizer(tmp_path)
    assert_one_line(err, "tokenizer_config.json", expected)


@pytest.mark.parametrize("vocab, expected", [
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\ncat\nthe\n", "vocab.txt:8"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", "lacks the special token(s) [MASK]"),
    ("the\ncat\n", "lacks the special token(s) [PAD] [UNK] [CLS] [SEP] [MASK]"),
    ("", "vocab.txt: vocabulary file is empty"),
    ("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n\ncat\n", "vocab.txt:7"),
])
def test_load_bad_vocab(tmp_path, small, vocab, expected):
    small.save(tmp_path)
    (tmp_path / "vocab.txt").write_text(vocab)
    (tmp_path / "tokenizer_config.json").write_text('{"tokenizer_class": "WordTokenizer"}')
    with pytest.raises(UserError) as err:
        load_tokenizer(tmp_path)
    assert_one_line(err, expected)


def test_vocab_size_must_match(tmp_path, small):
    small.save(tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "WordTokenizer", "vocab_size": 3}')
    with pytest.raises(UserError) as err:
        load_tokenizer(tmp_path)
    assert_one_line(err, "vocab_size")


def test_base_class_needs_tokenize():
    with pytest.raises(NotImplementedError):
        Tokenizer(SPECIAL_TOKENS).tokenize("x")


@settings(max_examples=300, deadline=None)
@given(st.text(), st.one_of(st.none(), st.text()), st.integers(3, 40))
def test_arbitrary_text_never_crashes(mrpc_tokenizer, text, pair, max_len):
    tokens = mrpc_tokenizer.tokenize(text)
    assert all(t and not t.isspace() for t in tokens)
    ids, types = mrpc_tokenizer.encode(text, pair, max_len=max_len)
    assert len(ids) == len(types) == max_len
    assert all(0 <= i < mrpc_tokenizer.vocab_size for i in ids)
    assert set(types) <= {0, 1}
    ids, _ = mrpc_tokenizer.encode(text, pair)
    assert all(0 <= i < mrpc_tokenizer.vocab_size for i in ids)


def test_import_does_not_load_tensorflow():
    code = "import nlp_tutorials.text.tokenization, sys; assert 'tensorflow' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
