"""Set-up shared by every test, made before any test module imports TensorFlow or matplotlib.

``python -m pytest -n 2 -m "not slow"`` leaves out the tests marked ``slow`` (those that start
the command line in a subprocess, train for many steps, need two replicas or two workers, or
spend seconds tracing or exporting a model): the rest are the quick check, and still run some
code of every module under nlp_tutorials/. The budget each tier keeps is in docs/contributing.md
("The suite's time").

Under ``CI=true`` (what CI services set, and .ci/run) the explorer's browser tests may not skip:
a CI machine without Chromium or playwright fails them, so a lost browser cannot pass unseen.
On a developer's machine they skip and say why.
"""
import os

import pytest

from shared_folders import SharedFolders, build_mrpc_classifier, build_pretrained_bert
from support import tiny_model

# TensorFlow's C++ log (oneDNN notes, CUDA probing) would bury pytest's report. Set here, it
# also reaches the command lines that tests start in subprocesses.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Pictures are only written to files: no window, whatever the machine's default backend.
os.environ.setdefault("MPLBACKEND", "Agg")
# Under pytest-xdist (``-n 2``, the README's command) each worker is one of several processes
# sharing the cores, and TensorFlow's default of one thread per core for an op's own work makes
# them fight over the same cores: one thread each ran the model tests 4% faster.
# The pool that runs independent ops side by side keeps its default size, as collective ops
# (tf.distribute's replicas) wait on each other there. A run without xdist keeps TensorFlow's
# defaults. Read when TensorFlow starts, so it reaches subprocesses too.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")


@pytest.fixture(scope="session", autouse=True)
def float32_by_default(tmp_path_factory):
    """``--precision auto`` (train's and finetune's default) computes in float32 in every test,
    whatever this CPU has: the suite's exact comparisons (a resumed run, HuggingFace parity)
    are float32's, and a run must not change precision with the machine the suite runs on.
    The tests of auto itself give it a CPU (tests/training/test_auto_precision.py). A command
    line started in a subprocess reads the real CPU."""
    from nlp_tutorials.training import distribute

    plain = tmp_path_factory.mktemp("cpu") / "cpuinfo"
    plain.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(distribute, "CPUINFO", plain)
        yield


@pytest.fixture(scope="session")
def tiny_bert():
    """One tiny BERT (support.tiny_model's defaults) shared by the tests that only read it: none
    may compile it or change its weights. A test that does, or needs other sizes, calls
    support.tiny_model itself."""
    return tiny_model("bert")


@pytest.fixture(scope="session")
def tiny_gpt():
    """One tiny GPT shared as :func:`tiny_bert` is."""
    return tiny_model("gpt")


@pytest.fixture(scope="session")
def shared_folders(tmp_path_factory):
    """The model folders built once for the whole run (all xdist workers), read-only: a test
    that changed one fails the run at its end (:mod:`shared_folders`)."""
    folders = SharedFolders(tmp_path_factory)
    yield folders
    changed = folders.changed()
    if changed:
        pytest.fail(f"tests wrote into shared read-only folders under {folders.root}: {changed}")


@pytest.fixture(scope="session")
def pretrained_bert(shared_folders):
    """The working folder of one 6-step `bert train` of a tiny BERT
    (:func:`shared_folders.build_pretrained_bert`): the model folder is its ``run/``."""
    return shared_folders.folder("pretrained_bert", build_pretrained_bert)


@pytest.fixture(scope="session")
def mrpc_classifier(shared_folders):
    """A tiny BERT with a fresh MRPC classifier, saved as `finetune` saves one."""
    return shared_folders.folder("mrpc_classifier", build_mrpc_classifier)


def on_ci() -> bool:
    """Whether this run is a CI run (``CI=true``), where a missing tool fails its tests."""
    return os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="session")
def chromium():
    """(path of the Chromium the browser tests drive, playwright's sync API to drive it).

    Chromium is found by :func:`nlp_tutorials.analysis.explorer.find_chromium`
    (``NLP_TUTORIALS_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on the PATH). Without
    it or playwright the test skips, naming what is missing; under ``CI=true`` it fails."""
    from nlp_tutorials.analysis.explorer import find_chromium

    executable, driver, missing = find_chromium(), None, None
    if executable is None:
        missing = "no Chromium found: set NLP_TUTORIALS_CHROMIUM or put chromium on the PATH"
    else:
        try:
            import playwright.sync_api as driver
        except ImportError:
            missing = "playwright (the test extra) is not installed"
    if missing and on_ci():
        pytest.fail(f"{missing}; under CI=true the browser tests fail rather than skip")
    if missing:
        pytest.skip(missing)
    return executable, driver
