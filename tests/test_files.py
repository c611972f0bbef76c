"""Atomic writes and the JSON reader every saved config goes through."""
import pytest

from nlp_tutorials.errors import UserError
from nlp_tutorials.files import read_json_object, write_text_atomic


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "sub" / "a.json"
    write_text_atomic(path, '{"x": 1}')
    write_text_atomic(path, '{"x": 2}')
    assert read_json_object(path) == {"x": 2}
    assert [p.name for p in path.parent.iterdir()] == ["a.json"]


@pytest.mark.parametrize("text, expected", [
    ('{"x": ', "not a readable JSON file"),
    ("[1, 2]", "expected a JSON object"),
    (b"\xff\xfe{}", "not a readable JSON file"),
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
    assert message.startswith(f"{path}: {expected}") and "\n" not in message
