"""The pre-training loop and the command line: checkpoints, resume, kill -9, progress, flags."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.system.errors import UserError
from shared_folders import PROBE, TINY_TRAIN_FLAGS
from support import (
    checkpoint_weights,
    fails_without_tensorflow,
    main_in_fresh_process,
    run_main,
    tiny_model,
    weights_by_path,
)

ROOT = Path(__file__).resolve().parents[2]


def tiny_config(model_dir, **overrides):
    values = dict(model_dir=str(model_dir), dim=32, layers=1, heads=2, max_len=32, batch_size=8,
                  steps=6, checkpoint_every=3, sample_every=3, log_every=2)
    values.update(overrides)
    return TrainConfig(**values)


def run_cli(*args, timeout=300, env=None):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=ROOT)


@pytest.mark.parametrize("argv, expected", [
    (["train", "--steps", "0"], "--steps: expected a positive integer, got 0"),
    (["train", "--batch-size", "-3"], "--batch-size: expected a positive integer, got -3"),
    (["train", "--dim", "30", "--heads", "4"], "--dim 30 is not divisible by --heads 4"),
    (["train", "--nsp-mode", "sideways"], "invalid choice: 'sideways'"),
    (["train", "--learning-rate", "fast"], "expected a positive number, got 'fast'"),
    (["dance"], "invalid choice: 'dance'"),
    (["finetune", "--init-from", "no/such/minilm"],
     "--init-from no/such/minilm: no such folder; expected the folder holding a pretrained BERT "
     "(config.json or bert_config.json, vocab.txt, weights) or a fine-tuned model (model.keras)"),
    (["train", "--init-from", "no/such/minilm"],  # continued pre-training: a real BERT only
     "--init-from no/such/minilm: no such folder; expected a pretrained BERT folder "
     "(config.json or bert_config.json, vocab.txt, weights)"),
    (["finetune", "--init-from", ".", "--from-scratch"],
     "--init-from and --from-scratch exclude each other"),
    (["finetune", "--max-len", "0"], "--max-len: expected a positive integer, got 0"),
])
def test_bad_flags_fail_in_one_line_without_tensorflow(argv, expected):
    assert expected in fails_without_tensorflow(*argv)


def test_help_answers_without_tensorflow():
    result = main_in_fresh_process("gpt", ["train", "--help"])
    assert result.returncode == 0, result.stderr
    assert "--nsp-mode" in result.stdout and "--resume" in result.stdout


@pytest.fixture(scope="module")
def trained(pretrained_bert):
    """The run's shared 6-step `bert train` of a tiny BERT (``shared_folders``): the model folder,
    what the process held at its end (run.json, evaluation.json, weights.npz, answer.npz) and
    what the command printed."""
    recorded = {"evaluation": json.loads((pretrained_bert / "evaluation.json").read_text()),
                **json.loads((pretrained_bert / "run.json").read_text())}
    return pretrained_bert / "run", recorded, (pretrained_bert / "printed.txt").read_text()


def test_training_leaves_everything_later_commands_need(trained):
    model_dir, run, printed = trained
    for name in ("config.json", "train_config.json", "vocab.txt", "tokenizer_config.json",
                 "checkpoints/checkpoint"):
        assert (model_dir / name).is_file(), name
    assert list((model_dir / "logs").iterdir()), "no TensorBoard events"
    assert "target:" in printed and "predicted:" in printed
    result = run["evaluation"]
    assert set(result) >= {"mlm_accuracy", "nsp_accuracy", "baseline_accuracy", "loss"}
    assert 0.0 < result["baseline_accuracy"] < 0.2
    assert "most-frequent-token baseline" in printed
    assert run["model_dir"] == str(model_dir) and run["max_len"] == 32
    assert run["steps_taken"] == 6
    # The default --precision auto, resolved: said first, and saved as what the run computed in.
    precision = json.loads((model_dir / "train_config.json").read_text())["precision"]
    assert precision in ("float32", "mixed_bfloat16")
    assert printed.splitlines()[0].startswith(f"precision: {precision} (auto: ")


def test_restored_model_is_the_model_that_was_trained(trained):
    """What export, generate and finetune read back is the model pretrain held in memory,
    weight for weight, and not the seed's initial weights, which training moved."""
    from nlp_tutorials.training.checkpoints import build_model, restore_model

    model_dir, run, _ = trained
    model, tokenizer = restore_model(model_dir)
    assert tokenizer.vocab == run["vocab"]
    restored = weights_by_path(model)
    with np.load(model_dir.parent / "weights.npz") as saved:
        in_memory = dict(saved)
    assert restored.keys() == in_memory.keys() and len(restored) > 10
    for path, value in in_memory.items():
        np.testing.assert_array_equal(restored[path], value, err_msg=path)
    initial = weights_by_path(build_model(model.config, run["seed"]))
    assert max(np.abs(initial[path] - value).max() for path, value in in_memory.items()) > 1e-3
    with np.load(model_dir.parent / "answer.npz") as answer:
        inputs = {"input_ids": answer["input_ids"], "token_type_ids": answer["token_type_ids"]}
        ids, _ = tokenizer.encode(*PROBE, max_len=32)
        assert inputs["input_ids"][0].tolist() == ids
        a = model(inputs)["sequence_output"].numpy()
        assert a.shape == (1, 32, 32)
        np.testing.assert_array_equal(a, answer["sequence_output"])
    assert int(model.config.vocab_size) == tokenizer.vocab_size


