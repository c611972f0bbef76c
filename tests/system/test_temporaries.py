"""What killed writers leave: removed by the next write of the same target once their process
has ended, and never while it runs."""
import os
import subprocess
import sys

import pytest

from nlp_tutorials.system import files


def dead_pid() -> int:
    """The id of a process that surely ended: started, finished and reaped here."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_a_reaped_process_is_dead_and_this_one_alive():
    assert files.process_alive(os.getpid())
    assert not files.process_alive(dead_pid())
    assert files.process_alive(1)  # init: another user's process answers "not permitted"
    assert not files.process_alive(0) and not files.process_alive(-1)  # process groups
    assert not files.process_alive(2 ** 40)


def test_dead_temporaries_of_a_target_are_removed_in_one_line(tmp_path):
    dead, alive = dead_pid(), os.getpid()
    (tmp_path / f".model.keras.tmp{dead}.keras").write_text("half a model")
    (tmp_path / f".1.tmp{dead}").mkdir()  # a SavedModel folder half written
    (tmp_path / f".1.tmp{dead}" / "saved_model.pb").write_text("half")
    (tmp_path / f".1.old{dead}").mkdir()  # the version it was replacing, set aside
    kept = [f".model.keras.tmp{alive}.keras",  # a running writer's work in progress
            f".vocab.txt.tmp{dead}.txt",  # another target's
            "model.keras", ".model.keras.old"]  # not temporaries at all
    for name in kept:
        (tmp_path / name).write_text("x")
    lines = []
    removed = files.remove_dead_temporaries(tmp_path, "model.keras", lines.append)
    assert [p.name for p in removed] == [f".model.keras.tmp{dead}.keras"]
    assert lines == [f"note: removed .model.keras.tmp{dead}.keras from {tmp_path}, left by "
                     f"process {dead}, which no longer runs"]
    files.remove_dead_temporaries(tmp_path, "1", lines.append)
    assert lines[1] == (f"note: removed .1.old{dead}, .1.tmp{dead} from {tmp_path}, left by "
                        f"process {dead}, which no longer runs")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(kept)
    assert files.remove_dead_temporaries(tmp_path, "1", lines.append) == [] and len(lines) == 2


def test_without_a_name_every_dead_temporary_goes(tmp_path):
    first, second = dead_pid(), dead_pid()
    for name in (f".a.json.tmp{first}.json", f".b.txt.tmp{second}.txt"):
        (tmp_path / name).write_text("x")
    lines = []
    files.remove_dead_temporaries(tmp_path, report=lines.append)
    assert list(tmp_path.iterdir()) == []
    assert lines[0].endswith(f"left by processes {min(first, second)}, "
                             f"{max(first, second)}, which no longer run")


def test_the_next_atomic_write_of_a_target_removes_its_dead_temporary(tmp_path, capsys):
    dead = dead_pid()
    leftover = tmp_path / f".config.json.tmp{dead}.json"
    leftover.write_text('{"half": ')
    files.write_text_atomic(tmp_path / "config.json", "{}")
    assert not leftover.exists()
    assert capsys.readouterr().err == (f"note: removed {leftover.name} from {tmp_path}, left by "
                                       f"process {dead}, which no longer runs\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


def test_the_next_folder_write_removes_what_a_killed_one_left(tmp_path, capsys):
    dead = dead_pid()
    for name in (f".1.tmp{dead}", f".1.old{dead}"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "variables").mkdir()
    files.save_folder_atomic(tmp_path / "1", lambda tmp: tmp.mkdir())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1"]
    assert f".1.old{dead}, .1.tmp{dead}" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["tmp", "old"])
def test_a_running_writers_temporary_stays(tmp_path, capsys, kind):
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        work = tmp_path / f".1.{kind}{sleeper.pid}"
        work.mkdir()
        files.save_folder_atomic(tmp_path / "1", lambda tmp: tmp.mkdir())
        assert work.is_dir() and capsys.readouterr().err == ""
    finally:
        sleeper.kill()
        sleeper.wait()
    files.save_folder_atomic(tmp_path / "1", lambda tmp: tmp.mkdir())
    assert not work.exists()  # its writer has ended now
