"""``train --resume`` reads the run's train_config.json back: every field is checked as its flag
would check it, and the fields together as the run's config checks them, naming the file."""
import json
import shutil
from pathlib import Path

import pytest

from nlp_tutorials.cli import build_parser, main
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.settings import read_saved_settings
from nlp_tutorials.training.config import TrainConfig

# A run `train` saved (dim 16, 2 layers, 2 heads), with its checkpoints.
SAVED_RUN = Path(__file__).parents[1] / "fixtures" / "legacy_0_1" / "bert_pretrain"


def saved_with(tmp_path, **changes) -> Path:
    """A copy of the saved run whose train_config.json has ``changes``."""
    folder = Path(shutil.copytree(SAVED_RUN, tmp_path / "run"))
    path = folder / "train_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return folder


@pytest.mark.parametrize("changes, expected", [
    ({"steps": "4"}, 'steps is "4"; expected a positive integer'),
    ({"steps": 0}, "steps is 0; expected a positive integer"),
    ({"dim": True}, "dim is true; expected a positive integer"),
    ({"layers": 2.0}, "layers is 2.0; expected a positive integer"),
    ({"learning_rate": float("inf")}, "learning_rate is Infinity; expected a positive number"),
    ({"learning_rate": float("nan")}, "learning_rate is NaN; expected a positive number"),
    ({"learning_rate": -0.1}, "learning_rate is -0.1; expected a positive number"),
    ({"dropout": 1.5}, "dropout is 1.5; expected a probability in [0, 1)"),
    ({"warmup_fraction": 2}, "warmup_fraction is 2; expected a probability in [0, 1)"),
    ({"weight_decay": -0.01}, "weight_decay is -0.01; expected a non-negative number"),
    ({"keep_checkpoints": 0}, "keep_checkpoints is 0; expected a positive integer"),
    ({"seed": -1}, "seed is -1; expected a non-negative integer"),
    ({"whole_word_mask": 1}, "whole_word_mask is 1; expected true or false"),
    ({"nsp_mode": "next"}, 'nsp_mode is "next"; expected one of "random", "paraphrase"'),
    ({"model_type": "transformer"}, 'model_type is "transformer"; expected one of "bert", '
                                    '"gpt"'),
    ({"corpus": None}, "corpus is null; expected text"),
    ({"schedule_extensions": {}}, "schedule_extensions is {}; expected a list of"),
    ({"schedule_extensions": [{"at_step": 2}]}, 'schedule_extensions[0] is {"at_step": 2}; '
                                                'expected {"at_step": step'),
    ({"schedule_extensions": [{"at_step": 2, "from_steps": 4, "to_steps": "6"}]},
     'schedule_extensions[0].to_steps is "6"; expected a positive integer'),
    ({"dim": 15}, "--dim 15 is not divisible by --heads 2"),
])
def test_each_bad_saved_setting_is_named_with_its_file(tmp_path, changes, expected):
    path = saved_with(tmp_path, **changes) / "train_config.json"
    with pytest.raises(UserError) as info:
        read_saved_settings(TrainConfig, path)
    message = str(info.value)
    assert message.startswith(f"{path}: {expected}"), message


def test_a_saved_run_reads_back_with_its_defaults_meaning_not_given(tmp_path):
    path = saved_with(tmp_path) / "train_config.json"
    saved = read_saved_settings(TrainConfig, path)
    assert saved["cpu_replicas"] == 0 and saved["dim"] == 16  # 0: the flag was not given
    # A float setting may be written as an integer, and unknown keys are kept as they are.
    path.write_text(json.dumps({**saved, "learning_rate": 1, "written_by": "a later version"}))
    assert read_saved_settings(TrainConfig, path)["learning_rate"] == 1


def test_resume_with_a_hand_edited_setting_is_one_line(tmp_path, capsys):
    folder = saved_with(tmp_path, dim="16")
    status = main("bert", ["train", "--resume", "--model-dir", str(folder), "--no-plots"])
    error = capsys.readouterr().err
    assert status == 2 and error == (f"python -m nlp_tutorials.bert train: error: "
                                     f"{folder / 'train_config.json'}: dim is \"16\"; expected "
                                     f"a positive integer\n")


def test_infinite_rates_are_refused_on_the_command_line_too(capsys):
    with pytest.raises(SystemExit):
        build_parser("bert").parse_args(["train", "--learning-rate", "inf"])
    assert "--learning-rate: expected a positive number, got inf" in capsys.readouterr().err