def test_new_run_refuses_to_overwrite_a_checkpoint(trained):
    from nlp_tutorials.training.pretraining import pretrain

    model_dir, _, _ = trained
    with pytest.raises(UserError, match="already holds a checkpoint: pass --resume"):
        pretrain(tiny_config(model_dir), printer=lambda *_: None)


def test_resume_checks_flags_against_the_saved_run(trained, tmp_path):
    from nlp_tutorials.training.pretraining import pretrain

    model_dir, _, _ = trained
    with pytest.raises(UserError, match=r"--dim 64 \(saved: 32\)"):
        pretrain(tiny_config(model_dir, dim=64), given={"dim"}, resume=True,
                 printer=lambda *_: None)
    with pytest.raises(UserError, match="no checkpoint in"):
        pretrain(tiny_config(tmp_path), resume=True, printer=lambda *_: None)
    # More steps extend a run; fewer are refused, and so is any other changed flag.
    with pytest.raises(UserError, match=r"other settings: --steps 4 \(saved: 6; a resumed run "
                                        r"may grow longer, not shorter\)$"):
        pretrain(tiny_config(model_dir, steps=4), given={"steps"}, resume=True,
                 printer=lambda *_: None)
    with pytest.raises(UserError, match=r"other settings: --learning-rate 0.1 \(saved: "
                                        r"0.0005\)$"):
        pretrain(tiny_config(model_dir, steps=9, learning_rate=0.1),
                 given={"steps", "learning_rate"}, resume=True, printer=lambda *_: None)


@pytest.mark.slow
def test_resume_with_more_steps_extends_the_run(tmp_path):
    """20 steps, then --resume --steps 30: a checkpoint at step 30, train_config.json says 30
    and records the extension, and a later --resume rebuilds the same schedule from it."""
    import json

    from nlp_tutorials.training.optimization import WarmupLinearDecay
    from nlp_tutorials.training.pretraining import pretrain, resumed_config, run_schedule

    model_dir = tmp_path / "bert"
    pretrain(tiny_config(model_dir, steps=20, checkpoint_every=10), printer=lambda *_: None)
    printed = []
    run = pretrain(tiny_config(model_dir, steps=30, checkpoint_every=10), given={"steps"},
                   resume=True, printer=printed.append)
    assert saved_step(model_dir) == 30 and int(run.model.optimizer.iterations.numpy()) == 30
    saved = json.loads((model_dir / "train_config.json").read_text())
    assert saved["steps"] == 30 and saved["checkpoint_every"] == 10
    assert saved["schedule_extensions"] == [
        {"at_step": 20, "from_steps": 20, "to_steps": 30, "rate_at_step": 0.0}]
    text = "\n".join(printed)
    assert "steps 20 -> 30" in text
    assert ("--steps 30: the 20-step run goes on from step 20; learning rate 0 -> 0.000143 at "
            "step 22, then down to 0 at step 30") in text, text
    expected = WarmupLinearDecay(5e-4, 2, 20).extended(20, 30)
    again = resumed_config(tiny_config(model_dir), set(), model_dir)
    assert again.steps == 30 and run_schedule(again).pieces == expected.pieces
    # Steps 21-30 trained: the weights moved on from the step-20 checkpoint.
    at_20 = checkpoint_weights(model_dir / "checkpoints" / "ckpt-20")
    assert max(np.abs(value - at_20[path]).max()
               for path, value in weights_by_path(run.model).items()) > 1e-4


