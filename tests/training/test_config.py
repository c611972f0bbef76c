"""Run configs from command-line flags: one way for train, finetune and transformer train."""
import dataclasses
import subprocess
import sys

import pytest

from nlp_tutorials.cli import build_parser, build_transformer_parser, train_defaults
from nlp_tutorials.system.settings import FLAG, config_from_args, flag_of
from nlp_tutorials.training.config import DateTrainConfig, FinetuneConfig, TrainConfig
from nlp_tutorials.system.errors import UserError


def test_train_config_takes_the_given_flags_and_names_them():
    args = build_parser("gpt").parse_args(["train", "--steps", "40", "--dim", "64",
                                           "--jit", "--strategy", "mirrored"])
    config, given = config_from_args(TrainConfig, args, **train_defaults("gpt"))
    assert given == {"steps", "dim", "jit", "strategy"}  # what --resume checks
    assert (config.steps, config.dim, config.jit, config.strategy) == (40, 64, True, "mirrored")
    assert config.model_type == "gpt" and config.model_dir == "visual/models/gpt"
    assert config.batch_size == TrainConfig().batch_size  # not given: the class default
    args = build_parser("bert").parse_args(["train", "--model-dir", "elsewhere"])
    config, given = config_from_args(TrainConfig, args, **train_defaults("bert"))
    assert given == {"model_dir"} and config.model_dir == "elsewhere"


def test_finetune_and_date_configs_come_the_same_way():
    args = build_parser("bert").parse_args(["finetune", "--epochs", "5", "--no-swap",
                                            "--pooling", "mean"])
    config, given = config_from_args(FinetuneConfig, args)
    assert given == {"epochs", "swap_augment", "pooling"}
    assert config == FinetuneConfig(epochs=5, swap_augment=False, pooling="mean")
    assert config_from_args(FinetuneConfig, build_parser("bert").parse_args(["finetune"]))[0] \
        == FinetuneConfig()

    args = build_transformer_parser().parse_args(["train", "--steps", "3", "--heads", "2"])
    config, given = config_from_args(DateTrainConfig, args)
    assert given == {"steps", "heads"}
    assert config == DateTrainConfig(steps=3, heads=2)
    assert config.model_config().model_type == "transformer"


def test_messages_spell_each_flag_as_the_command_line_takes_it():
    finetune = build_parser("bert")._subparsers._group_actions[0].choices["finetune"]
    taken = set(finetune._option_string_actions)
    flags = [field.name for field in dataclasses.fields(FinetuneConfig)
             if FLAG in field.metadata and not field.metadata[FLAG].positional]
    assert flags and all(flag_of(FinetuneConfig, name) in taken for name in flags)
    assert flag_of(FinetuneConfig(), "swap_augment") == "--no-swap"  # its own spelling
    assert flag_of(FinetuneConfig, "search_held_out") == "--search-held-out"


@pytest.mark.parametrize("parse, config_class, expected", [
    (lambda: build_parser("bert").parse_args(["train", "--dim", "30", "--heads", "4"]),
     TrainConfig, "--dim 30 is not divisible by --heads 4"),
    (lambda: build_parser("bert").parse_args(["train", "--cpu-replicas", "2"]),
     TrainConfig, "--cpu-replicas 2: only --strategy mirrored"),
    (lambda: build_parser("bert").parse_args(["finetune", "--init-from", "no/such/dir"]),
     FinetuneConfig, "--init-from no/such/dir: no such folder"),
    (lambda: build_transformer_parser().parse_args(["train", "--dim", "30"]),
     DateTrainConfig, "--dim 30 is not divisible by --heads 4"),
])
def test_settings_that_cannot_work_together_are_refused(parse, config_class, expected):
    with pytest.raises(UserError, match=expected):
        config_from_args(config_class, parse())


def test_configs_load_without_tensorflow():
    code = ("import sys\nfrom nlp_tutorials.training.config import DateTrainConfig\n"
            "DateTrainConfig().model_config()\nassert 'tensorflow' not in sys.modules\n")
    subprocess.run([sys.executable, "-c", code], check=True)
