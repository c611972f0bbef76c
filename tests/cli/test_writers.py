"""No command writes over another's work: outputs over inputs, paths under files, folders it may
not write and folders another run holds are refused in one line before any work; Ctrl-C in any
command is one line and exit status 130; what a killed command left is cleaned by the next.

Behaviour that belongs to a process (signals, locks, exit statuses, TensorFlow not loaded) is
tested on real `python -m nlp_tutorials...` processes.
"""
import errno
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from interrupt import signalled_when_paused
from support import environment, fails_without_tensorflow, run_main
from nlp_tutorials.cli import main
from nlp_tutorials.cli.commands import FAMILIES
from nlp_tutorials.system.locks import LOCK_NAME

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY_TRAIN = ["--dim", "32", "--layers", "1", "--heads", "2", "--max-len", "32",
              "--batch-size", "8", "--no-plots"]


def refused_before_tensorflow(model: str, *args) -> str:
    """Run ``python -m nlp_tutorials.<model> args`` in a fresh process that must stop with
    status 2, one line, and TensorFlow never imported; returns the line after its prefix."""
    line = fails_without_tensorflow(*[str(a) for a in args], model=model, timeout=120)
    prefix = f"python -m nlp_tutorials.{model} {args[0]}: error: "
    assert line.startswith(prefix), line
    return line[len(prefix):]


