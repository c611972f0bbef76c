"""Model folders built once per test run and read by every test file that needs one.

Under pytest-xdist each worker is a process of its own with its own session, so a session
fixture alone would build a folder once per worker. :class:`SharedFolders` keeps each folder in
the directory that all the run's workers share (the parent of a worker's base temporary
directory) and builds it under an exclusive ``flock``: the first worker to ask builds it, the
others wait on the lock and then read it.

The folders are read-only for the tests: a test that changes one would change what the next
test reads. Each worker fingerprints a folder (every file's path, size and modification time)
when it first hands it out and checks the fingerprint again at the end of its session, so a
test that writes into a shared folder fails the run, naming the folder and the paths.
"""
import contextlib
import fcntl
import io
import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest


class SharedFolders:
    """``folder(name, build)`` -> the path of ``name``, built by ``build(path)`` if no worker
    of this run has built it yet."""

    def __init__(self, tmp_path_factory):
        base = tmp_path_factory.getbasetemp()
        self.root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"
        self.root.mkdir(exist_ok=True)
        self.handed_out = {}

    def folder(self, name: str, build) -> Path:
        path = self.root / name
        with open(self.root / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            # Built in place (the runs record their own paths); the mark says it finished.
            built = self.root / f"{name}.built"
            if not built.exists():
                shutil.rmtree(path, ignore_errors=True)
                build(path)
                built.touch()
        self.handed_out.setdefault(name, fingerprint(path))
        return path

    def changed(self) -> dict:
        """{folder name: paths added, removed or rewritten} since each was handed out."""
        found = {}
        for name, before in self.handed_out.items():
            after = fingerprint(self.root / name)
            paths = sorted(set(before) ^ set(after)
                           | {p for p in before.keys() & after.keys() if before[p] != after[p]})
            if paths:
                found[name] = paths
        return found


def fingerprint(folder: Path) -> dict:
    return {str(path.relative_to(folder)): (path.stat().st_size, path.stat().st_mtime_ns)
            for path in folder.rglob("*") if path.is_file()}


# --- the builders


# The tiny BERT of the pre-training tests: `bert train` with these flags (6 steps here; the
# tests that train again use the same sizes).
TINY_TRAIN_FLAGS = ["--dim", "32", "--layers", "1", "--heads", "2", "--max-len", "32",
                    "--batch-size", "8"]


PROBE = ("the company said", "shares rose")  # the pair whose answer the trained model records


def build_pretrained_bert(workdir: Path) -> None:
    """Run `bert train` for 6 steps in ``workdir`` (its pictures and attention pickle go under
    ``workdir/visual``; the model folder is ``workdir/run``). What only the process held is kept
    beside it for the tests that compare with it: ``printed.txt`` (its standard output),
    ``evaluation.json`` (pretrain's test-split scores), ``run.json`` (the config's model_dir,
    max_len and seed, the optimizer's step count, the tokenizer's vocabulary), ``weights.npz``
    (every weight, by path, as trained) and ``answer.npz`` (the trained model's sequence output
    for :data:`PROBE`, and the ids it read)."""
    from nlp_tutorials.cli import main
    from nlp_tutorials.training import pretraining
    from support import weights_by_path

    workdir.mkdir(parents=True)
    runs, real_pretrain = [], pretraining.pretrain

    def keeping_the_run(*args, **kwargs):
        runs.append(real_pretrain(*args, **kwargs))
        return runs[-1]

    out = io.StringIO()
    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out):
        patch.chdir(workdir)
        patch.setattr(pretraining, "pretrain", keeping_the_run)
        status = main("bert", ["train", *TINY_TRAIN_FLAGS, "--steps", "6",
                               "--checkpoint-every", "3", "--sample-every", "3",
                               "--model-dir", str(workdir / "run")])
    assert status == 0, out.getvalue()
    run = runs[0]
    (workdir / "printed.txt").write_text(out.getvalue(), encoding="utf-8")
    (workdir / "evaluation.json").write_text(json.dumps(run.evaluation))
    (workdir / "run.json").write_text(json.dumps({
        "model_dir": run.config.model_dir, "max_len": run.config.max_len,
        "steps_taken": int(run.model.optimizer.iterations.numpy()),
        "seed": run.config.seed, "vocab": run.tokenizer.vocab}))
    np.savez(workdir / "weights.npz", **weights_by_path(run.model))
    ids, segments = run.tokenizer.encode(*PROBE, max_len=run.config.max_len)
    inputs = {"input_ids": np.array([ids], "int32"),
              "token_type_ids": np.array([segments], "int32")}
    np.savez(workdir / "answer.npz", sequence_output=run.model(inputs)["sequence_output"].numpy(),
             **inputs)


def build_mrpc_classifier(folder: Path) -> None:
    """A tiny BERT with a fresh MRPC classifier (a word vocabulary of 300 MRPC train pairs, 64
    positions), saved as `finetune` saves one: for the commands that read a fine-tuned folder
    and whose answers do not depend on its training."""
    from nlp_tutorials.finetuned.folders import save_head
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.text.tokenization import WordTokenizer
    from support import tiny_model

    tokenizer = WordTokenizer.build([s for p in load_mrpc("train")[:300] for s in (p.text, p.pair)])
    backbone = tiny_model("bert", vocab_size=tokenizer.vocab_size, pad_token_id=tokenizer.pad_id,
                          max_position_embeddings=64)
    save_head(SequenceClassifier(backbone), folder)
    tokenizer.save(folder)
