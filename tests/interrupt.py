"""Stop a file writer half-way through a file, as a kill would, for the whole-or-none tests.

Every writer syncs its finished bytes (``os.fsync``) before making them the target file.
:func:`stop_at_write` replaces ``os.fsync`` so that the n-th regular file synced is cut to half
its size and then the process is killed with SIGKILL (``kill=True``) or :class:`Interrupted` is
raised. A writer that wrote in place would lose half the target; one that never syncs is never
stopped, and :func:`killed_in_child` says so.

:func:`signalled_when_paused` sends a real signal instead: a subprocess :func:`pause` s at a
chosen point of its work (:func:`pause_at_write`: in its n-th file write) and the test signals
it there.

Kept apart from the tests so a subprocess can import it too.
"""
import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

# The temporary files nlp_tutorials.system.files writes first: ".<name>.tmp<pid><suffixes>".
TEMPORARY = re.compile(r"\..+\.tmp[0-9]+.*")


class Interrupted(BaseException):
    """Raised where the writer was stopped; ``args[0]`` is the file it was writing."""


def at_file_sync(nth: int, act):
    """An ``os.fsync`` that calls ``act(fd)`` before syncing the ``nth`` regular file synced."""
    real_fsync = os.fsync
    count = 0

    def fsync(fd):
        nonlocal count
        if stat.S_ISREG(os.fstat(fd).st_mode):
            count += 1
            if count == nth:
                act(fd)
        real_fsync(fd)

    return fsync


def stop_at_write(nth: int, kill: bool):
    """An ``os.fsync`` that stops the ``nth`` regular file synced, half of it written."""

    def stop(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        os.truncate(path, os.fstat(fd).st_size // 2)
        if kill:
            os.kill(os.getpid(), signal.SIGKILL)
        raise Interrupted(path)

    return at_file_sync(nth, stop)


def killed_in_child(write, nth: int = 1, timeout: float = 60) -> None:
    """Run ``write()`` in a forked child killed (SIGKILL) in its ``nth`` file write.

    Fails if the child finished, failed otherwise, or hung. Only for writers that need no
    TensorFlow: a forked child must not use the parent's TensorFlow threads.
    """
    pid = os.fork()
    if pid == 0:  # the child: never return into pytest
        code = 0
        try:
            os.fsync = stop_at_write(nth, kill=True)
            write()
        except BaseException:  # noqa: B036 (any exit but the kill is a failure)
            code = 3
        os._exit(code)
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError(f"the writer did not reach write {nth} in {timeout} s")
        time.sleep(0.01)
    code = os.waitstatus_to_exitcode(status)
    assert code == -signal.SIGKILL, (
        "the writer finished without syncing a file" if code == 0 else
        f"the writer failed before its write {nth} (exit status {code})")


def snapshot(folder) -> dict:
    """{name: bytes} of the files in ``folder``, temporary files left out."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())
            if p.is_file() and not TEMPORARY.fullmatch(p.name)}


def temporaries(folder) -> list:
    """Names of the temporary files a killed writer left in ``folder``."""
    return [p.name for p in folder.iterdir() if TEMPORARY.fullmatch(p.name)]


# A real signal from outside: a subprocess pauses at a chosen point of its work, and the test
# sends it SIGINT (Ctrl-C) or SIGKILL there.

def pause(marker, seconds: float = 120) -> None:
    """Create the file ``marker``, then wait for a signal (``seconds`` at most)."""
    with open(marker, "w"):
        pass
    time.sleep(seconds)
    raise AssertionError(f"no signal came in {seconds} s")


def pause_at_write(nth: int, marker):
    """An ``os.fsync`` that :func:`pause` s before syncing the ``nth`` regular file, which is
    then written but not yet renamed into place."""
    return at_file_sync(nth, lambda fd: pause(marker))


def signalled_when_paused(argv: list, marker, signum: int, cwd=None, timeout: float = 300,
                          before_signal=None):
    """Run ``python argv`` (the repository and tests/ first on its path), send it ``signum``
    once it has created ``marker`` (after ``before_signal(its pid)``, which may look at its
    work); returns (exit status, stdout, stderr)."""
    root = Path(__file__).resolve().parent.parent
    path = os.pathsep.join(p for p in (str(root), str(root / "tests"),
                                       os.environ.get("PYTHONPATH")) if p)
    process = subprocess.Popen([sys.executable, *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=cwd or root,
                               env={**os.environ, "PYTHONPATH": path})
    deadline = time.monotonic() + timeout
    while not os.path.exists(marker) and process.poll() is None:
        if time.monotonic() > deadline:
            process.kill()
            break
        time.sleep(0.05)
    if process.poll() is None:
        if before_signal:
            before_signal(process.pid)
        process.send_signal(signum)
    out, err = process.communicate(timeout=timeout)
    return process.returncode, out, err