def snapshot(folder: Path) -> dict:
    """{relative path: SHA-256} of every file under ``folder``."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# --- an output over an input: every command that writes, refused before TensorFlow loads

@pytest.fixture
def disk(tmp_path) -> Path:
    """A model-like folder with files, a corpus, a pickle and a regular file to trip on."""
    model = tmp_path / "model"
    model.mkdir()
    for name in ("config.json", "vocab.txt", "head_importance.json"):
        (model / name).write_text("{}")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("one line .\n\nanother .\n")
    (tmp_path / "attention.pkl").write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("a file, not a folder")
    (tmp_path / "squad").mkdir()
    (tmp_path / "squad" / "train-v1.1.json").write_text(
        json.dumps({"data": [{"title": "A", "paragraphs": []}, {"title": "B", "paragraphs": []}]}))
    return tmp_path


OVER_INPUTS = [  # (model, args, the line after "error: "), {d} the test's folder
    ("bert", ["export-model", "--model-dir", "{d}/model", "--output", "{d}/model"],
     "--output {d}/model/1 lies inside --model-dir {d}/model; the command would write into "
     "what it reads: choose a path outside it"),
    ("bert", ["export-model", "--model-dir", "{d}/model/1/m", "--output", "{d}/model",
              "--overwrite"],
     "--model-dir {d}/model/1/m lies inside {d}/model/1, which --output replaces whole; "
     "choose another --output"),
    ("bert", ["prepare", "--corpus", "{d}/texts/*.txt", "--output", "{d}/texts"],
     "--corpus {d}/texts/a.txt lies inside {d}/texts, which --output replaces whole; choose "
     "another --output"),
    ("gpt", ["prepare", "--corpus", "{d}/texts/a.txt", "--output", "{d}/model/shards",
             "--tokenizer-from", "{d}/model"],
     "--output {d}/model/shards lies inside --tokenizer-from {d}/model; the command would "
     "write into what it reads: choose a path outside it"),
    ("bert", ["train", "--init-from", "{d}/model", "--model-dir", "{d}/model"],
     "--model-dir {d}/model is the same folder as --init-from {d}/model; the command would "
     "write over what it reads: choose another --model-dir"),
    ("gpt", ["train", "--corpus", "{d}/texts/a.txt", "--model-dir", "{d}/texts/a.txt"],
     "--model-dir {d}/texts/a.txt: is a file; expected a folder"),
    ("bert", ["finetune", "--model-dir", "{d}/model", "--output-dir", "{d}/model"],
     "--output-dir {d}/model is the same folder as --model-dir {d}/model; the command would "
     "write over what it reads: choose another --output-dir"),
    ("bert", ["finetune", "--init-from", "{d}/model", "--output-dir", "{d}/model/mrpc"],
     "--output-dir {d}/model/mrpc lies inside --init-from {d}/model; the command would write "
     "into what it reads: choose a path outside it"),
    ("bert", ["finetune", "--task", "rte", "--data", "{d}/texts", "--output-dir",
              "{d}/texts/rte"],
     "--output-dir {d}/texts/rte lies inside --data {d}/texts; the command would write into "
     "what it reads: choose a path outside it"),
    ("bert", ["evaluate", "--model-dir", "{d}/model", "--output-dir", "{d}/model/scores"],
     "--output-dir {d}/model/scores lies inside --model-dir {d}/model; the command would "
     "write into what it reads: choose a path outside it"),
    ("bert", ["export", "--model-dir", "{d}/model", "--output", "{d}/model/config.json"],
     "--output {d}/model/config.json lies inside --model-dir {d}/model; the command would "
     "write into what it reads: choose a path outside it"),
    ("bert", ["split-squad", "--input", "{d}/squad/train-v1.1.json", "--train-articles", "1",
              "--output", "{d}/squad"],
     "--output {d}/squad/train-v1.1.json is the same file as --input "
     "{d}/squad/train-v1.1.json; the command would write over what it reads: choose another "
     "--output"),
    ("transformer", ["export", "--model-dir", "{d}/model", "--output", "{d}/model"],
     "--output {d}/model: is a folder; expected a file"),
    ("gpt", ["plot", "--input", "{d}/attention.pkl", "--output-dir", "{d}/attention.pkl"],
     "--output-dir {d}/attention.pkl: is a file; expected a folder"),
    ("bert", ["explore", "--input", "{d}/attention.pkl", "--importance",
              "{d}/model/head_importance.json", "--output", "{d}/model/head_importance.json"],
     "--output {d}/model/head_importance.json is the same file as --importance "
     "{d}/model/head_importance.json; the command would write over what it reads: choose "
     "another --output"),
]


@pytest.mark.parametrize("model, args, expected", OVER_INPUTS)
def test_an_output_over_an_input_is_refused_before_any_work(disk, model, args, expected):
    before = snapshot(disk)
    line = refused_before_tensorflow(model, *[a.format(d=disk) for a in args])
    assert line == expected.format(d=disk)
    assert snapshot(disk) == before and not list(disk.rglob(LOCK_NAME))


def test_every_command_that_writes_is_covered():
    """Each run function that writes appears in the tables here; the others only read."""
    def run(model, name):
        return FAMILIES[model].command(name).run

    tested = {run(model, args[0]) for model, args, *_ in OVER_INPUTS + UNDER_A_FILE}
    tested.add(run("bert", "heads"))  # below: it loads TensorFlow before its checks
    readers = {run("bert", "predict"), run("gpt", "generate"), run("transformer", "translate"),
               run("baseline", "")}
    every = {command.run for family in FAMILIES.values() for command in family.commands}
    assert every - readers == tested


UNDER_A_FILE = [  # (model, args with {f}: a regular file), the flag at fault
    ("bert", ["export-model", "--model-dir", "m", "--output", "{f}/served"], "--output",
     "{f}/served/1"),
    ("gpt", ["prepare", "--corpus", "{d}/texts/a.txt", "--output", "{f}/shards"], "--output",
     "{f}/shards"),
    ("bert", ["train", "--model-dir", "{f}/run"], "--model-dir", "{f}/run"),
    ("transformer", ["train", "--model-dir", "{f}/run"], "--model-dir", "{f}/run"),
    ("bert", ["finetune", "--output-dir", "{f}/mrpc"], "--output-dir", "{f}/mrpc"),
    ("gpt", ["export", "--output", "{f}/a.pkl"], "--output", "{f}/a.pkl"),
    ("bert", ["evaluate", "--output-dir", "{f}/scores"], "--output-dir", "{f}/scores"),
    ("bert", ["split-squad", "--input", "{d}/squad/train-v1.1.json", "--train-articles", "1",
              "--output", "{f}/split"], "--output", "{f}/split/train-v1.1.json"),
    ("transformer", ["plot", "--input", "{d}/attention.pkl", "--output-dir", "{f}/pictures"],
     "--output-dir", "{f}/pictures"),
]


@pytest.mark.parametrize("model, args, flag, path", UNDER_A_FILE)
def test_a_path_under_a_regular_file_is_one_line(disk, model, args, flag, path):
    blocker = disk / "notes.txt"
    line = refused_before_tensorflow(model, *[a.format(d=disk, f=blocker) for a in args])
    assert line == (f"{flag} {path.format(f=blocker)}: {blocker} is a file, not a folder; "
                    f"expected a path whose every parent is a folder")


def test_export_model_into_a_folder_it_may_not_write_is_one_line(tmp_path):
    base = tmp_path / "served"
    base.mkdir()
    base.chmod(0o555)
    immutable = False
    if os.access(base, os.W_OK):  # root: modes do not stop it, the immutable flag does
        immutable = subprocess.run(["chattr", "+i", str(base)]).returncode == 0
    try:
        if os.access(base, os.W_OK):
            pytest.skip("no way to make a folder this process cannot write")
        line = refused_before_tensorflow("bert", "export-model", "--model-dir", "m",
                                         "--output", base)
        assert line == (f"--output {base / '1'}: cannot write in {base} (permission denied); "
                        f"expected a folder you may write in")
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(base)], check=True)
        base.chmod(0o755)


# --- bert heads: its checks come before any TensorFlow work, and before any file is written

@pytest.fixture
def finetuned(mrpc_classifier, tmp_path) -> Path:
    """A copy of the shared tiny MRPC classifier: the refused commands below name folders
    inside it, and must leave it as it was."""
    return shutil.copytree(mrpc_classifier, tmp_path / "mrpc")


@pytest.mark.parametrize("args, expected", [
    (["--prune", "0.25", "--pruned-dir", "{m}"],
     "--pruned-dir {m} is the same folder as --model-dir {m}; the command would write over "
     "what it reads: choose another --pruned-dir"),
    (["--prune", "0.25", "--pruned-dir", "{m}/pruned"],
     "--pruned-dir {m}/pruned lies inside --model-dir {m}; the command would write into what "
     "it reads: choose a path outside it"),
    (["--output-dir", "{m}"],
     "--output-dir {m} is the same folder as --model-dir {m}; the command would write over "
     "what it reads: choose another --output-dir"),
    (["--output-dir", "{m}/model.keras/pictures"],
     "--output-dir {m}/model.keras/pictures: {m}/model.keras is a file, not a folder; expected "
     "a path whose every parent is a folder"),
])
def test_heads_refuses_in_one_line_before_writing_anything(finetuned, capsys, args, expected):
    before = snapshot(finetuned.parent)
    status = main("bert", ["heads", "--model-dir", str(finetuned), "--dev-size", "4",
                           *[a.format(m=finetuned) for a in args]])
    assert (status, capsys.readouterr().err) == (
        2, f"python -m nlp_tutorials.bert heads: error: {expected.format(m=finetuned)}\n")
    assert snapshot(finetuned.parent) == before  # model.keras untouched, no importance written


# --- the last resort: an OSError naming a file is one line too

@pytest.mark.parametrize("error, line", [
    (PermissionError(errno.EACCES, "Permission denied", "/srv/m/vocab.txt"),
     "/srv/m/vocab.txt: Permission denied"),
    (OSError(errno.EXDEV, "Invalid cross-device link", "/a/.1.tmp7", None, "/b/1"),
     "/a/.1.tmp7 -> /b/1: Invalid cross-device link"),
])
def test_an_os_error_naming_a_file_is_one_line(monkeypatch, capsys, error, line):
    failing = replace_run(monkeypatch, "gpt", "generate", error)
    assert main("gpt", ["generate", "--prompt", "the"]) == 2 and failing
    assert capsys.readouterr().err == f"python -m nlp_tutorials.gpt generate: error: {line}\n"


def test_an_os_error_naming_no_file_is_not_hidden(monkeypatch):
    replace_run(monkeypatch, "gpt", "generate", BrokenPipeError(errno.EPIPE, "Broken pipe"))
    with pytest.raises(BrokenPipeError):
        main("gpt", ["generate", "--prompt", "the"])


def replace_run(monkeypatch, model: str, name: str, error: Exception) -> list:
    """Make command ``name``'s run raise ``error``; returns a list that records the call."""
    import dataclasses

    called = []

    def run(*settings, **keywords):
        called.append(settings)
        raise error

    family = FAMILIES[model]
    commands = tuple(dataclasses.replace(c, run=run) if c.name == name else c
                     for c in family.commands)
    monkeypatch.setitem(FAMILIES, model, dataclasses.replace(family, commands=commands))
    return called


