"""The lock on a model folder: one holder at a time, released whatever ends the run, taken over
from a process that has gone; and a folder a failed run leaves as it found it."""
import json
import multiprocessing
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.locks import LOCK_NAME, WRITING_SECONDS, FolderLock, held_folder


def dead_pid() -> int:
    """The id of a process that surely ended: started, finished and reaped here."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def lock_of(folder, pid: int, host: str | None = None, identity=None) -> None:
    """Write ``folder``'s lock file as process ``pid`` of ``host`` would have written it."""
    info = os.stat(folder)
    (folder / LOCK_NAME).write_text(json.dumps({
        "pid": pid, "host": host or socket.gethostname(),
        "folder": identity or [info.st_dev, info.st_ino]}) + "\n")


def test_the_lock_names_its_holder_and_goes_when_the_run_ends(tmp_path):
    folder = tmp_path / "model"
    with held_folder(folder, "--model-dir"):
        holder = json.loads((folder / LOCK_NAME).read_text())
        assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("ending", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_the_lock_goes_on_an_error_and_on_ctrl_c(tmp_path, ending):
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(type(ending)):
        with held_folder(folder, "--model-dir"):
            assert (folder / LOCK_NAME).is_file()
            raise ending
    assert not (folder / LOCK_NAME).exists()


def hold_for_a_while(folder, started):
    """In a child process: hold ``folder`` until killed."""
    with held_folder(folder, "--model-dir"):
        started.set()
        time.sleep(60)


def test_a_second_run_is_refused_naming_the_holders_pid(tmp_path):
    folder = tmp_path / "model"
    context = multiprocessing.get_context("spawn")
    started = context.Event()
    holder = context.Process(target=hold_for_a_while, args=(folder, started))
    holder.start()
    try:
        assert started.wait(60)
        with pytest.raises(UserError) as refused:
            with held_folder(folder, "--model-dir"):
                pass
        assert str(refused.value) == (
            f"--model-dir {folder} is in use by another run (process {holder.pid}, lock file "
            f"{folder / LOCK_NAME}); wait for it to end, or choose another --model-dir")
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == holder.pid
    finally:
        holder.kill()
        holder.join()
    # Killed outright, it could not remove its lock: the next run takes it over.
    lines = []
    with held_folder(folder, "--model-dir", report=lines.append):
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert lines == [f"note: {folder / LOCK_NAME} was left by process {holder.pid}, which no "
                     f"longer runs; taking the lock over"]


def test_a_lock_copied_with_its_folder_is_taken_over(tmp_path):
    original = tmp_path / "model"
    with held_folder(original, "--model-dir"):
        (original / "config.json").write_text("{}")
        copy = shutil.copytree(original, tmp_path / "copy")  # cp -r while the run goes on
        lines = []
        with held_folder(copy, "--model-dir", report=lines.append):
            assert json.loads((copy / LOCK_NAME).read_text())["pid"] == os.getpid()
        assert lines == [f"note: {copy / LOCK_NAME} was left by process {os.getpid()} in "
                         f"another folder (it was copied with its folder); taking the lock over"]
        assert (original / LOCK_NAME).is_file()  # the original run still holds its own


def test_a_lock_of_another_machine_is_refused_naming_it(tmp_path):
    lock_of(tmp_path, dead_pid(), host="elsewhere")
    with pytest.raises(UserError, match=r"is in use by process \d+ on elsewhere \(lock file "
                                        r".*\); if that run has ended, delete the lock file$"):
        FolderLock(tmp_path / LOCK_NAME, "--model-dir").acquire()


def test_an_empty_lock_is_being_written_until_it_is_old(tmp_path):
    (tmp_path / LOCK_NAME).write_text("")
    with pytest.raises(UserError, match="is being locked by another run at this moment"):
        FolderLock(tmp_path / LOCK_NAME, "--model-dir").acquire()
    old = time.time() - WRITING_SECONDS - 1
    os.utime(tmp_path / LOCK_NAME, (old, old))
    lines = []
    lock = FolderLock(tmp_path / LOCK_NAME, "--model-dir", report=lines.append)
    lock.acquire()
    assert lines == [f"note: {tmp_path / LOCK_NAME} was left by a run that did not finish "
                     f"writing it; taking the lock over"]
    lock.release()
    assert not (tmp_path / LOCK_NAME).exists()


def race_for(folder, ready, results):
    ready.wait()
    try:
        with held_folder(folder, "--model-dir"):
            results.put("held")
            time.sleep(1)
    except UserError:
        results.put("refused")


@pytest.mark.slow
def test_of_runs_starting_together_exactly_one_holds_the_folder(tmp_path):
    context = multiprocessing.get_context("fork")
    for trial in range(5):
        folder = tmp_path / f"model{trial}"
        ready, results = context.Barrier(4), context.Queue()
        racers = [context.Process(target=race_for, args=(folder, ready, results))
                  for _ in range(4)]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join(60)
        assert sorted(results.get() for _ in racers) == ["held", "refused", "refused", "refused"]


def test_a_failed_run_leaves_only_what_was_there_before(tmp_path):
    folder = tmp_path / "new" / "model"
    with pytest.raises(UserError):
        with held_folder(folder, "--model-dir", results=("checkpoints",)):
            (folder / "config.json").write_text("{}")
            (folder / "logs").mkdir()
            raise UserError("refused after writing")
    assert list(tmp_path.iterdir()) == []  # the folders it made went too
    folder.mkdir(parents=True)
    (folder / "notes.txt").write_text("the user's")
    with pytest.raises(KeyboardInterrupt):
        with held_folder(folder, "--model-dir", results=("checkpoints",)):
            (folder / "config.json").write_text("{}")
            raise KeyboardInterrupt
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_once_a_result_is_saved_a_failed_run_keeps_everything(tmp_path):
    folder = tmp_path / "model"
    with pytest.raises(KeyboardInterrupt):
        with held_folder(folder, "--model-dir", results=("checkpoints",)):
            (folder / "config.json").write_text("{}")
            (folder / "checkpoints").mkdir()
            raise KeyboardInterrupt  # Ctrl-C after the first checkpoint
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints", "config.json"]
    before = (folder / "checkpoints").stat().st_mtime_ns
    time.sleep(0.01)
    with pytest.raises(RuntimeError):
        with held_folder(folder, "--model-dir", results=("checkpoints",)):
            (folder / "logs").mkdir()
            (folder / "checkpoints" / "ckpt-2.index").write_text("x")  # a resumed run saves
            raise RuntimeError
    assert (folder / "checkpoints").stat().st_mtime_ns != before
    assert sorted(p.name for p in folder.iterdir()) == ["checkpoints", "config.json", "logs"]


def test_a_folder_renamed_into_place_is_locked_beside_it(tmp_path):
    base = tmp_path / "served"
    with held_folder(base, "--output", ("1",), ".1.lock", target=base / "1"):
        assert [p.name for p in base.iterdir()] == [".1.lock"]
        with pytest.raises(UserError, match=rf"^--output {base / '1'} is in use by another run"):
            with held_folder(base, "--output", ("1",), ".1.lock", target=base / "1"):
                pass
        with held_folder(base, "--output", ("2",), ".2.lock", target=base / "2"):
            pass  # another version is another lock
    assert list(base.iterdir()) == []  # both locks released
