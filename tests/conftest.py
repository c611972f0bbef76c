"""Set-up shared by every test, made before any test module imports TensorFlow or matplotlib.

``python -m pytest -m "not slow"`` leaves out the tests marked ``slow`` (those that start the
command line in a subprocess, train for many steps, or need two replicas or two workers): the
rest run in about a minute and a half on two cores and still reach every module.
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
def make_tiny_model():
    """``make_tiny_model(model_type="bert", seed=0, **overrides)``: a fresh tiny model, for a test
    that changes it or needs other sizes (see support.tiny_model)."""
    return tiny_model


@pytest.fixture(scope="session")
def tiny_bert():
    """One tiny BERT shared by every test that only reads it (never train or prune it)."""
    return tiny_model("bert")


@pytest.fixture(scope="session")
def tiny_gpt():
    """One tiny GPT shared by every test that only reads it (never train or prune it)."""
    return tiny_model("gpt")
