"""Atomic writes and the JSON reader every saved config goes through."""
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import save_atomic, write_text_atomic
from nlp_tutorials.system.json_files import read_json_object


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