@pytest.mark.parametrize("total, at, to", [(20, 20, 30), (1000, 1000, 3000), (1000, 500, 3000),
                                           (100, 5, 300), (10, 10, 11)])
def test_an_extended_schedule_goes_on_from_the_rate_it_had(total, at, to):
    import tensorflow as tf

    from nlp_tutorials.training.optimization import WarmupLinearDecay

    old = WarmupLinearDecay(1e-3, total // 10, total)
    new = old.extended(at, to)
    assert [new.rate_at(t) for t in range(1, at + 1)] == [old.rate_at(t) for t in range(1, at + 1)]
    piece = new.pieces[-1]
    assert piece.start_rate == old.rate_at(at) and new.rate_at(to) == new.rate_at(to + 9) == 0
    # From the rate at `at`, a straight line to the decay line of a run planned for `to` steps,
    # then along that line to 0.
    assert piece.rejoin_rate == pytest.approx(1e-3 * (to - piece.rejoin_step) / (to - total // 10))
    for start, end in ((at, piece.rejoin_step), (piece.rejoin_step, to)):
        rates = np.array([new.rate_at(t) for t in range(start, end + 1)])
        np.testing.assert_allclose(np.diff(rates, 2), 0, atol=1e-12)
    steps = np.arange(1, to + 10)
    np.testing.assert_allclose(new(tf.constant(steps - 1)).numpy(),
                               [new.rate_at(t) for t in steps], rtol=1e-5, atol=1e-10)
    rebuilt = WarmupLinearDecay.from_config(new.get_config())
    assert rebuilt.pieces == new.pieces
    twice = new.extended(to, to + 50)
    assert twice.pieces[0] == piece and twice.pieces[1].start_rate == 0.0
    with pytest.raises(ValueError, match="expected"):
        old.extended(at, total)


@pytest.mark.slow
def test_export_and_plot_commands(trained, tmp_path):
    model_dir, _, _ = trained
    pickle_path = tmp_path / "att.pkl"
    result = run_main("bert", "export", "--model-dir", str(model_dir), "--n", "4",
                      "--output", str(pickle_path))
    assert result.returncode == 0, result.stderr
    from nlp_tutorials.analysis.visual import load_attention_pickle

    data = load_attention_pickle(pickle_path)
    assert len(data["src"]) == 4 and data["src"][0][0] == "[CLS]"
    assert [a.shape for a in data["attentions"]["encoder"]] == [(4, 2, 32, 32)]
    result = run_main("bert", "plot", "--input", str(pickle_path), "--output-dir",
                      str(tmp_path / "png"), "--case", "9")
    assert result.returncode == 2
    assert result.stderr.strip().endswith("valid: 0..3)"), result.stderr
    result = run_main("bert", "export", "--model-dir", str(tmp_path / "nothing"))
    assert result.returncode == 2 and "run `python -m nlp_tutorials.bert train" in result.stderr


def test_train_command_exports_and_draws_the_model_it_trained(trained):
    from nlp_tutorials.analysis.visual import load_attention_pickle

    model_dir, _, out = trained
    workdir = model_dir.parent  # where the command ran
    assert "attention of 32 test pairs written to visual/tmp/bert_attention_matrix.pkl" in out
    assert "pictures written:" in out and list((workdir / "visual" / "results").glob("*.png"))
    data = load_attention_pickle(workdir / "visual" / "tmp" / "bert_attention_matrix.pkl")
    assert [a.shape for a in data["attentions"]["encoder"]] == [(32, 2, 32, 32)]


def test_progress_prints_plain_lines_where_no_terminal_shows_a_bar():
    """Pre-training's lines: every --log-every steps (here 3), whatever the time between."""
    from nlp_tutorials.system.progress import Progress

    printed = []
    seconds = iter(range(0, 100, 10))  # the start, then a step every 10 s
    progress = Progress(7, printed.append, batch_size=8, start=1, every_steps=3,
                        every_seconds=None, interactive=False, clock=lambda: next(seconds))
    for step in range(2, 8):
        progress.update(step, {"loss": float(step), "nsp_accuracy": 0.5, "lm_loss": 9.0})
    progress.note("saved checkpoint ckpt-7")
    # The first step of the run, every third step, and the last.
    assert [line.split(" - ")[0] for line in printed[:-1]] == [
        "step 2/7", "step 3/7", "step 6/7", "step 7/7"]
    smoothed = 2.0
    for step in range(3, 8):
        smoothed = 0.95 * smoothed + 0.05 * step
    # 8 sequences a step, a step every 10 s: 0.8 a second.
    assert printed[-2] == f"step 7/7 - 1:00 - 0.8 examples/s - loss: {smoothed:.4f} - " \
                          f"nsp_accuracy: 0.5000"
    assert printed[1] == "step 3/7 - 20s - 0.8 examples/s - 40s left - loss: 2.0500 - " \
                         "nsp_accuracy: 0.5000"
    assert printed[-1] == "saved checkpoint ckpt-7"


def test_progress_on_a_terminal_is_a_bar(capsys):
    from nlp_tutorials.system.progress import Progress

    printed = []
    progress = Progress(3, printed.append, interactive=True)
    for step in range(1, 4):
        progress.update(step, {"loss": 1.0})
    progress.note("saved checkpoint ckpt-3")
    out = capsys.readouterr().out
    assert "3/3" in out and "loss: 1.0000" in out
    assert printed == ["\nsaved checkpoint ckpt-3"]  # below the bar, not over it


@pytest.mark.slow
def test_piped_output_is_plain_lines_after_a_quiet_start(tmp_path):
    """Standard output to a pipe (a log file, `| tee`): plain progress lines, no bar redrawn
    with carriage returns and colour codes. With TF_CPP_MIN_LOG_LEVEL left to the command, a
    machine without an NVIDIA GPU shows nothing of TensorFlow's start on standard error."""
    from nlp_tutorials.system.startup import has_nvidia_device

    env = {name: value for name, value in os.environ.items() if name != "TF_CPP_MIN_LOG_LEVEL"}
    result = run_cli("nlp_tutorials.bert", "train", *TINY_TRAIN_FLAGS, "--steps", "3",
                     "--model-dir", str(tmp_path / "bert"), "--no-plots", env=env)
    assert result.returncode == 0, result.stderr
    for control in ("\x1b", "\r", "\b"):
        assert control not in result.stdout, repr(result.stdout)
    lines = [line for line in result.stdout.splitlines() if line.startswith("step ")]
    assert [line.split(" - ")[0] for line in lines] == ["step 1/3", "step 3/3"], result.stdout
    number = r"\d+\.\d{4}"
    assert re.fullmatch(rf"step 3/3 - \d+s - [\d.]+ examples/s - loss: {number} - "
                        rf"mlm_accuracy: {number} - nsp_accuracy: {number}", lines[-1]), lines[-1]
    assert "saved checkpoint" in result.stdout and "test masked-token accuracy" in result.stdout
    if not has_nvidia_device():
        assert result.stderr == ""


def start_training(model_dir, steps, checkpoint_every, ready, *flags):
    """Start `bert train` in a subprocess; return it once ``ready(index text)`` holds."""
    command = [sys.executable, "-m", "nlp_tutorials.bert", "train", *TINY_TRAIN_FLAGS,
               "--steps", str(steps), "--checkpoint-every", str(checkpoint_every),
               "--model-dir", str(model_dir), "--no-plots", *flags]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               cwd=ROOT)
    index = model_dir / "checkpoints" / "checkpoint"
    deadline = time.time() + 240
    while time.time() < deadline and process.poll() is None:
        if index.is_file() and ready(index.read_text()):
            break
        time.sleep(0.05)
    assert process.poll() is None, process.stderr.read().decode()
    return process






def saved_step(model_dir) -> int:
    import tensorflow as tf

    reader = tf.train.load_checkpoint(str(model_dir / "checkpoints"))
    return int(reader.get_tensor("iterations/.ATTRIBUTES/VARIABLE_VALUE"))


@pytest.mark.slow
def test_kill_minus_9_then_resume_ends_where_an_uninterrupted_run_ends(tmp_path):
    """Killed with SIGKILL a few steps in, then resumed to step 100: the final weights are those
    of an uninterrupted 100-step run of the same seed. The killed run has over 90 steps and 45
    checkpoints still to go when it is killed, seconds of work, so the kill always lands first;
    the resume and the uninterrupted run are in-process (only the killed run needs a process).

    Dropout is off: its random state is not checkpointed, so with it the two runs would drop
    different units after the resume. Without it, the resumed run gets the weights and AdamW's
    state back bit for bit and replays the same batches, and TensorFlow's CPU kernels give the
    same bits for the same inputs: measured, the two runs end identical (largest difference
    0.0). The tolerance, 1e-5, leaves room for a kernel whose summation order follows thread
    scheduling. The start step it prints shows the resumed run did not start over, which with
    the same seed would also end there.
    """
    model_dir = tmp_path / "killed"
    process = start_training(model_dir, 100, 2, lambda index: "ckpt-6" in index,
                             "--dropout", "0")
    process.send_signal(signal.SIGKILL)
    process.wait()

    from nlp_tutorials.training.checkpoints import restore_model

    restore_model(model_dir)  # the newest checkpoint reads back whole
    killed_at = saved_step(model_dir)
    assert 6 <= killed_at < 100
    at_kill = checkpoint_weights(model_dir / "checkpoints" / f"ckpt-{killed_at}")
    result = run_main("bert", "train", "--resume", "--steps", "100", "--model-dir", str(model_dir),
                      "--no-plots")
    assert result.returncode == 0, result.stderr
    assert f"resuming from checkpoint ckpt-{killed_at} at step {killed_at}" in result.stdout
    assert f"steps {killed_at} -> 100" in result.stdout
    assert saved_step(model_dir) == 100
    result = run_main("bert", "train", *TINY_TRAIN_FLAGS, "--dropout", "0", "--steps", "100",
                      "--checkpoint-every", "100", "--model-dir", str(tmp_path / "whole"),
                      "--no-plots")
    assert result.returncode == 0, result.stderr
    resumed = checkpoint_weights(model_dir / "checkpoints" / "ckpt-100")
    whole = checkpoint_weights(tmp_path / "whole" / "checkpoints" / "ckpt-100")
    assert resumed.keys() == whole.keys() == at_kill.keys() and len(whole) > 10
    assert max(np.abs(resumed[k] - whole[k]).max() for k in whole) <= 1e-5
    assert max(np.abs(resumed[k] - at_kill[k]).max() for k in whole) > 1e-2  # it trained on


@pytest.mark.slow
def test_resume_passes_over_a_checkpoint_cut_short(trained, tmp_path):
    """The step-6 checkpoint's data file lost its second half (a full disk, a copy stopped
    half-way): --resume says so in one line and goes on from step 3, the newest intact one."""
    from nlp_tutorials.training.checkpoints import newest_intact_checkpoint

    model_dir = tmp_path / "copy"
    shutil.copytree(trained[0], model_dir)
    data = model_dir / "checkpoints" / "ckpt-6.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:data.stat().st_size // 2])
    result = run_main("bert", "train", "--resume", "--model-dir", str(model_dir), "--no-plots")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"checkpoint {model_dir / 'checkpoints' / 'ckpt-6'} is damaged: ckpt-6.data-00000-of-00001 "
        f"is cut short (Read less bytes than requested); using ckpt-3 (step 3), the newest "
        f"intact one, instead"], result.stderr
    assert "resuming from checkpoint ckpt-3 at step 3" in result.stdout
    assert "steps 3 -> 6" in result.stdout
    lines = []
    assert newest_intact_checkpoint(model_dir, lines.append)[1] == 6 and not lines


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_and_exits_130(tmp_path):
    model_dir = tmp_path / "interrupted"
    process = start_training(model_dir, 5000, 3, lambda index: True)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr.decode()
    assert "checkpoint saved; continue with --resume" in stderr.decode()
    import tensorflow as tf

    step = saved_step(model_dir)
    assert 3 <= step < 5000
    assert tf.train.latest_checkpoint(str(model_dir / "checkpoints")).endswith(f"ckpt-{step}")


def test_jit_without_xla_is_one_line(monkeypatch):
    import tensorflow as tf

    from nlp_tutorials.training import pretraining as training

    def no_xla(*args, jit_compile=None, **kwargs):
        assert jit_compile, "the probe must ask for XLA"
        raise tf.errors.UnimplementedError(None, None, "XLA is not linked into this binary\nmore")

    monkeypatch.setattr(tf, "function", no_xla)
    with pytest.raises(UserError) as error:
        training.check_xla_available()
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("--jit: this TensorFlow build cannot XLA-compile")
    assert "XLA is not linked into this binary" in message and "run without --jit" in message


def test_jit_probe_passes_where_xla_exists():
    from nlp_tutorials.training import pretraining as training

    training.check_xla_available()


def test_first_ctrl_c_only_requests_a_stop_and_the_second_interrupts():
    from nlp_tutorials.training.loop import ctrl_c_stops_between_steps

    before = signal.getsignal(signal.SIGINT)
    with ctrl_c_stops_between_steps() as stop_requested:
        assert not stop_requested.is_set()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.1)  # the handler runs between bytecodes
        assert stop_requested.is_set()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("mode", ["eager", "graph", "xla"])
