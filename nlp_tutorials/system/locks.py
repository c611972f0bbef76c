"""One run at a time in a model folder: a lock file, and a folder a refused run leaves as it was.

A run that writes a model folder holds ``<folder>/.lock`` while it runs: one line of JSON naming
the process (its id and machine) and the folder (its device and inode numbers). The file is
created with ``O_EXCL``, so of two runs starting together exactly one creates it; the other is
refused in one line naming the holder's process id. The holder removes it when it ends, on an
error and on Ctrl-C too.

A process killed outright (``kill -9``, a power cut) cannot remove its lock. The next run finds
that no process of that id runs and takes the lock over, with a one-line note; so it does with
a lock copied along with its folder (``cp -r``), which names the original folder, not the copy.
A lock taken on another machine (a shared file system) cannot be checked from here: it is
refused with the holder's machine named, and stays until that run ends or a person deletes it.

:func:`held_folder` is what a command uses: it makes the folder if it is missing, holds the
lock for the run, and if the run fails before saving a result, removes what the run made there,
never what was there before.
"""
import contextlib
import json
import os
import shutil
import socket
import time
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import note, process_alive
from nlp_tutorials.system.json_files import parse_json

LOCK_NAME = ".lock"
# A lock file is written the instant it is created; one still empty after this long was left
# by a process killed in between.
WRITING_SECONDS = 10.0


def folder_identity(folder) -> list:
    """[device, inode] of ``folder``: the same for every path to it, new for a copy of it."""
    info = os.stat(folder)
    return [info.st_dev, info.st_ino]


class FolderLock:
    """The lock file ``path`` (in the folder it locks: ``<folder>/.lock``); ``flag`` and
    ``target`` (default: that folder) word the refusal: ``--model-dir m is in use ...``."""

    def __init__(self, path, flag: str, target=None, report=None):
        self.path = Path(path)
        self.folder = self.path.parent
        self.target = Path(target or self.folder)
        self.flag = flag
        self.report = report or note
        self.record = json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                  "folder": folder_identity(self.folder)})

    def acquire(self) -> None:
        """Create the lock file, or take over one whose holder has gone; UserError when a
        running process holds it."""
        for _ in range(3):  # a lost race to take over a stale lock is tried again
            try:
                descriptor = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                self.take_over_or_refuse()
                continue
            with os.fdopen(descriptor, "w") as handle:
                handle.write(self.record + "\n")
            return
        raise UserError(f"{self.flag} {self.target}: {self.path} keeps changing hands; try again")

    def take_over_or_refuse(self) -> None:
        """Remove the existing lock file if its holder has gone; else refuse in one line."""
        text = read_lock(self.path)
        if text is None:  # removed meanwhile: its holder just ended
            return
        holder = parse_lock(text)
        gone = stale_reason(holder, folder_identity(self.folder), lock_age(self.path))
        if gone is None:
            raise UserError(self.refusal(holder))
        aside = self.path.with_name(f"{self.path.name}.stale{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:  # another run took it over first
            return
        if read_lock(aside) != text:  # that was another run's fresh lock: put it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
        else:
            self.report(f"note: {self.path} was left by {gone}; taking the lock over")
        aside.unlink(missing_ok=True)

    def refusal(self, holder: dict) -> str:
        """The one line that refuses this run while ``holder`` holds the folder."""
        if holder["pid"] == 0:
            return (f"{self.flag} {self.target} is being locked by another run at this moment "
                    f"(lock file {self.path}); try again in a moment")
        if holder["host"] != socket.gethostname():
            return (f"{self.flag} {self.target} is in use by process {holder['pid']} on "
                    f"{holder['host']} (lock file {self.path}); if that run has ended, delete "
                    f"the lock file")
        return (f"{self.flag} {self.target} is in use by another run (process {holder['pid']}, "
                f"lock file {self.path}); wait for it to end, or choose another {self.flag}")

    def release(self) -> None:
        """Remove the lock file, if it is still this process' own."""
        if read_lock(self.path) == self.record + "\n":
            self.path.unlink(missing_ok=True)


def read_lock(path) -> str | None:
    """The lock file's text, or None when there is none."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None


def parse_lock(text: str) -> dict:
    """The holder a lock file names: {"pid", "host", "folder"}; an unreadable file names no one
    (pid 0)."""
    try:
        holder = parse_json(text, "lock file")
        return {"pid": int(holder["pid"]), "host": str(holder["host"]),
                "folder": list(holder["folder"])}
    except (ValueError, TypeError, KeyError):
        return {"pid": 0, "host": socket.gethostname(), "folder": None}


def lock_age(path) -> float:
    """Seconds since the lock file ``path`` was written (0 if it is gone)."""
    try:
        return time.time() - Path(path).stat().st_mtime
    except FileNotFoundError:
        return 0.0


def stale_reason(holder: dict, identity: list, age: float) -> str | None:
    """Why the lock of ``holder`` no longer holds, in words; None while it holds.

    ``identity`` is the folder's :func:`folder_identity`: a lock naming another folder was
    copied along with its folder. On another machine nothing can be checked: it holds. A lock
    file that names no one is one being written, until it is :data:`WRITING_SECONDS` old.
    """
    if holder["pid"] == 0:
        return "a run that did not finish writing it" if age > WRITING_SECONDS else None
    if holder["folder"] != identity:
        return f"process {holder['pid']} in another folder (it was copied with its folder)"
    if holder["host"] != socket.gethostname():
        return None
    if holder["pid"] != os.getpid() and not process_alive(holder["pid"]):
        return f"process {holder['pid']}, which no longer runs"
    return None


def made_folders(folder: Path) -> list:
    """Make ``folder`` and its missing parents; returns those this call made, outermost first
    (a folder another process makes meanwhile is not counted)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()][::-1]
    made = []
    for path in missing:
        try:
            path.mkdir()
        except FileExistsError:
            continue
        made.append(path)
    return made


