"""Small helpers several test files share (the tests' folder is on sys.path under pytest)."""
import contextlib
import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]


# A model small enough to build in a fraction of a second; a test that depends on a size passes
# it as an override. Dropout is off so that training=True and training=False agree.
TINY_MODEL = dict(vocab_size=40, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=24,
                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny_config(model_type: str = "bert", **overrides):
    """A :class:`ModelConfig` of :data:`TINY_MODEL`'s sizes, ``overrides`` replacing any."""
    from nlp_tutorials.models.config import ModelConfig

    return ModelConfig(**{"model_type": model_type, **TINY_MODEL, **overrides})


def tiny_model(model_type: str = "bert", seed: int = 0, **overrides):
    """A tiny "bert", "gpt" or "transformer" with weights drawn from ``seed``: the constructor
    calls the model once, so every weight exists when it returns."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.gpt import GPT
    from nlp_tutorials.transformer import Transformer

    model_class = {"bert": BERT, "gpt": GPT, "transformer": Transformer}[model_type]
    keras.utils.set_random_seed(seed)
    return model_class(tiny_config(model_type, **overrides))


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports on localhost that were free a moment ago (for local workers)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def weights_by_path(model) -> dict:
    """The model's weights by their Keras path without the model's name, as checkpoints key them."""
    return {w.path.removeprefix(f"{model.name}/"): w.numpy() for w in model.weights}


def checkpoint_weights(prefix) -> dict:
    """The model weights a checkpoint holds, by Keras path (its keys spell "/" as ".S")."""
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(prefix))
    marker, suffix = "model/", "/.ATTRIBUTES/VARIABLE_VALUE"
    return {key[len(marker):-len(suffix)].replace(".S", "/"): reader.get_tensor(key)
            for key in reader.get_variable_to_shape_map()
            if key.startswith(marker) and key.endswith(suffix)}


def run_local_workers(argv: list, count: int = 2, timeout: int = 240) -> list:
    """Run ``python argv`` as ``count`` workers of one local cluster (TF_CONFIG on free ports),
    the repository first on the path; (returncode, stdout, stderr) of each, by index."""
    root = Path(__file__).resolve().parent.parent
    cluster = {"worker": [f"localhost:{port}" for port in free_ports(count)]}
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH")) if p)
    workers = [subprocess.Popen(
        [sys.executable, *argv],
        env={**os.environ, "PYTHONPATH": path, "TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": "worker", "index": index}})},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root)
        for index in range(count)]
    try:
        outputs = [worker.communicate(timeout=timeout) for worker in workers]
    finally:
        for worker in workers:
            worker.kill()
    return [(worker.returncode, out, err) for worker, (out, err) in zip(workers, outputs)]


def environment() -> dict:
    """This process' environment with the repository and tests/ first on the path, output
    unbuffered: for a fresh ``python`` that imports the package and these helpers."""
    path = os.pathsep.join(p for p in (str(REPOSITORY), str(REPOSITORY / "tests"),
                                       os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def run_main(model: str, *args) -> subprocess.CompletedProcess:
    """``python -m nlp_tutorials.<model> ARGS`` run in this process through ``cli.main``: its
    exit status (argparse's exits included) and what it printed on stdout and stderr, as a
    finished process would give them. For the tests where the separate process is not itself
    what is tested: no second TensorFlow to import."""
    from nlp_tutorials.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(model, list(args))
        except SystemExit as exit:
            status = exit.code
    return subprocess.CompletedProcess([model, *args], status, out.getvalue(), err.getvalue())


def main_in_fresh_process(model: str, args, forbidden=("tensorflow",),
                          timeout: int = 120) -> subprocess.CompletedProcess:
    """Run ``python -m nlp_tutorials.<model> ARGS`` (``model``: a family of
    :mod:`nlp_tutorials.cli`, "baseline" included) through its ``main`` in a fresh interpreter,
    the repository and tests/ first on the path, and assert no module in ``forbidden`` was
    imported by the time it returned or exited. Its exit status is the process'."""
    entry = ("from nlp_tutorials.cli import main as run\n"
             f"call = lambda: run({model!r}, {list(args)!r})\n")
    code = ("import sys\n" + entry +
            "try:\n    status = call()\nexcept SystemExit as exit:\n    status = exit.code\n"
            f"for name in {list(forbidden)!r}:\n"
            "    assert name not in sys.modules, f'{name} was imported'\n"
            "sys.exit(status)\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=REPOSITORY, env=environment())


def fails_without_tensorflow(*args, model: str = "bert", timeout: int = 60) -> str:
    """Run ``python -m nlp_tutorials.<model> ARGS`` in a fresh interpreter
    (:func:`main_in_fresh_process`); assert it failed in one line (exit status 2) without
    importing TensorFlow, and return that line."""
    result = main_in_fresh_process(model, args, timeout=timeout)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    return lines[0]


def without_progress(printed: list) -> list:
    """The lines a command printed less its progress lines (each gives the examples per
    second: nlp_tutorials.system.progress)."""
    return [line for line in printed if " examples/s" not in line]