def test_fused_adamw_follows_numpy_adamw(mode):
    import keras
    import tensorflow as tf

    from nlp_tutorials.training.optimization import make_optimizer

    rng = np.random.default_rng(0)
    start = [rng.normal(size=(5, 3)), rng.normal(size=(3,))]
    grads = [[rng.normal(size=w.shape) for w in start] for _ in range(3)]
    weights = [keras.Variable(w.astype("float32"), name=n)
               for w, n in zip(start, ("kernel", "bias"))]
    optimizer = make_optimizer(1e-2, 10, warmup_fraction=0.0)  # rate 1e-2 * (10 - t) / 10

    def apply(g):
        optimizer.apply_gradients(zip(g, weights))

    if mode != "eager":
        apply = tf.function(apply, jit_compile=mode == "xla")
    for g in grads:
        apply([tf.constant(x, tf.float32) for x in g])

    expected = [w.copy() for w in start]
    m = [np.zeros_like(w) for w in start]
    v = [np.zeros_like(w) for w in start]
    for t, g in enumerate(grads, start=1):
        rate = 1e-2 * (10 - t) / 10
        for i, decays in enumerate((True, False)):  # no weight decay on biases
            if decays:
                expected[i] -= rate * 0.01 * expected[i]
            m[i] = 0.9 * m[i] + 0.1 * g[i]
            v[i] = 0.999 * v[i] + 0.001 * g[i] ** 2
            m_hat, v_hat = m[i] / (1 - 0.9 ** t), v[i] / (1 - 0.999 ** t)
            expected[i] -= rate * m_hat / (np.sqrt(v_hat) + 1e-6 / np.sqrt(1 - 0.999 ** t))
    for weight, want in zip(weights, expected):
        np.testing.assert_allclose(weight.numpy(), want, atol=2e-6)


