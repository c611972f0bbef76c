"""The date task, exact match, and the `python -m nlp_tutorials.transformer` commands."""
import datetime
import subprocess
import sys

import pytest

from nlp_tutorials.tasks import dates
from nlp_tutorials.cli import main
from nlp_tutorials.system.errors import UserError
from support import fails_without_tensorflow

TINY = ["--steps", "3", "--dim", "16", "--layers", "1", "--heads", "2", "--batch-size", "8"]


def test_the_held_out_dates_are_never_trained_on():
    train, held_out = dates.split()
    assert len(held_out) == dates.HELD_OUT
    assert len(train) + len(held_out) == (dates.LAST - dates.FIRST).days + 1
    assert not set(train) & set(held_out)
    assert dates.split()[1] == held_out  # the same dates on every run


def test_encoding_round_trips():
    day = datetime.date(1998, 2, 26)
    assert dates.source_text(day) == "98-02-26" and dates.target_text(day) == "26/Feb/1998"
    assert dates.parse_source("98-02-26") == day
    assert dates.parse_source("03-11-29") == datetime.date(2003, 11, 29)
    targets = dates.encode_targets([day])
    assert targets.shape == (1, dates.TARGET_LEN) and dates.encode_sources([day]).shape == (1, 8)
    assert dates.decode_target(targets[0]) == "26/Feb/1998"
    eos, pad, one = dates.IDS[dates.EOS], dates.IDS[dates.PAD], dates.IDS["1"]
    assert dates.decode_target([one, pad, one, eos, one]) == "11"  # up to [EOS], padding dropped


@pytest.mark.parametrize("predictions, references, expected", [
    (["26/Feb/1998"], ["26/Feb/1998"], 1.0),
    (["26/Feb/1998", "01/Jan/2001"], ["26/Feb/1998", "01/Jan/2000"], 0.5),  # one digit off
    (["26/feb/1998"], ["26/Feb/1998"], 0.0),  # case matters
    (["26/Feb/199"], ["26/Feb/1998"], 0.0),  # a prefix is not a match
    (["26/Feb/1998 "], ["26/Feb/1998"], 0.0),  # nor is trailing space
    (["a", "b", "c", "d"], ["a", "x", "c", "y"], 0.5),
])
def test_exact_match_by_hand(predictions, references, expected):
    assert dates.exact_match(predictions, references) == expected


def test_exact_match_needs_matching_non_empty_lists():
    for predictions, references in (([], []), (["a"], ["a", "b"])):
        with pytest.raises(ValueError, match="as many predictions as references"):
            dates.exact_match(predictions, references)


@pytest.mark.parametrize("text", ["2003-11-29", "03/11/29", "3-11-29", "03-13-29", "99-02-30",
                                  "", "tomorrow"])
def test_a_malformed_date_is_a_one_line_error(text):
    with pytest.raises(UserError, match="expected a date as YY-MM-DD"):
        dates.parse_source(text)


def train_date_model(folder):
    """``folder/transformer``: a tiny Transformer trained for 3 steps through the command line;
    ``folder/train.txt``: what it printed; ``folder/status``: its exit status."""
    folder.mkdir(parents=True)
    with open(folder / "train.txt", "w") as out:
        saved, sys.stdout = sys.stdout, out
        try:
            status = main("transformer", ["train", *TINY, "--model-dir",
                                          str(folder / "transformer"), "--no-plots"])
        finally:
            sys.stdout = saved
    (folder / "status").write_text(str(status))


@pytest.fixture(scope="module")
def trained(shared_folders):
    """The run's tiny date Transformer (built once for all workers), its command's exit status
    and what the command printed."""
    folder = shared_folders.folder("date_model", train_date_model)
    return (folder / "transformer", int((folder / "status").read_text()),
            (folder / "train.txt").read_text())


def test_train_reports_held_out_exact_match_and_saves(trained):
    model_dir, status, printed = trained
    assert status == 0
    assert "held-out exact match" in printed and "2000 dates never seen" in printed
    assert {"config.json", "model.weights.h5", "train_config.json"} <= {
        p.name for p in model_dir.iterdir()}
    assert not [p for p in model_dir.iterdir() if ".tmp" in p.name]


@pytest.mark.slow
def test_translate_export_and_plot(trained, tmp_path, capsys):
    model_dir = trained[0]
    assert main("transformer", ["translate", "03-11-29", "98-02-26",
                                "--model-dir", str(model_dir)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" -> ")[0] for line in lines] == ["03-11-29", "98-02-26"]
    pickle_path = tmp_path / "att.pkl"
    assert main("transformer", ["export", "--model-dir", str(model_dir), "--n", "3",
                                "--output", str(pickle_path)]) == 0
    from nlp_tutorials.analysis.visual import load_attention_pickle

    data = load_attention_pickle(pickle_path)
    assert data["model"] == "transformer" and len(data["src"][0]) == 8
    assert data["tgt"][0][0] == dates.BOS and len(data["tgt"][0]) == dates.TARGET_LEN - 1
    assert data["attentions"]["encoder_decoder"][0].shape == (3, 2, dates.TARGET_LEN - 1, 8)
    assert main("transformer", ["plot", "--input", str(pickle_path),
                                "--output-dir", str(tmp_path / "png")]) == 0
    names = {p.name for p in (tmp_path / "png").iterdir()}
    assert {"transformer_encoder_decoder_case0.png", "transformer_decoder_case0.png"} <= names


def test_translate_without_a_model_names_the_command_to_run(tmp_path, capsys):
    assert main("transformer", ["translate", "03-11-29", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "run `python -m nlp_tutorials.transformer train" in err


@pytest.mark.parametrize("how", ["cut short", "zero-filled"])
def test_a_damaged_weights_file_is_one_line_and_is_left_as_it_is(trained, tmp_path, capsys, how):
    import shutil

    model_dir = tmp_path / "copy"
    shutil.copytree(trained[0], model_dir)
    weights = model_dir / "model.weights.h5"
    data = weights.read_bytes()
    damaged = data[:len(data) // 2] if how == "cut short" else bytes(len(data))
    weights.write_bytes(damaged)
    assert main("transformer", ["translate", "03-11-29", "--model-dir", str(model_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith(f"python -m nlp_tutorials.transformer translate: error: {weights}: "
                          f"cannot be read whole (Unable to ")
    assert err.strip().endswith(f"train again with `python -m nlp_tutorials.transformer train "
                                f"--model-dir {model_dir}`")
    assert weights.read_bytes() == damaged


def test_bad_date_fails_in_one_line_before_tensorflow():
    line = fails_without_tensorflow("translate", "03-11-29", "2003-11-29", model="transformer")
    assert line == (
        "python -m nlp_tutorials.transformer translate: error: '2003-11-29': expected a date "
        "as YY-MM-DD, e.g. 98-02-26 (years 50-99 are 1950-1999, 00-49 are 2000-2049)")


def test_module_hands_over_to_the_cli():
    result = subprocess.run([sys.executable, "-m", "nlp_tutorials.transformer", "train",
                             "--dim", "30"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.strip().endswith("--dim 30 is not divisible by --heads 4")
