"""An exported SavedModel called in a fresh Python that cannot import nlp_tutorials: what a
server sees (the serving tests' folder is on sys.path under pytest).

Starting such a Python and importing TensorFlow and tensorflow-text takes about 7 s, loading a
tiny model in it 2 s: one Python with tensorflow-text is kept per test process and loads every
model asked of it, answering one request at a time. A model that must load where
tensorflow-text was never imported gets a Python of its own (``tensorflow_text=False``).
"""
import atexit
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Run in the fresh interpreter: each request line names SavedModels and the signatures to call
# on each; the answer line holds their outputs (strings decoded from UTF-8), or the error, and
# the nlp_tutorials modules the interpreter holds (there must be none).
LOADER = """
import json, sys
import numpy as np
import tensorflow as tf
if sys.argv[1] == "tensorflow_text":
    import tensorflow_text


def answer(path, calls):
    model = tf.saved_model.load(path)
    answers = {}
    for name, inputs in calls.items():
        dtype = tf.int32 if name == "predict_ids" else tf.string
        outputs = model.signatures[name](**{k: tf.constant(v, dtype) for k, v in inputs.items()})
        answers[name] = {k: (np.char.decode(v.numpy().astype(bytes), "utf-8")
                             if v.dtype == tf.string else v.numpy()).tolist()
                         for k, v in outputs.items()}
    return answers


for line in sys.stdin:
    try:
        reply = {"answers": [answer(path, calls) for path, calls in json.loads(line)]}
    except Exception as error:
        reply = {"error": repr(error)}
    reply["modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "nlp_tutorials")
    print("ANSWER " + json.dumps(reply), flush=True)
"""


class Elsewhere:
    """A fresh Python running :data:`LOADER`, with no PYTHONPATH and another working folder,
    so it cannot import nlp_tutorials from the checkout."""

    def __init__(self, tensorflow_text: bool):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        self.log = tempfile.TemporaryFile("w+")  # its stderr: a pipe could fill and block it
        self.process = subprocess.Popen(
            [sys.executable, "-c", LOADER, "tensorflow_text" if tensorflow_text else "plain"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True, env=env,
            cwd=tempfile.gettempdir())

    def ask(self, requests) -> list:
        """The answers of [(version folder, {signature: inputs})], in order."""
        self.process.stdin.write(json.dumps([(str(v), calls) for v, calls in requests]) + "\n")
        self.process.stdin.flush()
        for line in self.process.stdout:
            if line.startswith("ANSWER "):
                reply = json.loads(line[len("ANSWER "):])
                assert "error" not in reply, reply["error"]
                assert reply["modules"] == []
                return reply["answers"]
        self.log.seek(0)
        raise AssertionError(f"the fresh Python ended: {self.log.read()[-2000:]}")

    def close(self) -> None:
        self.process.kill()
        self.process.wait()
        self.log.close()


_KEPT = []  # the Python with tensorflow-text this test process keeps, once started


def load_elsewhere(version, calls: dict, tensorflow_text: bool = True) -> dict:
    """Call ``calls`` ({signature: inputs}) on a SavedModel loaded in a fresh Python that
    cannot import nlp_tutorials."""
    return load_each_elsewhere([(version, calls)], tensorflow_text)[0]


def load_each_elsewhere(requests, tensorflow_text: bool = True) -> list:
    """:func:`load_elsewhere` for several (version, calls). With tensorflow-text: in the Python
    kept for this test process; without: in a Python started for them alone."""
    if not tensorflow_text:
        elsewhere = Elsewhere(tensorflow_text=False)
        try:
            return elsewhere.ask(requests)
        finally:
            elsewhere.close()
    if not _KEPT or _KEPT[0].process.poll() is not None:
        _KEPT[:] = [Elsewhere(tensorflow_text=True)]
        atexit.register(_KEPT[0].close)
    return _KEPT[0].ask(requests)
