"""Damaged checkpoints: which one a command restores, what it says, what --resume does.

A tiny BERT saves three checkpoints (steps 1, 2, 3, each with weights of its own) with the
project's training_checkpoint and a CheckpointManager, as ``train`` does; each test damages a
copy of that folder (a file cut short, zero-filled or deleted) and checks the choice, the
one-line report and that the restored weights are the intact checkpoint's.
"""
import shutil

import numpy as np
import pytest

from support import tiny_config, weights_by_path

DATA = "ckpt-3.data-00000-of-00001"
# Only the weights' values matter here: 16 wide and one layer keeps the files small.
SIZES = dict(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
             max_position_embeddings=16)


def tiny_model():
    from nlp_tutorials.training.checkpoints import build_model
    from nlp_tutorials.training.optimization import make_optimizer

    model = build_model(tiny_config(**SIZES), seed=0)
    model.compile(optimizer=make_optimizer(1e-3, 10))
    model.optimizer.build(model.trainable_variables)
    return model




@pytest.fixture(scope="module")
def saved_run(tmp_path_factory):
    """A model folder with checkpoints at steps 1, 2 and 3; and each step's weights."""
    import tensorflow as tf

    from nlp_tutorials.training.checkpoints import training_checkpoint
    from nlp_tutorials.text.tokenization import WordTokenizer

    model_dir = tmp_path_factory.mktemp("saved_run")
    model = tiny_model()
    tiny_config(**SIZES).save(model_dir)
    WordTokenizer.build(["the company said shares rose"]).save(model_dir)
    manager = tf.train.CheckpointManager(training_checkpoint(model, model.optimizer),
                                         str(model_dir / "checkpoints"), max_to_keep=3)
    rng = np.random.default_rng(0)
    saved = {}
    for step in (1, 2, 3):
        for weight in model.weights:
            weight.assign(rng.normal(size=weight.shape).astype("float32"))
        model.optimizer.iterations.assign(step)
        manager.save(checkpoint_number=step)
        saved[step] = weights_by_path(model)
    return model_dir, saved


@pytest.fixture
def run_copy(saved_run, tmp_path):
    """A fresh copy of the saved run to damage: (its folder, its checkpoints folder, weights)."""
    model_dir, saved = saved_run
    copy = tmp_path / "run"
    shutil.copytree(model_dir, copy)
    return copy, copy / "checkpoints", saved


