"""The folders built once per test run (tests/shared_folders.py): built by one caller while
the others wait, and a write into one is found."""
import threading
import time

from shared_folders import SharedFolders


def test_callers_together_get_one_build_and_a_write_is_named(tmp_path_factory):
    # An instance of its own: the session's (conftest.shared_folders) never hands this folder
    # out, so the write below is not the session's to report.
    folders = SharedFolders(tmp_path_factory)
    builds, started = [], threading.Barrier(3)

    def build(path):
        builds.append(path)
        time.sleep(0.3)  # long enough that a caller not held by the lock would build too
        path.mkdir(exist_ok=True)
        (path / "model.txt").write_text("weights")

    def ask():
        started.wait()
        got.append(folders.folder("counted", build))

    got = []
    callers = [threading.Thread(target=ask) for _ in range(3)]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join()
    assert len(builds) == 1 and got == [builds[0]] * 3
    assert (got[0] / "model.txt").read_text() == "weights"
    assert folders.changed() == {}
    (got[0] / "model.txt").write_text("changed weights")
    (got[0] / "extra.txt").write_text("")
    assert folders.changed() == {"counted": ["extra.txt", "model.txt"]}
