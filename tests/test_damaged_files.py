"""Damaged files, generated: each reader the command line uses is handed a tiny valid file of
its format, changed in one of many ways, and must accept it or refuse it in one line naming the
file, within a time bound, never running code a pickle carries.

A reader here is a seed (the valid files, written by the test into a fresh folder), the files
the changes may touch, and the entry the command line calls. The changes are shared: bytes
(cut, flipped, inserted, deleted, replaced), lines (dropped, doubled, swapped, very long, other
line ends, a byte-order mark), columns (dropped, doubled, set to odd values), JSON values (any
node replaced by another type, a huge or long number, deep nesting, a lone surrogate; a key
deleted), encodings (UTF-16, Latin-1), sizes (a record claiming terabytes), special files (a
folder, a named pipe, a device, a dangling link) and, for pickles, payloads that would create a
marker file if anything they name ran.

The quick tier runs :data:`QUICK_CASES` cases a reader, the ``slow`` one :data:`SLOW_CASES`
(other cases: each test draws from a seed of its own, fixed, so a run repeats the last);
``-s`` prints, per reader, the cases tried, accepted and refused.
"""
import collections
import contextlib
import functools
import json
import os
import pickle
import random
import re
import shutil
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from nlp_tutorials.system.errors import UserError
from support import REPOSITORY

QUICK_CASES = 200
# A longer search, for instance:
#   NLP_TUTORIALS_DAMAGED_CASES=20000 python -m pytest -m slow -s tests/test_damaged_files.py
SLOW_CASES = int(os.environ.get("NLP_TUTORIALS_DAMAGED_CASES", 200))
# Seconds one case may take: a reader of a file of a few kilobytes answers in milliseconds, so
# only a hang (a named pipe waiting for a writer, a device read for ever) comes near it.
TIME_LIMIT = 20


