"""tf.distribute and mixed precision: same step on 1 or 2 replicas, multi-worker, bad input.

Checks that need two logical CPU devices run in tests/two_replicas.py, in processes of their
own (logical devices must be made before TensorFlow starts), each once per test run; the
multi-worker test starts two command-line workers on localhost ports.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.training.distribute import parse_tf_config
from nlp_tutorials.system.errors import UserError
from support import run_local_workers

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--dim", "32", "--layers", "1", "--heads", "2", "--max-len", "32", "--batch-size", "8"]


def environment(**extra):
    """This interpreter's environment with the worktree first on the path (for subprocesses)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def two_replica_figures(shared_folders, *scenarios) -> dict:
    """The figures tests/two_replicas.py prints for ``scenarios``, run once per test run."""
    def build(folder):
        folder.mkdir()
        result = subprocess.run([sys.executable, str(ROOT / "tests" / "two_replicas.py"),
                                 str(folder), *scenarios], capture_output=True, text=True,
                                timeout=300, env=environment(), cwd=ROOT)
        assert result.returncode == 0, result.stderr[-3000:]
        (folder / "figures.json").write_text(result.stdout.strip().splitlines()[-1])

    folder = shared_folders.folder("two_replicas_" + "_".join(scenarios), build)
    return json.loads((folder / "figures.json").read_text())


@pytest.fixture(scope="module")
def two_replica_steps(shared_folders) -> dict:
    return two_replica_figures(shared_folders, "one_step", "keras_evaluate")


@pytest.fixture(scope="module")
def two_replica_resume(shared_folders) -> dict:
    return two_replica_figures(shared_folders, "resume")


@pytest.mark.slow
def test_one_mirrored_step_equals_one_single_device_step(two_replica_steps):
    figures = two_replica_steps["one_step"]
    assert figures["replicas"] == 2
    assert figures["jit_error"] == ("--jit compiles the step for one device; with 2 replicas "
                                    "drop --jit, or use --strategy default")
    for name in ("bert_sgd", "gpt_sgd", "bert_adamw"):
        run = figures[name]
        assert run["single_loss"] == pytest.approx(run["mirrored_loss"], abs=1e-5), name
        assert run["metric_gap"] < 1e-5, name
        assert run["weight_gap"] < 1e-5, name
        assert run["replica_copies_agree"], name
        # The comparison has teeth: the step moved the weights far more than the tolerance...
        assert run["largest_update"] > 1e-3, name
        # ...and averaging per-replica means (the halves mask different numbers of tokens)
        # would have given another loss.
        assert abs(run["mean_of_replica_means"] - run["single_loss"]) > 1e-3, name


@pytest.mark.slow
def test_keras_evaluate_under_two_replicas_reports_the_global_batchs_metrics(
        two_replica_steps):
    figures = two_replica_steps["keras_evaluate"]
    assert figures["mirrored"].keys() == figures["single"].keys()
    for name, value in figures["single"].items():
        assert figures["mirrored"][name] == pytest.approx(value, abs=1e-5), name


@pytest.mark.slow
def test_checkpoints_resume_across_strategies(two_replica_resume):
    """6 steps on one device; its step-2 checkpoint resumed under mirrored; that run's step-4
    checkpoint resumed on one device: all three end at the same weights (no dropout), and the
    resumed runs began at steps 2 and 4 (seeded, a run that ignored its checkpoint and started
    over would end at the same weights too)."""
    figures = two_replica_resume["resume"]
    assert figures["steps"] == [6, 6, 6]
    assert figures["started_at"] == [0, 2, 4]
    assert figures["mirrored_resume_vs_single"] < 1e-5
    assert figures["single_resume_vs_single"] < 1e-5




@pytest.mark.slow
def test_two_workers_train_and_agree(tmp_path):
    from nlp_tutorials.training.checkpoints import latest_checkpoint

    model_dir = tmp_path / "bert"  # shared, as on a shared file system
    # Batches of 32 only to shorten the test-split evaluation each worker ends with.
    results = run_local_workers(
        ["-m", "nlp_tutorials.bert", "train", *TINY[:-2], "--batch-size", "32", "--steps", "4",
         "--strategy", "multiworker", "--model-dir", str(model_dir), "--no-plots"])
    for returncode, out, err in results:
        assert returncode == 0, err[-3000:]
        assert "2 replica(s)" in out and "test masked-token accuracy" in out, out
    import tensorflow as tf

    chief = tf.train.load_checkpoint(latest_checkpoint(model_dir))
    other = tf.train.load_checkpoint(latest_checkpoint(model_dir / "workers" / "worker-1"))
    names = [n for n in chief.get_variable_to_shape_map() if n.startswith("model/")]
    assert len(names) > 10 and chief.get_tensor("iterations/.ATTRIBUTES/VARIABLE_VALUE") == 4
    for name in names:
        np.testing.assert_allclose(chief.get_tensor(name), other.get_tensor(name), atol=1e-6,
                                   err_msg=name)


