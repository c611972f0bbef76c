"""Files the project writes and reads back.

Writes are atomic: a crash or kill leaves either the old file or the new one, never half. Every
writer puts its bytes in a temporary file beside the target (``.<name>.tmp<pid><suffixes>``),
syncs it to disk, renames it over the target (``os.replace``, atomic within one file system)
and syncs the folder so the rename itself survives a power cut. A writer that fails removes its
temporary file; one killed outright can leave it behind, named as above and safe to delete.
"""
import json
import os
import shutil
from pathlib import Path

from nlp_tutorials.system.errors import UserError


def write_text_atomic(path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so a crash leaves either the old file or the new one."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path, data: bytes) -> None:
    """Write ``data`` to ``path`` so a crash leaves either the old file or the new one."""

    def write(tmp):
        with open(tmp, "wb") as handle:
            handle.write(data)

    save_atomic(path, write)


def temporary_path(path: Path) -> Path:
    """Where a write of ``path`` goes first: beside it, hidden, ending with the same suffixes
    (Keras checks ``.keras`` and ``.weights.h5``)."""
    return path.with_name(f".{path.name}.tmp{os.getpid()}{''.join(path.suffixes)}")


def save_atomic(path, save) -> Path:
    """Let ``save(tmp)`` write a file (e.g. ``model.save``), then make it ``path`` atomically.

    ``tmp`` is :func:`temporary_path`; it is synced to disk before the rename, and removed if
    ``save`` (or anything before the rename) fails. Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_path(path)
    try:
        save(tmp)
        _sync(tmp)
        os.replace(tmp, path)
    except BaseException:  # Ctrl-C included: no temporary file is left to pile up
        tmp.unlink(missing_ok=True)
        raise
    try:
        _sync(path.parent)
    except OSError:  # some file systems cannot sync a folder; the file itself is complete
        pass
    return path


def _sync(path: Path) -> None:
    """``fsync`` a file (its data reach the disk) or a folder (its renames do)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_json_object(path) -> dict:
    """The JSON object in ``path``; a UserError naming the file if it is unreadable or not one.

    JSON is parsed as data only. A ValueError also covers integers too long to convert and bad
    UTF-8; a RecursionError, arrays nested thousands deep: one line each, like any bad file.
    """
    try:
        values = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        reason = str(err)[:200] or type(err).__name__
        raise UserError(f"{path}: not a readable JSON file ({reason})") from None
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a JSON object")
    return values


def refuse_existing(path, overwrite: bool, flag: str) -> None:
    """Raise UserError if ``path`` exists and ``overwrite`` (the ``--overwrite`` flag) is off;
    ``flag`` names the argument that chose ``path``."""
    if Path(path).exists() and not overwrite:
        raise UserError(f"{flag}: {path} already exists; pass --overwrite to replace it")


def save_folder_atomic(path, save) -> Path:
    """Let ``save(tmp)`` write a folder, then make it ``path``, replacing any folder there.

    ``tmp`` is a hidden folder beside ``path``, removed if ``save`` fails. An existing ``path``
    is first renamed aside and deleted only once the new folder is in place, so a failure at
    any point leaves the old folder or the new one. Returns ``path``.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    old = path.with_name(f".{path.name}.old{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        save(tmp)
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:  # Ctrl-C included: no half-written folder is left behind
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not path.exists():
            os.replace(old, path)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return path