def test_bert_adamw_decays_kernels_and_embeddings_but_no_layernorm_or_bias():
    """One update with zero gradients at weight decay 0.1: Adam's own step is 0, so a decayed
    weight becomes (1 - rate * 0.1) of itself and any other stays as it was."""
    import tensorflow as tf

    from nlp_tutorials.training.optimization import WarmupLinearDecay, bert_adamw

    import keras

    model = tiny_model("bert")
    # Weights made outside any model: their TensorFlow names hold no layer's scope ("gamma:0").
    loose = [keras.Variable(np.full(3, 2.0, np.float32), name=name)
             for name in ("gamma", "beta", "bias", "kernel", "embeddings")]
    weights = model.trainable_weights + loose
    before = {id(w): w.numpy() for w in weights}
    schedule = WarmupLinearDecay(1.0, 1, 1000)
    optimizer = bert_adamw(schedule, weight_decay=0.1)
    optimizer.apply_gradients([(tf.zeros_like(w), w) for w in weights])
    decayed = 1.0 - float(schedule(0)) * 0.1  # the first update's rate: 1
    assert decayed == pytest.approx(0.9)
    kept = {w.path.rsplit("/", 1)[-1] for w in model.trainable_weights} - {"kernel", "embeddings"}
    assert kept == {"gamma", "beta", "bias"}  # every other weight of the model is one of these
    for weight in weights:
        factor = 1.0 if weight.path.rsplit("/", 1)[-1] in kept else decayed
        np.testing.assert_allclose(weight.numpy(), factor * before[id(weight)], rtol=1e-6,
                                   err_msg=weight.path)