@pytest.fixture
def precision():
    """Sets Keras' global policy for a test and puts float32 back afterwards."""
    from nlp_tutorials.training.distribute import set_precision

    yield set_precision
    set_precision("float32")


def train_steps(steps: int = 12):
    """A tiny BERT overfitting one fixed batch: (model, losses per step, padded-key probs)."""
    import keras
    import tensorflow as tf

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.config import ModelConfig
    from nlp_tutorials.training.optimization import make_optimizer

    keras.utils.set_random_seed(3)
    model = BERT(ModelConfig(vocab_size=40, hidden_size=32, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=64,
                             max_position_embeddings=16))
    model.compile(optimizer=make_optimizer(1e-2, 100, warmup_fraction=0.0))
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 40, (8, 12)).astype("int32")
    ids[:, 9:] = 0  # [PAD]
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
             "mlm_positions": rng.integers(1, 9, (8, 3)).astype("int32"),
             "mlm_ids": rng.integers(5, 40, (8, 3)).astype("int32"),
             "mlm_weights": np.ones((8, 3), "float32"),
             "nsp_labels": rng.integers(0, 2, 8).astype("int32")}
    batch = {k: tf.constant(v) for k, v in batch.items()}
    step = model.compiled_step(batch)
    losses = [float(step(batch)["loss"]) for _ in range(steps)]
    probs = model(batch, training=False)["attentions"]["encoder"][0]  # [batch, heads, step, step]
    return model, losses, tf.cast(probs, tf.float32).numpy()[..., 9:]


@pytest.mark.slow
def test_mixed_precision_learns_as_float32_does(precision):
    import keras

    drops = {}
    for name in ("float32", "mixed_float16", "mixed_bfloat16"):
        precision(name)
        model, losses, padded = train_steps()
        assert np.isfinite(losses).all(), (name, losses)
        assert (padded == 0).all(), name  # padded keys get exactly no attention
        drops[name] = losses[0] - np.mean(losses[-3:])
        if name != "float32":
            assert model.compute_dtype == name.removeprefix("mixed_")
        assert (isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
                == (name == "mixed_float16")), name
    assert drops["float32"] > 0.5, drops
    for name in ("mixed_float16", "mixed_bfloat16"):
        assert drops[name] > 0.8 * drops["float32"], drops


def test_first_adamw_step_moves_no_weight_more_than_the_rate():
    """Adam's first step is lr x sign(gradient). Embedding gradients repeat a row once per use
    (the segment ids of every sequence); squared row by row (as Keras' Adam does with sparse
    gradients) the segment embedding moved 2.3 x the rate."""
    import keras
    import tensorflow as tf

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.config import ModelConfig
    from nlp_tutorials.training.optimization import make_optimizer

    keras.utils.set_random_seed(1)
    model = BERT(ModelConfig(vocab_size=40, hidden_size=16, num_hidden_layers=1,
                             num_attention_heads=2, intermediate_size=32,
                             max_position_embeddings=16))
    model.compile(optimizer=make_optimizer(1e-3, 10, weight_decay=0.0))
    ids = np.random.default_rng(0).integers(5, 40, (4, 10)).astype("int32")
    before = [w.numpy() for w in model.weights]
    model.step({"input_ids": tf.constant(ids), "token_type_ids": tf.constant(ids % 2),
                "mlm_positions": tf.constant([[1, 2]] * 4), "mlm_ids": tf.constant([[6, 7]] * 4),
                "mlm_weights": tf.ones([4, 2]), "nsp_labels": tf.constant([0, 1, 0, 1])})
    moved = {w.path.removeprefix(f"{model.name}/"): float(np.abs(w.numpy() - b).max())
             for w, b in zip(model.weights, before)}
    assert max(moved.values()) <= 1e-3 * 1.001, moved
    assert moved["embeddings/segments/embeddings"] > 0.9e-3, moved


