"""The same seed gives the same run: fine-tuning and pre-training repeated in one process give
the same scores and the same weights, bit for bit (docs/finetuning.md#repeatable-runs)."""
import contextlib
import io

import numpy as np
import pytest

from nlp_tutorials.training.config import FinetuneConfig
from shared_folders import TINY_TRAIN_FLAGS
from support import REPOSITORY, weights_by_path

MRPC = REPOSITORY / "data" / "MRPC"


def first_lines(source, count: int, target):
    """Copy the header and the first ``count`` pairs of an MRPC file."""
    with open(source, encoding="utf-8-sig") as lines:
        target.write_text("".join(next(lines) for _ in range(count + 1)), encoding="utf-8")
    return str(target)


@pytest.fixture(scope="module")
def mrpc_slice(tmp_path_factory):
    """(train, test) files: the first 96 MRPC train pairs, the first 32 test pairs."""
    folder = tmp_path_factory.mktemp("mrpc_slice")
    return (first_lines(MRPC / "msr_paraphrase_train.txt", 96, folder / "train.txt"),
            first_lines(MRPC / "msr_paraphrase_test.txt", 32, folder / "test.txt"))


def finetuned(pretrained_bert, mrpc_slice, output_dir, seed: int):
    """(what ``finetune`` returned, the saved head's weights in order) for a 2-epoch run of
    ``seed`` on the slice (dropout on, as the checkpoint has it), 32 pairs held out as dev."""
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.training.finetuning import finetune

    train, test = mrpc_slice
    config = FinetuneConfig(model_dir=str(pretrained_bert / "run"), output_dir=str(output_dir),
                            train=train, test=test, dev_size=32, epochs=2, batch_size=16,
                            learning_rate=1e-3, seed=seed)
    result = finetune(config, printer=lambda line: None)
    return result, [weight.numpy() for weight in load_finetuned(output_dir).head.weights]


@pytest.mark.slow
def test_finetune_twice_with_one_seed_gives_the_same_scores_and_weights(pretrained_bert,
                                                                        mrpc_slice, tmp_path):
    """The backbone restored from the checkpoint makes its dropout layers, whose seeds come
    from Python's generator: with the seed set only after that (as it was), the second run
    dropped other units and its weights differed. A third run with another seed differs, so
    the weights do depend on the seed drawn."""
    first, first_weights = finetuned(pretrained_bert, mrpc_slice, tmp_path / "first", 1)
    second, second_weights = finetuned(pretrained_bert, mrpc_slice, tmp_path / "second", 1)
    assert first["runs"] == second["runs"]
    assert len(first_weights) == len(second_weights) > 10
    assert all(np.array_equal(a, b) for a, b in zip(first_weights, second_weights))
    _, other_weights = finetuned(pretrained_bert, mrpc_slice, tmp_path / "other", 2)
    assert max(np.abs(a - b).max() for a, b in zip(first_weights, other_weights)) > 1e-3


@pytest.mark.slow
def test_bert_train_again_with_its_seed_ends_on_the_same_weights(pretrained_bert, tmp_path):
    """The shared folder's 6-step `bert train` (dropout 0.1, masking and pairs drawn from the
    seed), trained again in this process, ends on its weights bit for bit."""
    from nlp_tutorials.cli import main
    from nlp_tutorials.training import pretraining

    runs, real_pretrain = [], pretraining.pretrain

    def keeping_the_run(*args, **kwargs):
        runs.append(real_pretrain(*args, **kwargs))
        return runs[-1]

    with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()):
        patch.setattr(pretraining, "pretrain", keeping_the_run)
        status = main("bert", ["train", *TINY_TRAIN_FLAGS, "--steps", "6",
                               "--checkpoint-every", "3", "--sample-every", "3", "--no-plots",
                               "--model-dir", str(tmp_path / "again")])
    assert status == 0
    again = weights_by_path(runs[0].model)
    with np.load(pretrained_bert / "weights.npz") as saved:
        assert sorted(saved.files) == sorted(again) and len(again) > 10
        assert all(np.array_equal(saved[path], again[path]) for path in again)


def test_deterministic_flag_turns_on_tensorflows_op_determinism():
    from tensorflow.python.framework import config as tf_config

    from nlp_tutorials.cli import build_parser
    from nlp_tutorials.system.settings import config_from_args
    from nlp_tutorials.training import distribute

    args = build_parser("bert").parse_args(["finetune", "--deterministic"])
    assert config_from_args(FinetuneConfig, args)[0].deterministic
    assert not FinetuneConfig().deterministic
    assert not tf_config.is_op_determinism_enabled()
    distribute.set_op_determinism(False)
    assert not tf_config.is_op_determinism_enabled()
    try:
        distribute.set_op_determinism(True)
        assert tf_config.is_op_determinism_enabled()
    finally:
        tf_config.disable_op_determinism()  # process-wide: leave the next tests as they were