class Hung(Exception):
    """A reader ran past :data:`TIME_LIMIT`."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise :class:`Hung` in the reader after ``seconds``; the one it yields records that it
    did, should the reader catch it (some catch every Exception to name a damaged file)."""
    hung = []

    def stop(signum, frame):
        hung.append(frame.f_code.co_name)
        raise Hung(f"still reading after {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield hung
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ----------------------------------------------------------------------------- the readers


@dataclass(frozen=True)
class Reader:
    name: str
    seed: Callable[[Path], None]  # writes the valid files into an empty folder
    targets: tuple  # the files a change may touch
    read: Callable[[Path], object]  # the command line's entry, given the folder
    kind: str = "text"  # "text", "json", "jsonl", "binary", "pickle" or "tfrecord"
    delimiter: bytes = b"\t"  # what separates a line's columns (text kinds)


def files(**contents) -> Callable[[Path], None]:
    """A seed writing each ``name=text`` (``__`` in a name is ``.``, ``_dash_`` is ``-``)."""
    def write(folder: Path) -> None:
        for name, text in contents.items():
            name = name.replace("__", ".").replace("_dash_", "-")
            (folder / name).write_bytes(text if isinstance(text, bytes) else text.encode())
    return write


def read_task(name: str, **options) -> Callable[[Path], object]:
    """What ``finetune --task NAME --data FOLDER`` reads before it builds a model."""
    def read(folder: Path):
        from nlp_tutorials.tasks import TASKS

        task = TASKS[name](data_dir=folder, **options)
        task.read_splits()
        return task
    return read


def read_squad(name: str, file_name: str) -> Callable[[Path], object]:
    """``finetune --format squad`` (the version), ``finetune --task NAME`` and ``split-squad``."""
    def read(folder: Path):
        from nlp_tutorials.tasks.squad_files import squad_version
        from nlp_tutorials.tasks.squad_split import write_split

        squad_version(folder / file_name)
        read_task(name)(folder)
        write_split(folder / file_name, 1, folder / "split", printer=lambda *_: None)
    return read


def read_attention(folder: Path):
    from nlp_tutorials.analysis.visual import load_attention_pickle

    return load_attention_pickle(folder / "attention.pkl")


def read_pretrained(folder: Path):
    """``finetune --init-from FOLDER``: its config, weights and tokenizer, before any model."""
    from nlp_tutorials.models import pretrained
    from nlp_tutorials.text.tokenization import load_tokenizer

    config = pretrained.read_config(folder)
    pretrained.read_weights(folder, config, printer=lambda *_: None)
    load_tokenizer(folder)


def read_corpus(folder: Path):
    """``prepare --corpus FILE`` and ``train --corpus FILE``: the documents of the text."""
    from nlp_tutorials.sources.corpus import CorpusCounts, corpus_files, read_documents

    return list(read_documents(corpus_files(str(folder / "corpus.txt")), CorpusCounts()))


def read_shards(folder: Path):
    """``train --data FOLDER``: corpus.json, the vocabulary and the first record of each
    shard and of the held-out file."""
    from nlp_tutorials.sources.shards import read_description

    return read_description(folder)


def seed_copy(source: Path) -> Callable[[Path], None]:
    def write(folder: Path) -> None:
        for path in source.iterdir():
            shutil.copy(path, folder / path.name)
    return write


def attention_seed(folder: Path) -> None:
    import numpy as np

    from nlp_tutorials.analysis.visual import save_attention_pickle

    weights = np.full((2, 2, 3, 3), 1 / 3, np.float32)
    save_attention_pickle(folder / "attention.pkl", "bert",
                          [["[CLS]", "hi", "[SEP]"], ["[CLS]", "yo", "[PAD]"]],
                          {"encoder": [weights, weights]}, segments=[[0, 0, 0], [0, 0, 0]])


@functools.lru_cache(maxsize=1)
def shard_folder() -> Path:
    """A folder `prepare` wrote from a 12-document corpus, made once a process."""
    from nlp_tutorials.sources import corpus
    from nlp_tutorials.sources.shards import prepare_shards

    root = Path(tempfile.mkdtemp(prefix="damaged-shards-"))
    rng = random.Random(0)
    lines = [" ".join(f"w{rng.randrange(30)}" for _ in range(rng.randint(2, 8))) + " ."
             for _ in range(60)]
    (root / "corpus.txt").write_text("\n\n".join("\n".join(lines[i:i + 5])
                                                 for i in range(0, 60, 5)) + "\n")
    tokenizer = corpus.learn_tokenizer("word", 8000, [root / "corpus.txt"], 1)
    prepare_shards(str(root / "corpus.txt"), root / "shards", 2, tokenizer, max_len=24, seed=1,
                   printer=lambda *_: None)
    return root / "shards"


def shard_seed(folder: Path) -> None:
    seed_copy(shard_folder())(folder)


SQUAD_CONTEXT = "Denver won the game in 2016. The team was led by Peyton."


def squad_seed(unanswerable: bool) -> str:
    def qa(qid, question, text):
        entry = {"id": qid, "question": question,
                 "answers": [{"text": text, "answer_start": SQUAD_CONTEXT.index(text)}]}
        return {**entry, "is_impossible": False} if unanswerable else entry

    articles = [{"title": title, "paragraphs": [{"context": SQUAD_CONTEXT, "qas": [
        qa(f"{title}1", "Who won?", "Denver"), qa(f"{title}2", "When?", "2016")]}]}
        for title in ("Beta", "Alpha")]
    if unanswerable:
        articles[0]["paragraphs"][0]["qas"].append(
            {"id": "none", "question": "Who lost?", "answers": [], "is_impossible": True,
             "plausible_answers": [{"text": "Peyton",
                                    "answer_start": SQUAD_CONTEXT.index("Peyton")}]})
    return json.dumps({"version": "2.0" if unanswerable else "1.1", "data": articles},
                      indent=1)


CSQA_LINE = json.dumps({"answerKey": "B", "id": "q{}", "question": {"stem": "Where is it?",
                        "choices": [{"label": label, "text": f"place {label}"}
                                    for label in "ABCDE"]}})
TINY_HF = REPOSITORY / "tests" / "fixtures" / "bert_tiny_hf"
TINY_GOOGLE = REPOSITORY / "tests" / "fixtures" / "bert_tiny_google"


def google_seed(folder: Path) -> None:
    import tensorflow  # noqa: F401 -- its first import takes seconds: done before the clock runs

    seed_copy(TINY_GOOGLE)(folder)


def hf_seed(folder: Path) -> None:
    seed_copy(TINY_HF)(folder)
    (folder / "tokenizer_config.json").write_text(
        '{"tokenizer_class": "BertTokenizer", "do_lower_case": true}')


READERS = {reader.name: reader for reader in [
    Reader("cola", files(train__tsv="gj04\t1\t\tThe dog barked.\ngj04\t0\t*\tDog the barked.\n"
                                    "gj04\t1\t\tA cat sat down.\n"),
           ("train.tsv",), read_task("cola")),
    Reader("sst2", files(train__tsv="sentence\tlabel\nit is good \t1\nit is bad \t0\n"
                                    "a fine film \t1\n"),
           ("train.tsv",), read_task("sst2")),
    Reader("stsb", files(train__tsv="index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\t"
                                    "sentence1\tsentence2\tscore\n"
                                    "0\tmain\tMSRvid\t2012\t0001\tnone\tnone\tA plane flies.\t"
                                    "A jet flies.\t4.200\n"
                                    "1\tmain\tMSRvid\t2012\t0004\tnone\tnone\tA man sings.\t"
                                    "A cat runs.\t0.500\n"),
           ("train.tsv",), read_task("stsb")),
    Reader("rte", files(train__tsv="index\tsentence1\tsentence2\tlabel\n"
                                   "0\tA dog ran.\tAn animal ran.\tentailment\n"
                                   "1\tA dog ran.\tA cat sat.\tnot_entailment\n"),
           ("train.tsv",), read_task("rte")),
    Reader("mrpc", files(train__tsv="\ufeffQuality\t#1 ID\t#2 ID\t#1 String\t#2 String\n"
                                    '1\t1\t2\tHe said "yes".\tHe agreed.\n'
                                    "0\t3\t4\tShares rose.\tIt rained.\n"),
           ("train.tsv",), read_task("mrpc")),
    Reader("own-csv", files(train__csv='text,label\nhello there,pos\n"bad, sad",neg\nok,pos\n'),
           ("train.csv",), read_task("custom"), delimiter=b","),
    Reader("own-tsv", files(train__tsv="a\tb\tscore\nA dog.\tA cat.\t1.5\nHi.\tHello.\t4\n"),
           ("train.tsv",), read_task("custom", text_columns=("a", "b"), label_column="score",
                                     regression=True)),
    Reader("own-jsonl", files(train__jsonl='{"text": "hello", "label": "pos"}\n'
                                           '{"text": "bad day", "label": "neg"}\n'),
           ("train.jsonl",), read_task("custom"), kind="jsonl"),
    Reader("conll-iob1", files(eng__train="-DOCSTART- -X- O O\n\nAda NNP I-NP I-PER\n"
                                          "Lovelace NNP I-NP I-PER\nwrote VBD I-VP O\n\n"
                                          "In IN I-PP O\nParis NNP I-NP I-LOC\n. . O O\n"),
           ("eng.train",), read_task("conll2003"), delimiter=b" "),
    Reader("conll-iob2", files(train__txt="Ada NNP B-NP B-PER\nLovelace NNP I-NP I-PER\n"
                                          "wrote VBD B-VP O\n\nIn IN B-PP O\n"
                                          "Paris NNP B-NP B-LOC\n"),
           ("train.txt",), read_task("conll2003"), delimiter=b" "),
    Reader("squad", files(train_dash_v1__1__json=squad_seed(False)), ("train-v1.1.json",),
           read_squad("squad", "train-v1.1.json"), kind="json"),
    Reader("squad2", files(train_dash_v2__0__json=squad_seed(True)), ("train-v2.0.json",),
           read_squad("squad2", "train-v2.0.json"), kind="json"),
    Reader("commonsenseqa", files(train_rand_split__jsonl="\n".join(
        CSQA_LINE.replace("q{}", f"q{i}") for i in range(3)) + "\n"),
           ("train_rand_split.jsonl",), read_task("commonsenseqa"), kind="jsonl"),
    Reader("swag", files(train__csv=",video-id,fold-ind,startphrase,sent1,sent2,gold-source,"
                                    "ending0,ending1,ending2,ending3,label\n"
                                    "0,v1,1,A man cracks eggs. He,A man cracks eggs.,He,gold,"
                                    'whisks them.,"sings, loudly.",jumps.,reads.,0\n'
                                    "1,v2,2,The dog runs. It,The dog runs.,It,gold,"
                                    "flies.,barks.,reads.,swims.,1\n"),
           ("train.csv",), read_task("swag"), delimiter=b","),
    Reader("attention-pickle", attention_seed, ("attention.pkl",), read_attention,
           kind="pickle"),
    Reader("huggingface-folder", hf_seed,
           ("config.json", "tokenizer_config.json", "vocab.txt", "model.safetensors"),
           read_pretrained, kind="json"),
    Reader("google-folder", google_seed,
           ("bert_config.json", "vocab.txt", "bert_model.ckpt.index",
            "bert_model.ckpt.data-00000-of-00001"), read_pretrained, kind="json"),
    Reader("corpus", files(corpus__txt="First line of one.\nSecond line.\n\nAnother one.\n"),
           ("corpus.txt",), read_corpus, delimiter=b" "),
    Reader("shard-folder", shard_seed,
           ("corpus.json", "vocab.txt", "tokenizer_config.json",
            "shard-00000-of-00002.tfrecord", "shard-00001-of-00002.tfrecord",
            "held-out.tfrecord"),
           read_shards, kind="tfrecord"),
]}


# ----------------------------------------------------------------------------- the changes

# Bytes and values that readers have tripped on: control bytes, a byte-order mark, line and
# paragraph separators (U+2028, U+0085), invalid UTF-8, a surrogate's UTF-8 form, quotes.
ODD_BYTES = [b"\x00", b"\xff", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"\r", b"\n", b"\t", b'"',
             b"\\", b",", b" ", b"\xe2\x80\xa8", b"\xc2\x85", b"\x1b[31m"]
ODD_FIELDS = [b"", b" ", b"nan", b"inf", b"-inf", b"1e300", b"-1", b"0", b"2.5", b"9" * 5000,
              b'"', b'"a', b"\xed\xa0\x80", b"\xff", b"O", b"B-PER", b"I-XYZ", b"-DOCSTART-",
              b"label", b"A" * 100_000]
# Raw JSON text that replaces a value: every type, numbers too large or too long, deep
# nesting, a lone surrogate, and sizes a file might claim.
ODD_JSON = ["true", "false", "null", "0", "-1", "1.5", "1e300", "1e400", "-1e400", "NaN",
            '""', '"text"', "[]", "{}", "[[]]", '{"a": {}}', "9" * 5000, "[" * 100_000,
            '"\\ud800"', '"\\udc00x"', "1099511627776", "100000000", "1000000000",
            '["BertTokenizer"]', "[1, 2]", '{"0": [0]}', '{"' + "9" * 5000 + '": [0]}']
PAYLOADS = ("os.mkdir", "os.system", "exec", "eval", "subprocess.check_call", "shutil.copy")

change = st.one_of(
    st.tuples(st.just("truncate"), st.floats(0, 1)),
    st.tuples(st.just("flip"), st.floats(0, 1), st.integers(0, 7)),
    st.tuples(st.just("insert"), st.floats(0, 1),
              st.one_of(st.sampled_from(ODD_BYTES), st.binary(min_size=1, max_size=8))),
    st.tuples(st.just("delete"), st.floats(0, 1), st.integers(1, 64)),
    st.tuples(st.just("replace"), st.binary(max_size=64)),
    st.tuples(st.just("drop line"), st.integers(0, 40)),
    st.tuples(st.just("double line"), st.integers(0, 40)),
    st.tuples(st.just("swap lines"), st.integers(0, 40), st.integers(0, 40)),
    st.tuples(st.just("long line"), st.integers(0, 40)),
    st.tuples(st.just("line ends"), st.sampled_from([b"\r\n", b"\r", b"\n\n", b"\xe2\x80\xa8"])),
    st.tuples(st.just("byte-order mark")),
    st.tuples(st.just("drop column"), st.integers(0, 40), st.integers(0, 12)),
    st.tuples(st.just("double column"), st.integers(0, 40), st.integers(0, 12)),
    st.tuples(st.just("set column"), st.integers(0, 40), st.integers(0, 12),
              st.sampled_from(ODD_FIELDS)),
    st.tuples(st.just("json value"), st.integers(0, 10_000), st.sampled_from(ODD_JSON)),
    st.tuples(st.just("json delete"), st.integers(0, 10_000)),
    st.tuples(st.just("encoding"), st.sampled_from(["utf-16", "latin-1", "utf-8-sig"])),
    st.tuples(st.just("record length"), st.sampled_from([0, 1, 2**31, 2**40, 2**64 - 1])),
    st.tuples(st.just("special"), st.sampled_from(["folder", "fifo", "device", "dangling",
                                                    "missing"])),
    st.tuples(st.just("payload"), st.sampled_from(PAYLOADS), st.booleans()),
)


def change_bytes(data: bytes, how: tuple, reader: Reader, marker: Path) -> bytes:
    """``data`` changed as ``how`` says; unchanged where ``how`` does not apply to it."""
    kind, *args = how
    at = min(int(args[0] * len(data)), max(len(data) - 1, 0)) \
        if kind in ("flip", "insert", "delete") else int(args[0] * len(data)) \
        if kind == "truncate" else 0
    if kind == "truncate":
        return data[:at]
    if kind == "flip":
        return data[:at] + bytes([data[at] ^ (1 << args[1])]) + data[at + 1:] if data else data
    if kind == "insert":
        return data[:at] + args[1] + data[at:]
    if kind == "delete":
        return data[:at] + data[at + args[1]:]
    if kind == "replace":
        return args[0]
    if kind == "byte-order mark":
        return b"\xef\xbb\xbf" + data
    if kind == "encoding":
        try:
            return data.decode("utf-8").encode(args[0])
        except UnicodeError:
            return data
    if kind.startswith("json"):
        return change_json(data, how, reader)
    if kind == "record length":
        return with_record_length(data, args[0]) if reader.kind == "tfrecord" else data
    if kind == "payload":
        return with_payload(data, args[0], marker, args[1]) if reader.kind == "pickle" else data
    return change_lines(data, how, reader.delimiter)


def change_lines(data: bytes, how: tuple, delimiter: bytes) -> bytes:
    kind, *args = how
    lines = data.split(b"\n")
    i = args[0] % len(lines) if args and isinstance(args[0], int) else 0
    if kind == "drop line":
        del lines[i]
    elif kind == "double line":
        lines.insert(i, lines[i])
    elif kind == "swap lines":
        j = args[1] % len(lines)
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == "long line":
        lines[i] += b" word" * 40_000
    elif kind == "line ends":
        return args[0].join(lines)
    elif kind.endswith("column"):
        columns = lines[i].split(delimiter)
        c = args[1] % len(columns)
        if kind == "drop column":
            del columns[c]
        elif kind == "double column":
            columns.insert(c, columns[c])
        else:
            columns[c] = args[2]
        lines[i] = delimiter.join(columns)
    return b"\n".join(lines)


def change_json(data: bytes, how: tuple, reader: Reader) -> bytes:
    """One node of the JSON (of one line of JSON lines) replaced by ``how``'s raw text, or
    deleted; bytes that are not JSON are left as they are."""
    if reader.kind not in ("json", "jsonl", "tfrecord"):
        return data
    lines = data.split(b"\n") if reader.kind == "jsonl" else [data]
    choice = how[1]
    line = choice % len(lines)
    try:
        value = json.loads(lines[line])
    except ValueError:
        return data
    nodes = json_nodes(value)
    parent, key = nodes[choice % len(nodes)]
    if how[0] == "json delete":
        if parent is None:
            return b""
        del parent[key]
        lines[line] = json.dumps(value).encode()
    else:
        placeholder = "\x00raw\x00"
        if parent is None:
            value = placeholder
        else:
            parent[key] = placeholder
        lines[line] = json.dumps(value).replace(json.dumps(placeholder), how[2]).encode()
    return b"\n".join(lines)


def json_nodes(value) -> list:
    """(parent, key) of every node of a JSON value, the root as (None, None)."""
    nodes, stack = [(None, None)], [value]
    while stack:
        node = stack.pop()
        children = node.items() if isinstance(node, dict) else enumerate(node) \
            if isinstance(node, list) else ()
        for key, child in children:
            nodes.append((node, key))
            stack.append(child)
    return nodes


def with_record_length(data: bytes, length: int) -> bytes:
    """A TFRecord file whose first record claims ``length`` bytes, its length's check right."""
    from nlp_tutorials.sources.records import masked_crc32c

    header = struct.pack("<Q", length)
    return header + struct.pack("<I", masked_crc32c(header)) + data[12:]


def payload_call(name: str, marker: Path) -> tuple:
    """(a callable, its argument): what a pickle carrying code would run to create ``marker``."""
    import subprocess

    code = f"open({str(marker)!r}, 'w')"
    return {"os.mkdir": (os.mkdir, str(marker)), "os.system": (os.system, f"touch {marker}"),
            "exec": (exec, code), "eval": (eval, code),
            "subprocess.check_call": (subprocess.check_call, ["touch", str(marker)]),
            "shutil.copy": (shutil.copy, "/etc/hostname")}[name]


class Payload:
    """Pickles as a call of ``function(argument)``."""

    def __init__(self, function, argument):
        self.function, self.argument = function, argument

    def __reduce__(self):
        return self.function, (self.argument,)


def with_payload(data: bytes, name: str, marker: Path, inside: bool) -> bytes:
    """A pickle of a call that would create ``marker``: alone, or inside the seed's dict."""
    payload = Payload(*payload_call(name, marker))
    # The seed is this test's own pickle of plain data: pickle.loads is safe on it.
    return pickle.dumps({**pickle.loads(data), "extra": payload} if inside else payload,
                        protocol=pickle.HIGHEST_PROTOCOL)


# ----------------------------------------------------------------------------- the cases

OUTCOMES = collections.defaultdict(collections.Counter)


def damage(folder: Path, target: str, how: tuple, reader: Reader, marker: Path) -> None:
    path = folder / target
    if how[0] == "special":
        path.unlink()
        {"folder": path.mkdir, "fifo": lambda: os.mkfifo(path),
         "device": lambda: path.symlink_to("/dev/zero"),
         "dangling": lambda: path.symlink_to(folder / "nowhere"),
         "missing": lambda: None}[how[1]]()
    else:
        path.write_bytes(change_bytes(path.read_bytes(), how, reader, marker))


def run_case(reader: Reader, target: str, how: tuple) -> str:
    """Damage a fresh copy of the reader's seed and read it: "accepted" or "refused"; any
    other ending fails the test."""
    with tempfile.TemporaryDirectory(prefix="damaged-") as root:
        folder, marker = Path(root) / "data", Path(root) / "ran"
        folder.mkdir()
        reader.seed(folder)
        damage(folder, target, how, reader, marker)
        hung = []
        try:
            with time_limit(TIME_LIMIT) as hung:
                reader.read(folder)
            outcome = "accepted"
        except UserError as error:
            assert not hung, f"still reading after {TIME_LIMIT} s, in {hung[0]}"
            message = str(error)
            assert message and "\n" not in message, message
            assert target in message or str(folder) in message, \
                f"{message!r} names neither {target} nor the folder"
            check_line_named(message, folder / target)
            outcome = "refused"
        assert not marker.exists(), f"a payload ran: {how}"
    OUTCOMES[reader.name][outcome] += 1
    return outcome


def check_line_named(message: str, path: Path) -> None:
    """A line the message names in the damaged file (``name:N:``) is one the file has: at
    most one more than its line ends (\\n, or \\r where a reader takes it for one)."""
    named = re.search(rf"{re.escape(path.name)}:(\d+)", message)
    if named and path.is_file() and not path.is_symlink():
        data = path.read_bytes()
        assert 1 <= int(named[1]) <= data.count(b"\n") + data.count(b"\r") + 1, message


@pytest.fixture(scope="module", autouse=True)
def report_outcomes():
    """Print, at the end, the cases each reader tried, accepted and refused (seen with -s)."""
    yield
    for name, counts in sorted(OUTCOMES.items()):
        print(f"\n{name}: {sum(counts.values())} cases, {counts['accepted']} accepted, "
              f"{counts['refused']} refused", end="")


CASE = dict(deadline=None, derandomize=True, database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def draw_and_run(name: str, data) -> str:
    """One case for the reader ``name``: a file of its seed and a change, drawn from ``data``."""
    reader = READERS[name]
    return run_case(reader, data.draw(st.sampled_from(reader.targets), "file"),
                    data.draw(change, "change"))


@pytest.mark.parametrize("name", READERS)
@settings(max_examples=QUICK_CASES, **CASE)
@given(data=st.data())
def test_a_damaged_file_is_accepted_or_refused_in_one_line(name, data):
    draw_and_run(name, data)


@pytest.mark.slow
@pytest.mark.parametrize("name", READERS)
@settings(max_examples=SLOW_CASES, **CASE)
@given(data=st.data())
def test_more_damaged_files_are_accepted_or_refused_in_one_line(name, data):
    draw_and_run(name, data)


@pytest.mark.parametrize("name", READERS)
def test_each_seed_is_read_as_it_is(name, tmp_path):
    """The changes start from files each reader accepts: a refusal is the change's doing."""
    READERS[name].seed(tmp_path)
    READERS[name].read(tmp_path)


def refusing(message: str):
    def read(folder: Path):
        raise UserError(message.format(folder=folder))
    return read


@pytest.mark.parametrize("read, failure", [
    (lambda folder: {}["key"], KeyError),  # a traceback
    (refusing(""), AssertionError),
    (refusing("some file: names neither the file changed nor its folder"), AssertionError),
    (refusing("{folder}/a.txt:99: a line the file does not have"), AssertionError),
    (lambda folder: time.sleep(5), AssertionError),  # caught below as a UserError would be
])
def test_the_cases_fail_on_a_traceback_a_wrong_or_vague_message_or_a_hang(monkeypatch, read,
                                                                         failure):
    monkeypatch.setattr(sys.modules[__name__], "TIME_LIMIT", 0.2)

    def read_catching_all(folder):  # as a reader that turns every Exception into one line
        try:
            read(folder)
        except Hung as error:
            raise UserError(f"{folder}: {error}") from None

    reader = Reader("test", files(a__txt="text"), ("a.txt",), read_catching_all)
    with pytest.raises(failure):
        run_case(reader, "a.txt", ("truncate", 0.5))


def test_a_payload_that_runs_fails_the_case(tmp_path):
    reader = Reader("unsafe", attention_seed, ("attention.pkl",),
                    lambda folder: pickle.loads((folder / "attention.pkl").read_bytes()),
                    kind="pickle")
    with pytest.raises(AssertionError, match="a payload ran"):
        run_case(reader, "attention.pkl", ("payload", "os.mkdir", False))
