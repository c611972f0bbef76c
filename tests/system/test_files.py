"""Atomic writes and the JSON reader every saved config goes through."""
import os

import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import numbered_lines, read_utf8, save_atomic, write_text_atomic
from nlp_tutorials.system.json_files import json_lines, read_json_object


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "a.json"
    write_text_atomic(path, '{"x": 1}')
    write_text_atomic(path, '{"x": 2}')
    assert read_json_object(path) == {"x": 2}
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


@pytest.mark.parametrize("text, expected", [
    ('{"x": ', ":1: not valid JSON (Expecting value at column 7)"),
    ("[1, 2]", ": expected a JSON object, found an array"),
    (b"\xff\xfe{}", ":1: not valid UTF-8 (byte 0xff)"),
    ('{"a": 1,\n"vocab_size": ' + "9" * 5000 + "}", ":2: an integer of 5000 digits"),
    ('{"x": ' + "[" * 100_000 + "]" * 100_000 + "}", ":1: nested deeper than 64 levels"),
    ('{"x":\n' + "[" * 65 + "]" * 65 + "}", ":2: nested deeper than 64 levels"),
    ('{"x": "ok \\ud83d\\ude00",\n "y": "\\ud800"}', ":2: a lone surrogate \\ud800"),
    ('{"x": "\\udc00"}', ":1: a lone surrogate \\udc00"),
])
def test_bad_json_names_the_file_in_one_line(tmp_path, text, expected):
    path = tmp_path / "train_config.json"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    with pytest.raises(UserError) as error:
        read_json_object(path)
    message = str(error.value)
    assert message.startswith(f"{path}{expected}") and "\n" not in message


def test_save_atomic_gives_the_writer_the_same_suffixes_and_renames(tmp_path):
    seen = []

    def save(tmp):  # like keras' save_weights, which insists on the .weights.h5 ending
        assert str(tmp).endswith(".weights.h5") and tmp.parent == tmp_path / "m"
        seen.append(tmp)
        tmp.write_text("new")

    path = save_atomic(tmp_path / "m" / "model.weights.h5", save)
    assert path.read_text() == "new" and not seen[0].exists()
    assert [p.name for p in path.parent.iterdir()] == ["model.weights.h5"]


def test_save_atomic_keeps_the_old_file_when_the_writer_fails(tmp_path):
    path = tmp_path / "model.keras"
    path.write_text("old")

    def failing_save(tmp):
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        save_atomic(path, failing_save)
    assert path.read_text() == "old"


def test_a_failed_writer_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "model.keras"
    path.write_text("old")

    def half_then_fail(tmp):
        tmp.write_text("ne")
        raise KeyboardInterrupt  # Ctrl-C in the middle of a save

    with pytest.raises(KeyboardInterrupt):
        save_atomic(path, half_then_fail)
    assert [p.name for p in tmp_path.iterdir()] == ["model.keras"]
    assert path.read_text() == "old"


def test_json_lines_end_at_newlines_only(tmp_path):
    """U+2028 and U+0085 are characters within a JSON string, not line ends (str.splitlines
    would take them for some): every line is read, numbered as an editor numbers it."""
    path = tmp_path / "train.jsonl"
    path.write_text('{"text": "a\u2028b"}\r\n\n{"text": "c\x85d"}\n{"text": \n', encoding="utf-8")
    with pytest.raises(UserError, match=r"train.jsonl:4: not valid JSON \(Expecting value at "
                                        r"column 10\)$"):
        list(json_lines(path))
    path.write_text('{"text": "a\u2028b"}\r\n\n{"text": "c\x85d"}\n', encoding="utf-8")
    assert list(json_lines(path)) == [(1, {"text": "a\u2028b"}), (3, {"text": "c\x85d"})]


def test_an_escaped_backslash_before_u_is_no_surrogate(tmp_path):
    path = tmp_path / "a.json"
    path.write_text(r'{"x": "\\ud800", "y": "\ud83d\ude00"}')
    assert read_json_object(path) == {"x": "\\ud800", "y": "\U0001f600"}


@pytest.mark.parametrize("make, kind", [
    (lambda path: path.mkdir(), "a folder"),
    (lambda path: os.mkfifo(path), "a named pipe"),
    (lambda path: path.symlink_to("/dev/zero"), "a device"),
])
def test_what_is_no_regular_file_is_refused_before_reading(tmp_path, make, kind):
    path = tmp_path / "train.tsv"
    make(path)
    for read in (read_utf8, lambda p: list(numbered_lines(p)), read_json_object):
        with pytest.raises(UserError, match=f"^{path}: {kind}; expected a file$"):
            read(path)