def test_tf_config_is_checked():
    good = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    assert parse_tf_config(json.dumps(good)) == good
    for text, expected in [
        ("", "--strategy multiworker needs the TF_CONFIG environment variable"),
        ('{"cluster": ', "TF_CONFIG:1: not valid JSON (Expecting value at column 13)"),
        ('{"cluster": {"worker": ["a:1"]}}', 'TF_CONFIG needs a "cluster" object and a "task"'),
        ('{"cluster": {"worker": "a:1"}, "task": {"type": "worker", "index": 0}}',
         "TF_CONFIG cluster 'worker': expected a list of \"host:port\" addresses"),
        ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
         'TF_CONFIG task type "chief": expected one of the cluster\'s roles (worker)'),
        ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 2}}',
         "TF_CONFIG task index 2: expected 0 to 1"),
    ]:
        with pytest.raises(UserError) as error:
            parse_tf_config(text)
        assert expected in str(error.value), (text, str(error.value))
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("argv, tf_config, expected", [
    (["train", "--cpu-replicas", "2"], None,
     "--cpu-replicas 2: only --strategy mirrored runs on logical CPU devices (got --strategy "
     "default)"),
    (["finetune", "--strategy", "tpu", "--cpu-replicas", "2"], None,
     "--cpu-replicas 2: only --strategy mirrored runs on logical CPU devices (got --strategy "
     "tpu)"),
    (["train", "--cpu-replicas", "0", "--strategy", "mirrored"], None,
     "--cpu-replicas: expected a positive integer, got 0"),
    (["train", "--strategy", "multiworker"], None, "needs the TF_CONFIG environment variable"),
    (["finetune", "--strategy", "multiworker"], '{"cluster": [',
     "TF_CONFIG:1: not valid JSON"),
    (["train", "--precision", "float8"], None, "invalid choice: 'float8'"),
])
def test_bad_distribute_flags_fail_in_one_line_without_tensorflow(argv, tf_config, expected):
    code = ("import sys\nfrom nlp_tutorials.cli import main\n"
            f"try:\n    status = main('bert', {argv!r})\nexcept SystemExit as exit:\n"
            "    status = exit.code\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
            "sys.exit(status)\n")
    env = environment()
    env.pop("TF_CONFIG", None)
    if tf_config is not None:
        env["TF_CONFIG"] = tf_config
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, env=env, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


@pytest.mark.slow
def test_batch_not_divisible_by_replicas_fails_in_one_line(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "nlp_tutorials.bert", "train", *TINY[:-2], "--batch-size", "7",
         "--steps", "2", "--strategy", "mirrored", "--cpu-replicas", "2", "--model-dir",
         str(tmp_path / "bert"), "--no-plots"],
        capture_output=True, text=True, timeout=180, env=environment(), cwd=ROOT)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = [line for line in result.stderr.strip().splitlines()
             if not line.startswith(("WARNING", "I0000", "E0000"))]
    assert lines == ["python -m nlp_tutorials.bert train: error: --batch-size 7 is not "
                     "divisible by the 2 replicas; the global batch is split evenly across "
                     "them, so use a multiple of 2"], result.stderr


def test_no_tpu_is_one_line(monkeypatch):
    from nlp_tutorials.training.distribute import make_strategy

    monkeypatch.delenv("TPU_NAME", raising=False)
    with pytest.raises(UserError, match="--strategy tpu: no TPU found"):
        make_strategy("tpu")


def test_only_the_chief_writes_into_the_model_dir(monkeypatch):
    from nlp_tutorials.training.distribute import is_chief, worker_dir

    cluster = {"worker": ["a:1", "b:2"]}
    for task, chief, folder in [({"type": "worker", "index": 0}, True, "run"),
                                ({"type": "worker", "index": 1}, False, "run/workers/worker-1")]:
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": task}))
        assert is_chief("multiworker") is chief
        assert worker_dir("run", "multiworker") == Path(folder)
        assert is_chief("mirrored") and worker_dir("run", "mirrored") == Path("run")
    # With a "chief" task in the cluster, worker 0 is not the chief.
    monkeypatch.setenv("TF_CONFIG", json.dumps(
        {"cluster": {"chief": ["c:0"], **cluster}, "task": {"type": "worker", "index": 0}}))
    assert not is_chief("multiworker")
