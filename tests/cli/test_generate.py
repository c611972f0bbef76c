"""`python -m nlp_tutorials.gpt generate`: greedy and seeded sampling, and its bad input."""
import pytest

from nlp_tutorials.cli import main
from nlp_tutorials.training.config import TrainConfig


def pretrain_gpt(folder):
    """``folder/gpt``: a tiny GPT pre-trained for 4 steps, showing a continuation every 2;
    ``folder/printed.txt``: what the run printed."""
    from nlp_tutorials.training.pretraining import pretrain

    config = TrainConfig(model_type="gpt", model_dir=str(folder / "gpt"), dim=32, layers=1,
                         heads=2, max_len=32, batch_size=64, steps=4, checkpoint_every=4,
                         log_every=2, sample_every=2)
    printed = []
    pretrain(config, printer=printed.append)
    (folder / "printed.txt").write_text("\n".join(printed), encoding="utf-8")


@pytest.fixture(scope="module")
def trained(shared_folders):
    """The run's tiny pre-trained GPT (built once for all workers), and what its run printed."""
    folder = shared_folders.folder("pretrained_gpt", pretrain_gpt)
    return folder / "gpt", (folder / "printed.txt").read_text(encoding="utf-8")


def generate(capsys, model_dir, *flags):
    status = main("gpt", ["generate", "--model-dir", str(model_dir), *flags])
    captured = capsys.readouterr()
    return status, captured.out.strip(), captured.err.strip()


@pytest.mark.slow
def test_train_ends_with_test_perplexity(trained):
    assert "perplexity" in trained[1].splitlines()[-1]


@pytest.mark.slow
def test_train_shows_a_continuation_every_sample_every_steps(trained):
    lines = trained[1].splitlines()
    prompts = [i for i, line in enumerate(lines) if line.startswith("  prompt:    ")]
    assert len(prompts) == 2  # after steps 2 and 4
    assert all(lines[i + 1].startswith("  continued: ") for i in prompts)


@pytest.mark.slow
def test_greedy_continues_the_prompt(trained, capsys):
    status, out, _ = generate(capsys, trained[0], "--prompt", "The company said",
                              "--max-new-tokens", "5")
    assert status == 0
    words = out.split()
    assert words[:3] == ["the", "company", "said"] and 3 < len(words) <= 8


@pytest.mark.slow
def test_generation_stops_where_the_positions_end(trained, capsys):
    # 31 words + [CLS] fill all 32 positions: the last one's logits still choose one token.
    status, out, _ = generate(capsys, trained[0], "--prompt", "the " * 31,
                              "--max-new-tokens", "5")
    assert status == 0 and len(out.split()) in (31, 32)  # 31 if that token is [SEP]


@pytest.mark.slow
def test_sampling_is_seeded(trained, capsys):
    flags = ["--prompt", "the company said", "--sample", "--top-k", "50", "--temperature",
             "1.5", "--max-new-tokens", "8"]
    runs = [generate(capsys, trained[0], *flags, "--seed", seed)[1] for seed in "112"]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]  # 8 draws from 50 tokens at a high temperature


@pytest.mark.parametrize("flags, expected", [
    (["--prompt", "xyzzy qwertz"], "none of its words is in the model's"),
    (["--prompt", "the " * 32], "--prompt has 32 tokens; this model reads at most 31"),
])
@pytest.mark.slow
def test_prompts_the_model_cannot_read_are_one_line_errors(trained, capsys, flags, expected):
    status, _, err = generate(capsys, trained[0], *flags)
    assert status == 2 and len(err.splitlines()) == 1
    assert err.startswith("python -m nlp_tutorials.gpt generate: error: ") and expected in err


@pytest.mark.parametrize("flags, expected", [
    (["--prompt", ""], "--prompt is empty"),
    (["--prompt", "the", "--max-new-tokens", "0"], "expected a positive integer, got 0"),
    (["--prompt", "the", "--temperature", "0.5"], "--temperature needs --sample"),
])
def test_bad_flags_are_one_line_errors(tmp_path, capsys, flags, expected):
    try:
        status, _, err = generate(capsys, tmp_path, *flags)
    except SystemExit as exit:  # argparse's own checks
        status, err = exit.code, capsys.readouterr().err.strip()
    assert status == 2 and len(err.splitlines()) == 1 and expected in err


def test_no_model_names_the_command_to_run(tmp_path, capsys):
    status, _, err = generate(capsys, tmp_path, "--prompt", "the company said")
    assert status == 2
    assert "run `python -m nlp_tutorials.gpt train" in err and len(err.splitlines()) == 1