# --- locks

def test_a_lock_left_by_a_dead_process_is_taken_over_and_a_refused_run_leaves_the_rest(
        tmp_path, capsys):
    output_dir = tmp_path / "mrpc"
    output_dir.mkdir()
    (output_dir / "results.json").write_text("{}")  # an earlier run's
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    info = os.stat(output_dir)
    (output_dir / LOCK_NAME).write_text(json.dumps(
        {"pid": dead.pid, "host": socket.gethostname(), "folder": [info.st_dev, info.st_ino]}))
    status = main("bert", ["finetune", "--model-dir", str(tmp_path / "nothing"),
                           "--output-dir", str(output_dir)])
    assert status == 2
    assert capsys.readouterr().err.splitlines() == [
        f"note: {output_dir / LOCK_NAME} was left by process {dead.pid}, which no longer "
        f"runs; taking the lock over",
        f"python -m nlp_tutorials.bert finetune: error: {tmp_path / 'nothing'}: no pre-trained "
        f"checkpoint; run `python -m nlp_tutorials.bert train` first, or pass --from-scratch"]
    assert [p.name for p in output_dir.iterdir()] == ["results.json"]


def start(args: list, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=environment(),
                            **popen)


def wait_for(condition, process, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


@pytest.mark.slow
def test_a_second_train_into_the_same_folder_is_refused_and_ctrl_c_says_where_it_stopped(
        tmp_path):
    """Two `train` runs into one new --model-dir: the second is refused naming the first's
    process; Ctrl-C stops the first with one line naming the step and its checkpoint."""
    import tensorflow as tf

    model_dir = tmp_path / "run"
    first = start(["nlp_tutorials.bert", "train", "--model-dir", str(model_dir),
                   "--steps", "100000", "--checkpoint-every", "2", *TINY_TRAIN])
    try:
        wait_for(lambda: tf.train.latest_checkpoint(str(model_dir / "checkpoints")), first)
        second = run_main("bert", "train", "--model-dir", str(model_dir), "--steps", "5",
                          *TINY_TRAIN)  # in this process, beside the first
        assert (second.returncode, second.stderr) == (2, (
            f"python -m nlp_tutorials.bert train: error: --model-dir {model_dir} is in use by "
            f"another run (process {first.pid}, lock file {model_dir / LOCK_NAME}); wait for "
            f"it to end, or choose another --model-dir\n"))
        first.send_signal(signal.SIGINT)
        _, err = first.communicate(timeout=120)
    finally:
        first.kill()
    saved = tf.train.latest_checkpoint(str(model_dir / "checkpoints"))
    step = int(tf.train.load_checkpoint(saved).get_tensor(
        "iterations/.ATTRIBUTES/VARIABLE_VALUE"))
    assert first.returncode == 130 and saved.endswith(f"ckpt-{step}")
    assert err.splitlines() == [
        f"python -m nlp_tutorials.bert train: interrupted at step {step} of 100000: checkpoint "
        f"saved; continue with --resume ({saved} is intact)"]
    assert not (model_dir / LOCK_NAME).exists()


# --- Ctrl-C and kill -9 in commands that write

PAUSED_EXPORT = """
import sys
from interrupt import pause
from nlp_tutorials.system import files
real = files.save_folder_atomic


def save_then_pause(path, save):  # the SavedModel written whole, not yet renamed into place
    return real(path, lambda tmp: (save(tmp), pause(sys.argv[1])))


files.save_folder_atomic = save_then_pause
from nlp_tutorials.cli import main
sys.exit(main("bert", sys.argv[2:]))
"""


@pytest.mark.slow
def test_ctrl_c_and_kill_during_export_model(mrpc_classifier, tmp_path):
    """Ctrl-C: one line, the version folder as it was; kill -9: the hidden folder it was
    writing is left, and the next export removes it, saying so in one line."""
    model_dir, served = mrpc_classifier, tmp_path / "served"
    export = ["export-model", "--model-dir", str(model_dir), "--output", str(served),
              "--ids-only"]
    marker = tmp_path / "paused"
    status, _, err = signalled_when_paused(["-c", PAUSED_EXPORT, str(marker), *export], marker,
                                           signal.SIGINT)
    assert (status, err) == (130, f"python -m nlp_tutorials.bert export-model: interrupted; "
                                  f"{served / '1'} was not written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["paused"]
    marker.unlink()
    status, _, err = signalled_when_paused(["-c", PAUSED_EXPORT, str(marker), *export], marker,
                                           signal.SIGKILL)
    left = [p.name for p in served.iterdir()]
    assert status == -signal.SIGKILL and len(left) == 2 and ".1.lock" in left
    (temporary,) = [name for name in left if name.startswith(".1.tmp")]
    result = run_main("bert", *export)  # the next export: in this process
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"note: {served / '.1.lock'} was left by process {temporary[len('.1.tmp'):]}, which no "
        f"longer runs; taking the lock over")
    assert result.stderr.splitlines()[1] == (
        f"note: removed {temporary} from {served}, left by process "
        f"{temporary[len('.1.tmp'):]}, which no longer runs")
    assert [p.name for p in served.iterdir()] == ["1"]


PAUSED_PREPARE = """
import os, sys
from interrupt import pause_at_write
os.fsync = pause_at_write(1, sys.argv[1])
from nlp_tutorials.cli import main
sys.exit(main("gpt", sys.argv[2:]))
"""


@pytest.mark.slow
def test_a_killed_prepare_leaves_its_folder_and_the_next_removes_it(tmp_path):
    corpus = write_corpus(tmp_path / "corpus.txt")
    output, marker = tmp_path / "shards", tmp_path / "paused"
    prepare = ["prepare", "--corpus", str(corpus), "--output", str(output)]
    status, _, _ = signalled_when_paused(["-c", PAUSED_PREPARE, str(marker), *prepare], marker,
                                         signal.SIGKILL)
    (left,) = [p for p in tmp_path.iterdir() if p.name.startswith(".shards.tmp")]
    assert status == -signal.SIGKILL and (left / "shard-00000-of-00001.tfrecord").is_file()
    result = run_main("gpt", *prepare)  # the next prepare: in this process
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"note: removed {left.name} from {tmp_path}, left by process "
        f"{left.name[len('.shards.tmp'):]}, which no longer runs"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "paused", "shards"]


