"""An exported SavedModel called in a fresh Python that cannot import nlp_tutorials: what a
server sees (the serving tests' folder is on sys.path under pytest)."""
import json
import os
import subprocess
import sys
from pathlib import Path

# Run in a fresh interpreter: loads a SavedModel with TensorFlow (and tensorflow-text when the
# request says so), calls the named signatures, and answers with their outputs (strings decoded
# from UTF-8) and the nlp_tutorials modules it holds (there must be none).
LOADER = """
import json, sys
import numpy as np
import tensorflow as tf
request = json.load(sys.stdin)
if request["tensorflow_text"]:
    import tensorflow_text
answers = []
for path, calls in request["models"]:
    model = tf.saved_model.load(path)
    answer = {}
    for name, inputs in calls.items():
        dtype = tf.int32 if name == "predict_ids" else tf.string
        outputs = model.signatures[name](**{k: tf.constant(v, dtype) for k, v in inputs.items()})
        answer[name] = {k: (np.char.decode(v.numpy().astype(bytes), "utf-8")
                            if v.dtype == tf.string else v.numpy()).tolist()
                        for k, v in outputs.items()}
    answers.append(answer)
modules = sorted(m for m in sys.modules if m.split(".")[0] == "nlp_tutorials")
print(json.dumps({"modules": modules, "answers": answers}))
"""

def load_elsewhere(version, calls: dict, tensorflow_text: bool = True) -> dict:
    """Call ``calls`` ({signature: inputs}) on a SavedModel loaded in a fresh Python that
    cannot import nlp_tutorials (no PYTHONPATH, another working folder)."""
    return load_each_elsewhere([(version, calls)], tensorflow_text)[0]


def load_each_elsewhere(requests, tensorflow_text: bool = True) -> list:
    """:func:`load_elsewhere` for several (version, calls), one after the other in one fresh
    Python: TensorFlow is imported once for them all."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    request = {"models": [(str(version), calls) for version, calls in requests],
               "tensorflow_text": tensorflow_text}
    done = subprocess.run([sys.executable, "-c", LOADER], input=json.dumps(request),
                          capture_output=True, text=True, env=env,
                          cwd=Path(requests[0][0]).parent, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert answer["modules"] == []
    return answer["answers"]