def test_fused_adamw_leaves_amsgrad_to_keras():
    import keras

    from nlp_tutorials.speed.kernels import AdamW

    rng = np.random.default_rng(1)
    start, grads = rng.normal(size=(4, 3)), [rng.normal(size=(4, 3)) for _ in range(3)]
    finals = []
    for optimizer_class in (keras.optimizers.AdamW, AdamW):
        weight = keras.Variable(start.astype("float32"))
        # beta_2 0.5: the second moment falls often, where AMSGrad keeps its maximum
        optimizer = optimizer_class(learning_rate=0.1, beta_2=0.5, amsgrad=True)
        for g in grads:
            optimizer.apply_gradients([(g.astype("float32"), weight)])
        finals.append(weight.numpy())
    np.testing.assert_allclose(finals[1], finals[0], atol=1e-7)
    assert np.abs(finals[1] - start).max() > 0.1


@pytest.mark.slow
def test_bert_train_reads_each_mrpc_split_once(tmp_path, monkeypatch):
    """Pre-training, its test-split evaluation and the attention export share what was read."""
    from nlp_tutorials.cli import main
    from nlp_tutorials.system import files

    reads = []
    open_regular = files.open_regular  # how every data file is opened

    def counting(path):
        if Path(path).name.startswith("msr_paraphrase_"):
            reads.append(Path(path).name)
        return open_regular(path)

    monkeypatch.setattr(files, "open_regular", counting)
    monkeypatch.chdir(tmp_path)  # the attention pickle and pictures go under ./visual
    assert main("bert", ["train", "--steps", "2", "--dim", "16", "--layers", "1", "--heads", "2",
                         "--batch-size", "8", "--max-len", "32",
                         "--model-dir", str(tmp_path / "model")]) == 0
    assert sorted(reads) == ["msr_paraphrase_test.txt", "msr_paraphrase_train.txt"]
    assert (tmp_path / "visual" / "tmp" / "bert_attention_matrix.pkl").is_file()