@pytest.mark.slow
def test_ctrl_c_during_the_date_training_leaves_no_model_folder(tmp_path):
    model_dir = tmp_path / "new" / "dates"
    process = start(["nlp_tutorials.transformer", "train", "--model-dir", str(model_dir),
                     "--steps", "100000", "--no-plots"])
    try:
        assert process.stdout.readline().startswith("transformer 64d/2 layers/4 heads")
        assert (model_dir / LOCK_NAME).is_file()
        time.sleep(2)  # inside the training loop, or still tracing its step
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=120)
    finally:
        process.kill()
    assert (process.returncode, err) == (
        130, f"python -m nlp_tutorials.transformer train: interrupted; {model_dir} was not "
             f"written\n")
    assert list(tmp_path.iterdir()) == []


PAUSED_PREDICT = """
import sys
from interrupt import pause
import nlp_tutorials.cli.runs as runs
start_tensorflow = runs.start_tensorflow


def start_then_pause_before_predicting():  # TensorFlow first: its start-up lines are dropped
    start_tensorflow()
    from nlp_tutorials.finetuned import predicting
    predict = predicting.predict
    predicting.predict = lambda *args, **kwargs: (pause(sys.argv[1]), predict(*args, **kwargs))


runs.start_tensorflow = start_then_pause_before_predicting
from nlp_tutorials.cli import main
sys.exit(main("bert", sys.argv[2:]))
"""