def entry_times(folder: Path, lock_name: str = LOCK_NAME) -> dict:
    """{name: modification time (ns)} of what ``folder`` holds, its lock file left out."""
    times = {}
    for entry in os.scandir(folder):
        with contextlib.suppress(FileNotFoundError):  # gone since the listing
            if entry.name != lock_name:
                times[entry.name] = entry.stat(follow_symlinks=False).st_mtime_ns
    return times


def remove_new_entries(folder: Path, before: dict, lock_name: str = LOCK_NAME) -> None:
    """Remove what ``folder`` holds that is not in ``before`` (a run's own files and folders)."""
    for name in set(entry_times(folder, lock_name)) - set(before):
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


@contextlib.contextmanager
def held_folder(folder, flag: str, results: tuple = (), lock_name: str = LOCK_NAME,
                target=None, report=None):
    """Within it, this process holds the model folder ``folder`` (made if missing).

    If the block fails (an error, Ctrl-C) before it saved any of ``results`` (names in the
    folder, e.g. ``checkpoints``: a result is new or rewritten), what it made in the folder is
    removed, and the folder itself if this call made it; what was there before stays. Once a
    result is saved, everything stays: the run's files are what that result needs.

    ``lock_name`` and ``target``: a folder written elsewhere and renamed into ``folder`` whole
    (a SavedModel version) cannot hold its own lock; ``folder/.<name>.lock`` locks it instead.
    """
    folder = Path(folder)
    made = made_folders(folder)
    lock = FolderLock(folder / lock_name, flag, target, report)
    try:
        lock.acquire()
    except BaseException:
        remove_empty(made)
        raise
    before = entry_times(folder, lock_name)
    try:
        yield folder
    except BaseException:
        now = entry_times(folder, lock_name)
        if not any(name in now and now[name] != before.get(name) for name in results):
            remove_new_entries(folder, before, lock_name)
            lock.release()
            remove_empty(made)
        raise
    finally:
        lock.release()


def remove_empty(folders: list) -> None:
    """Remove each of ``folders`` that is empty, innermost first."""
    for path in reversed(folders):
        with contextlib.suppress(OSError):
            path.rmdir()
