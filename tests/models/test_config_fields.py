"""A model's config.json is checked field by field when it is read: type, range, finiteness.

Each bad value is written into a copy of the tiny HuggingFace config (tests/fixtures); the
error must be one line naming the file, the field, what it holds and what was expected.
"""
import json
import shutil
from pathlib import Path

import pytest

from nlp_tutorials.cli import main
from nlp_tutorials.models.config import BertConfig, ModelConfig
from nlp_tutorials.system.errors import UserError

TINY_HF = Path(__file__).parents[1] / "fixtures" / "bert_tiny_hf"  # vocab 100, 4 heads of 8


def folder_with(tmp_path, **changes) -> Path:
    """A copy of the tiny HuggingFace folder whose config.json has ``changes``."""
    folder = Path(shutil.copytree(TINY_HF, tmp_path / "bert"))
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))
    return folder


def refusal(call, *args) -> str:
    with pytest.raises(UserError) as info:
        call(*args)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("field, value, expected", [
    ("hidden_dropout_prob", 1.5, "hidden_dropout_prob is 1.5; expected a finite number in "
                                 "[0, 1)"),
    ("attention_probs_dropout_prob", -0.1, "attention_probs_dropout_prob is -0.1; expected a "
                                           "finite number in [0, 1)"),
    ("hidden_dropout_prob", float("nan"), "hidden_dropout_prob is NaN; expected a finite"),
    ("hidden_dropout_prob", "0.1", 'hidden_dropout_prob is "0.1"; expected a finite number'),
    ("hidden_size", "32", 'hidden_size is "32"; expected an integer from 1 to 16384'),
    ("num_hidden_layers", True, "num_hidden_layers is true; expected an integer from 1 to"),
    ("num_attention_heads", 4.0, "num_attention_heads is 4.0; expected an integer from 1"),
    ("vocab_size", 0, "vocab_size is 0; expected an integer from 1 to 1000000"),
    ("max_position_embeddings", None, "max_position_embeddings is null; expected an integer"),
    ("intermediate_size", float("inf"), "intermediate_size is Infinity; expected an integer"),
    ("type_vocab_size", -2, "type_vocab_size is -2; expected an integer from 1 to 1024"),
    # Sizes no BERT has are refused before any memory is taken for them.
    ("num_hidden_layers", 100_000_000, "num_hidden_layers is 100000000; expected an integer "
                                       "from 1 to 512"),
    ("max_position_embeddings", 10**9, "max_position_embeddings is 1000000000; expected an "
                                       "integer from 1 to 65536"),
    ("layer_norm_eps", float("inf"), "layer_norm_eps is Infinity; expected a finite number > 0"),
    ("layer_norm_eps", 0, "layer_norm_eps is 0; expected a finite number > 0"),
    ("initializer_range", -0.02, "initializer_range is -0.02; expected a finite number > 0"),
    ("pad_token_id", 100, "pad_token_id is 100; expected an integer from 0 to 99"),
    ("pad_token_id", False, "pad_token_id is false; expected an integer from 0 to 99"),
    ("chunk_size_feed_forward", -1, "chunk_size_feed_forward is -1; expected a non-negative"),
    ("hidden_size", 30, "hidden_size 30 is not divisible by num_attention_heads 4"),
    ("pruned_heads", {"0": [1.0]}, 'pruned_heads "0": [1.0]: expected a layer number and a '
                                   'list of head numbers'),
    ("pruned_heads", {"0": [True]}, "expected a layer number and a list of head numbers"),
    ("pruned_heads", {"5": [0]}, "pruned_heads: layer 5 does not exist; expected 0 to 1"),
    ("pruned_heads", {"9" * 5000: [0]}, 'pruned_heads "99999999999999999999999999999999999999'),
    ("model_type", "gpt", "model_type is 'gpt'; expected 'bert'"),
])
def test_each_bad_field_is_named_with_its_file(tmp_path, field, value, expected):
    folder = folder_with(tmp_path, **{field: value})
    message = refusal(BertConfig.from_json_file, folder / "config.json")
    assert message.startswith(f"{folder / 'config.json'}: ") and expected in message, message


def test_sizes_that_make_too_many_weights_are_refused_before_any_are_made():
    # By hand: tables (30,522 + 512 + 2) x 16,384 = 508,493,824; a layer 4 x 16,384^2 +
    # 2 x 16,384 x 65,536 = 3,221,225,472, x 12 = 38,654,705,664; 39,163,199,488 in all.
    with pytest.raises(UserError, match=r"^config: its sizes make about 39,163,199,488 weights; "
                                         r"expected at most 2,000,000,000 \(8 GB in float32\)$"):
        BertConfig(vocab_size=30522, hidden_size=16384, num_hidden_layers=12,
                   num_attention_heads=16, intermediate_size=65536)


def test_a_good_config_still_reads(tmp_path):
    config = BertConfig.load(folder_with(tmp_path, pruned_heads={"1": [3, 0]}))
    assert config.pruned_heads == {1: [0, 3]} and config.hidden_dropout_prob == 0.1
    # Integers stand for floats: a dropout written as 0 is a rate of 0.
    no_dropout = BertConfig.load(folder_with(tmp_path / "b", hidden_dropout_prob=0))
    assert no_dropout.hidden_dropout_prob == 0


def test_configs_made_in_python_are_checked_the_same_way():
    assert "config: hidden_dropout_prob is 1.5;" in refusal(
        lambda: ModelConfig(hidden_dropout_prob=1.5))
    assert "config: num_hidden_layers is true;" in refusal(
        lambda: ModelConfig(num_hidden_layers=True))


def test_a_gpt_folder_config_names_its_file(tmp_path):
    path = tmp_path / "config.json"
    values = ModelConfig(model_type="gpt", vocab_size=50, hidden_size=16, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=32).to_dict()
    path.write_text(json.dumps({**values, "attention_probs_dropout_prob": 1.0}))
    assert refusal(ModelConfig.load, tmp_path) == (
        f"{path}: attention_probs_dropout_prob is 1.0; expected a finite number in [0, 1)")


def test_train_init_from_a_config_with_a_bad_dropout_is_one_line(tmp_path, capsys):
    folder = folder_with(tmp_path, hidden_dropout_prob=1.5)
    status = main("bert", ["train", "--init-from", str(folder), "--model-dir",
                           str(tmp_path / "run"), "--steps", "1", "--no-plots"])
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1, error
    assert (f"error: {folder / 'config.json'}: hidden_dropout_prob is 1.5; expected a finite "
            f"number in [0, 1)") in error