@pytest.mark.slow
def test_ctrl_c_in_a_command_that_writes_nothing(finetuned, tmp_path):
    marker = tmp_path / "paused"
    status, out, err = signalled_when_paused(
        ["-c", PAUSED_PREDICT, str(marker), "predict", "--model-dir", str(finetuned)], marker,
        signal.SIGINT)
    assert (status, out, err) == (
        130, "", "python -m nlp_tutorials.bert predict: interrupted; nothing was written\n")


@pytest.mark.slow
def test_ctrl_c_is_restored_where_a_shell_ignores_it(tmp_path):
    """A background job starts with SIGINT ignored; `kill -INT` still stops a command."""
    marker, corpus = tmp_path / "paused", write_corpus(tmp_path / "corpus.txt")
    status, _, err = signalled_when_paused(
        ["-c", "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n" + PAUSED_PREPARE,
         str(marker), "prepare", "--corpus", str(corpus), "--output", str(tmp_path / "shards")],
        marker, signal.SIGINT)
    assert (status, err) == (130, f"python -m nlp_tutorials.gpt prepare: interrupted; "
                                  f"{tmp_path / 'shards'} was not written\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "paused"]


def write_corpus(path: Path) -> Path:
    """A small corpus: 30 documents of two sentences."""
    path.write_text("".join(f"sentence {i} of a text .\nand one more .\n\n" for i in range(30)))
    return path


@pytest.mark.slow
def test_a_held_folder_reads_and_copies_as_before(tmp_path, capsys):
    """While a run holds a model folder, its lock file is one more hidden file: the commands
    that read the folder, and a copy of it, work as before (0.1.0's folders here)."""
    from nlp_tutorials.system.locks import held_folder
    from nlp_tutorials.training.checkpoints import checkpoint_names, restore_model
    from nlp_tutorials.finetuned.folders import load_finetuned

    legacy = shutil.copytree(FIXTURES / "legacy_0_1", tmp_path / "legacy")
    pretrained, finetuned = legacy / "bert_pretrain", legacy / "bert_finetuned"
    with held_folder(pretrained, "--model-dir"), held_folder(finetuned, "--output-dir"):
        assert (pretrained / LOCK_NAME).is_file() and (finetuned / LOCK_NAME).is_file()
        model, _ = restore_model(pretrained)
        assert checkpoint_names(pretrained / "checkpoints")[0].startswith("ckpt-")
        assert load_finetuned(finetuned).head.num_labels == 2
        assert main("bert", ["export", "--model-dir", str(pretrained), "--n", "1",
                             "--output", str(tmp_path / "a.pkl")]) == 0
        copy = shutil.copytree(pretrained, tmp_path / "copy")
        assert main("bert", ["export", "--model-dir", str(copy), "--n", "1",
                             "--output", str(tmp_path / "b.pkl")]) == 0
    assert (tmp_path / "a.pkl").read_bytes() == (tmp_path / "b.pkl").read_bytes()
    assert "attention of 1 test pairs written" in capsys.readouterr().out
