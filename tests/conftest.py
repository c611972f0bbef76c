"""Set-up shared by every test, made before any test module imports TensorFlow or matplotlib.

``python -m pytest -m "not slow"`` leaves out the tests marked ``slow`` (those that start the
command line in a subprocess, train for many steps, or need two replicas or two workers): the
rest are the quick check, and still run some code of every module under nlp_tutorials/.
"""
import os

import pytest

from support import tiny_model

# TensorFlow's C++ log (oneDNN notes, CUDA probing) would bury pytest's report. Set here, it
# also reaches the command lines that tests start in subprocesses.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# Pictures are only written to files: no window, whatever the machine's default backend.
os.environ.setdefault("MPLBACKEND", "Agg")


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
