"""Files the project writes and reads back.

Writes are atomic: a crash or kill leaves either the old file or the new one, never half. Every
writer puts its bytes in a temporary file beside the target (``.<name>.tmp<pid><suffixes>``),
syncs it to disk, renames it over the target (``os.replace``, atomic within one file system)
and syncs the folder so the rename itself survives a power cut. A writer that fails removes its
temporary file. One killed outright (``kill -9``, a power cut) leaves it behind, named as above
with the killed process' id: the next write of the same target removes it, once no process of
that id runs (:func:`remove_dead_temporaries`), and says so in one line.
"""
import os
import re
import shutil
import stat
import sys
from pathlib import Path

from nlp_tutorials.system.errors import UserError

# What a writer puts beside its target while it works: ".<name>.tmp<pid><suffixes>" (a file, or
# a folder from save_folder_atomic), and ".<name>.old<pid>" (the folder it replaces, set aside).
TEMPORARY = re.compile(r"\.(?P<name>.+)\.(?:tmp|old)(?P<pid>[0-9]+)(?P<suffixes>(?:\.[^.]+)*)")


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
    remove_dead_temporaries(path.parent, path.name)
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


def read_utf8(path) -> str:
    """The text of a UTF-8 file, a byte-order mark dropped; a byte that is not UTF-8 is a
    UserError naming its line (data files from elsewhere: their errors name a place)."""
    raw = _read_bytes(path)
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = raw[:err.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not valid UTF-8 (byte {raw[err.start]:#04x})") from None


def numbered_lines(path):
    """(line number, text) of each line of a UTF-8 file, without its line ending, up to its last
    line that is not blank; a byte that is not UTF-8 is a UserError naming its line and column
    (the bytes are split into lines before decoding, so the error can say where)."""
    lines = _read_bytes(path).removeprefix(b"\xef\xbb\xbf").split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    for number, line in enumerate(lines, start=1):
        yield number, decode_line(line.removesuffix(b"\r"), path, number)


def decode_line(line: bytes, path, number: int, expected: str = "") -> str:
    """Line ``number`` of ``path``, decoded from UTF-8; a byte that is not is a UserError naming
    the line and column (and ``expected``, what the file should hold, when given)."""
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        wanted = f"; expected {expected}" if expected else ""
        raise UserError(f"{path}:{number}: not valid UTF-8 (byte {line[err.start]:#04x} at "
                        f"column {err.start + 1}){wanted}") from None


def _read_bytes(path) -> bytes:
    with open_regular(path) as handle:
        try:
            return handle.read()
        except OSError as err:
            raise UserError(f"{path}: cannot read ({err.strerror})") from None


# What a path is when it is not a regular file, by the test of the stat module.
NOT_REGULAR = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"),
               (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"),
               (stat.S_ISSOCK, "a socket"))


def require_regular(path) -> None:
    """Raise UserError unless ``path`` is a regular file (or a link to one), for files another
    library opens (TensorFlow's checkpoint reader): a named pipe or device would hang it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    _refuse_special(path, mode)


def _refuse_special(path, mode: int) -> None:
    for test, kind in NOT_REGULAR:
        if test(mode):
            raise UserError(f"{path}: {kind}; expected a file")


def open_regular(path):
    """``path`` opened for reading bytes, if it is a regular file (or a link to one).

    A folder, named pipe, device or socket is a UserError before any byte is read: reading a
    pipe waits for a writer that may never come, and a device such as ``/dev/zero`` never ends.
    The file is opened without waiting (``O_NONBLOCK``) and then checked, so nothing can swap
    it for a pipe between the check and the read.
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    try:
        _refuse_special(path, os.fstat(descriptor).st_mode)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def require_folder(path, flag: str, holding: str = "") -> None:
    """Raise UserError if ``path`` (given by ``flag``, e.g. ``--data``) is set but is not a
    folder; ``holding`` says what the folder should hold."""
    if path and not Path(path).is_dir():
        expected = f"; expected the folder holding {holding}" if holding else ""
        raise UserError(f"{flag} {path}: no such folder{expected}")


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
    remove_dead_temporaries(path.parent, path.name)
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


def process_alive(pid: int) -> bool:
    """Whether a process of id ``pid`` runs on this machine (one that has ended but not yet been
    reaped by its parent counts as running)."""
    if pid <= 0:  # 0 and -1 address process groups, never one process
        return False
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's process
        return True
    except OverflowError:  # beyond any process id
        return False
    return True


def dead_temporaries(folder, name: str | None = None) -> list:
    """The temporaries in ``folder`` (see :data:`TEMPORARY`) whose writer no longer runs; only
    those of the target ``name`` when it is given."""
    found = []
    for entry in sorted(os.listdir(folder)) if Path(folder).is_dir() else []:
        match = TEMPORARY.fullmatch(entry)
        if match and name in (None, match["name"]) and not process_alive(int(match["pid"])):
            found.append(Path(folder) / entry)
    return found


def remove_dead_temporaries(folder, name: str | None = None, report=None) -> list:
    """Remove what killed writers left in ``folder`` (of the target ``name`` only, when given):
    the temporaries of processes that no longer run; those of a running one are its work in
    progress and stay. ``report`` (default: standard error) gets one line naming what went.
    Returns the paths removed."""
    removed = dead_temporaries(folder, name)
    for path in removed:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    if removed:
        pids = sorted({int(TEMPORARY.fullmatch(p.name)["pid"]) for p in removed})
        by = (f"process {pids[0]}, which no longer runs" if len(pids) == 1 else
              f"processes {', '.join(map(str, pids))}, which no longer run")
        (report or note)(f"note: removed {', '.join(p.name for p in removed)} from {folder}, "
                          f"left by {by}")
    return removed


def note(line: str) -> None:
    """Print ``line``, a one-line note for the user, on standard error beside the errors."""
    print(line, file=sys.stderr)
