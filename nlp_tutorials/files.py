"""Files the project writes and reads back.

Writes are atomic: a crash or kill leaves either the old file or the new one, never half.
"""
import json
import os
from pathlib import Path

from nlp_tutorials.errors import UserError


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a crash leaves either the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def save_atomic(path, save) -> Path:
    """Let ``save(tmp)`` write a file (e.g. ``model.save``), then rename ``tmp`` to ``path``.

    ``tmp`` sits beside ``path`` and ends with the same suffixes, which Keras checks
    (``.keras``, ``.weights.h5``). Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}{''.join(path.suffixes)}")
    save(tmp)
    os.replace(tmp, path)
    return path


def read_json_object(path) -> dict:
    """The JSON object in ``path``; a UserError naming the file if it is unreadable or not one."""
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise UserError(f"{path}: not a readable JSON file ({err})") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a JSON object")
    return values