def damage(path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif how == "zero-filled":
        path.write_bytes(bytes(len(data)))
    else:
        path.unlink()


def restore_reporting(model_dir):
    """restore_model with its report lines collected: (weights by path, lines)."""
    from nlp_tutorials.training.checkpoints import restore_model

    lines = []
    model, _ = restore_model(model_dir, report=lines.append)
    return weights_by_path(model), lines


def assert_weights_equal(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    for name, value in expected.items():
        np.testing.assert_array_equal(actual[name], value, err_msg=name)


@pytest.mark.parametrize("how, said", [("truncated", "is cut short"),
                                       ("zero-filled", "does not match its checksum"),
                                       ("deleted", "is missing")])
@pytest.mark.parametrize("name", [DATA, "ckpt-3.index"])
def test_a_damaged_newest_checkpoint_gives_way_to_the_previous_one(run_copy, name, how, said):
    model_dir, checkpoints, saved = run_copy
    damage(checkpoints / name, how)
    weights, lines = restore_reporting(model_dir)
    assert_weights_equal(weights, saved[2])
    if name.endswith(".index") and how != "deleted":
        said = "is garbled or cut short"
    if name == DATA and how == "deleted":
        name = "ckpt-3.data-*"  # the shard count is in the index, which only TensorFlow reads
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"checkpoint {checkpoints / 'ckpt-3'} is damaged: {name} {said}")
    assert lines[0].endswith("; using ckpt-2 (step 2), the newest intact one, instead")


@pytest.mark.parametrize("how", ["truncated", "zero-filled", "deleted"])
def test_without_a_readable_index_file_the_checkpoint_files_are_found_by_name(run_copy, how):
    model_dir, checkpoints, saved = run_copy
    damage(checkpoints / "checkpoint", how)
    weights, lines = restore_reporting(model_dir)
    assert_weights_equal(weights, saved[3])
    said = "is missing" if how == "deleted" else "is not a readable checkpoint list"
    assert lines == [f"{checkpoints / 'checkpoint'} {said}; looking for the newest intact "
                     f"checkpoint by file name (ckpt-3, ckpt-2, ckpt-1)"]


def test_a_newer_checkpoint_the_index_does_not_list_yet_is_the_one_restored(run_copy):
    """A run killed between writing ckpt-3 and listing it: the index names ckpt-1 and ckpt-2."""
    import tensorflow as tf

    model_dir, checkpoints, saved = run_copy
    tf.compat.v1.train.update_checkpoint_state(str(checkpoints), "ckpt-2", ["ckpt-1", "ckpt-2"])
    assert "ckpt-3" not in (checkpoints / "checkpoint").read_text()
    weights, lines = restore_reporting(model_dir)
    assert_weights_equal(weights, saved[3])
    assert lines == []


def test_two_damaged_checkpoints_and_a_garbled_index_leave_the_oldest(run_copy):
    model_dir, checkpoints, saved = run_copy
    damage(checkpoints / "checkpoint", "zero-filled")
    damage(checkpoints / DATA, "truncated")
    damage(checkpoints / "ckpt-2.index", "deleted")
    weights, lines = restore_reporting(model_dir)
    assert_weights_equal(weights, saved[1])
    assert len(lines) == 3 and "ckpt-2.index is missing" in lines[2], lines
    assert all(line.endswith("using ckpt-1 (step 1), the newest intact one, instead")
               for line in lines[1:])


def test_no_intact_checkpoint_is_one_line_naming_each(run_copy, capsys):
    from nlp_tutorials.cli import main

    model_dir, checkpoints, _ = run_copy
    damage(checkpoints / "checkpoint", "truncated")
    for step in (1, 2, 3):
        damage(checkpoints / f"ckpt-{step}.data-00000-of-00001", "truncated")
    files = {path.name: path.read_bytes() for path in checkpoints.iterdir()}
    status = main("bert", ["export", "--model-dir", str(model_dir),
                           "--output", str(model_dir / "never.pkl")])
    assert status == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"python -m nlp_tutorials.bert export: error: {checkpoints}: no "
                          f"intact checkpoint (checkpoint is not a readable checkpoint list; "
                          f"ckpt-3: {DATA} is cut short")
    assert "ckpt-1: ckpt-1.data-00000-of-00001 is cut short" in err
    assert not (model_dir / "never.pkl").exists()
    assert {path.name: path.read_bytes() for path in checkpoints.iterdir()} == files


def test_resume_restores_the_intact_checkpoint_and_repairs_the_index(run_copy):
    import tensorflow as tf

    from nlp_tutorials.training.checkpoints import newest_intact_checkpoint
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining import build_training_state

    model_dir, checkpoints, saved = run_copy
    damage(checkpoints / "checkpoint", "zero-filled")
    damage(checkpoints / DATA, "zero-filled")
    lines = []
    prefix, step = newest_intact_checkpoint(model_dir, lines.append)
    assert (prefix, step, len(lines)) == (str(checkpoints / "ckpt-2"), 2, 2)
    config = TrainConfig(model_dir=str(model_dir), learning_rate=1e-3, steps=10)
    model, manager = build_training_state(config, tiny_config(**SIZES),
                                          tf.distribute.get_strategy(), prefix)
    assert int(model.optimizer.iterations.numpy()) == 2
    assert_weights_equal(weights_by_path(model), saved[2])
    # The garbled index was rewritten: the manager goes on from ckpt-2; ckpt-3's files stay.
    assert manager.checkpoints == [str(checkpoints / "ckpt-1"), str(checkpoints / "ckpt-2")]
    assert (checkpoints / DATA).is_file()
