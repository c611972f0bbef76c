"""Continued pre-training: ``bert train --init-from`` from the tiny HuggingFace and Google
checkpoints, its heads-only warm-up, the flags it refuses, and the folder finetune reads back.

The fixtures' vocabulary (w5 ... w99) knows no MRPC word, so every token would be [UNK] and
never masked; the copies made here replace it with the most frequent MRPC train words, which
keeps the weights (100 rows) and gives the masked-LM head something to learn.
"""
import collections
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.system.errors import UserError
from support import checkpoint_weights, run_main, weights_by_path

FIXTURES = Path(__file__).parents[1] / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def mrpc_vocab(size: int) -> list[str]:
    """The special tokens and the most frequent lower-cased MRPC train words, ``size`` in all."""
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.text.tokenization import WordPieceTokenizer

    basic = WordPieceTokenizer(SPECIALS + ["the"])
    counts = collections.Counter(word for pair in load_mrpc("train")
                                 for text in (pair.text, pair.pair)
                                 for word in basic.basic_tokenize(text))
    return SPECIALS + [word for word, _ in counts.most_common(size - len(SPECIALS))]


def checkpoint_copy(source: Path, target: Path, keep_heads: bool = True) -> Path:
    """``source`` copied to ``target`` with an MRPC vocabulary; without ``keep_heads`` its
    safetensors lose the cls.* tensors, as a sentence encoder's have none."""
    shutil.copytree(source, target)
    (target / "vocab.txt").write_text("\n".join(mrpc_vocab(100)) + "\n")
    if not keep_heads:
        tensors = load_file(target / "model.safetensors")
        save_file({k: v for k, v in tensors.items() if not k.startswith("cls.")},
                  target / "model.safetensors", metadata={"format": "pt"})
    return target


def stored_tensors(folder: Path) -> dict:
    """The checkpoint's tensors read directly: safetensors with numpy, Google's with TF."""
    if (folder / "model.safetensors").is_file():
        return load_file(folder / "model.safetensors")
    reader = tf.train.load_checkpoint(str(folder / "bert_model.ckpt"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def matching_tensor(value: np.ndarray, tensors: dict) -> str | None:
    """The name of a stored tensor equal to ``value`` or to its transpose, or None."""
    for name, stored in tensors.items():
        for candidate in (stored, stored.T):
            if candidate.shape == value.shape and np.array_equal(candidate, value):
                return name
    return None




def is_head(path: str) -> bool:
    return path.startswith(("lm_head/", "nsp_head/"))


def run_config(model_dir, init_from, **overrides) -> TrainConfig:
    values = dict(model_dir=str(model_dir), init_from=str(init_from), steps=4, batch_size=8,
                  max_len=32, checkpoint_every=2, sample_every=100, log_every=100)
    values.update(overrides)
    return TrainConfig(**values)


def initial_weights(config: TrainConfig, given=frozenset()) -> tuple:
    """(settled config, the model's weights as training receives them, before step 1)."""
    from nlp_tutorials.training.pretraining import build_training_state, settle_run

    config, _, model_config, _ = settle_run(config, set(given), resume=False)
    model, _ = build_training_state(config, model_config, tf.distribute.get_strategy())
    return config, weights_by_path(model)


@pytest.fixture(scope="module")
def headless(tmp_path_factory) -> Path:
    return checkpoint_copy(FIXTURES / "bert_tiny_hf", tmp_path_factory.mktemp("c") / "headless",
                           keep_heads=False)


@pytest.mark.parametrize("source", ["bert_tiny_hf",
                                    pytest.param("bert_tiny_google", marks=pytest.mark.slow)])
def test_training_starts_from_the_checkpoint_weights(source, tmp_path):
    folder = checkpoint_copy(FIXTURES / source, tmp_path / "ckpt")
    tensors = stored_tensors(folder)
    config, weights = initial_weights(run_config(tmp_path / "run", folder))
    unmatched = [path for path, value in weights.items() if matching_tensor(value, tensors) is None]
    assert not unmatched and len(weights) == 2 * 16 + 5 + 2 + 7
    # The run records the checkpoint's model, not the flags' defaults (256 wide, 4 layers).
    assert (config.dim, config.layers, config.heads, config.vocab_size) == (32, 2, 4, 100)
    assert config.tokenizer == "wordpiece" and config.head_warmup_steps == 0


def test_missing_heads_are_fresh_and_get_a_warm_up_by_default(headless, tmp_path):
    tensors = stored_tensors(headless)
    config, weights = initial_weights(run_config(tmp_path / "run", headless, steps=30))
    for path, value in weights.items():
        if not is_head(path):
            assert matching_tensor(value, tensors), f"{path} is not the checkpoint's"
        elif path.endswith("kernel"):  # fresh biases (zeros) and LayerNorms could match by chance
            assert matching_tensor(value, tensors) is None, f"{path} is not fresh"
    assert config.head_warmup_steps == 3  # the learning-rate warm-up: 10% of 30 steps


@pytest.fixture(scope="module")
def warmed_up(headless, tmp_path_factory):
    """A 4-step run from ``headless`` whose first 2 steps train the heads alone."""
    from nlp_tutorials.training.pretraining import pretrain

    model_dir = tmp_path_factory.mktemp("run")
    printed = []
    run = pretrain(run_config(model_dir, headless, head_warmup_steps=2),
                   given={"head_warmup_steps"}, printer=printed.append)
    return model_dir, run, "\n".join(printed)




@pytest.mark.slow
def test_warm_up_moves_the_heads_and_leaves_the_encoder(headless, warmed_up):
    model_dir, run, printed = warmed_up
    tensors = stored_tensors(headless)
    from nlp_tutorials.training.continued import initial_model

    after_warm_up = checkpoint_weights(model_dir / "checkpoints" / "ckpt-2")
    fresh = initial_model(headless, run.config.seed, printer=lambda _: None)  # heads drawn again
    initial = weights_by_path(fresh)
    final = weights_by_path(run.model)
    assert after_warm_up.keys() == final.keys()
    for path, value in after_warm_up.items():
        if is_head(path):
            assert not np.array_equal(value, initial[path]), f"{path} did not train"
        else:
            assert matching_tensor(value, tensors), f"{path} moved during the warm-up"
            assert not np.array_equal(final[path], value), f"{path} did not train after it"
    assert "steps 1-2: the pre-training heads alone (encoder frozen)" in printed
    # The frozen weights are trainable again once the warm-up is over.
    assert len(run.model.trainable_variables) == len(fresh.trainable_variables) > 40


@pytest.mark.slow
def test_finetune_starts_from_the_continued_weights(warmed_up):
    from nlp_tutorials.training.config import FinetuneConfig
    from nlp_tutorials.training.finetuning import backbone_and_tokenizer

    model_dir, run, printed = warmed_up
    folder = model_dir / "pretrained"
    assert f"wrote {folder}" in printed
    backbone, tokenizer = backbone_and_tokenizer(FinetuneConfig(init_from=str(folder)))
    loaded, trained = weights_by_path(backbone), weights_by_path(run.model)
    assert loaded.keys() == trained.keys()
    for path, value in trained.items():
        np.testing.assert_array_equal(loaded[path], value, err_msg=path)
    assert tokenizer.vocab == run.tokenizer.vocab == mrpc_vocab(100)


def test_missing_heads_are_noted_where_they_train_and_not_for_fine_tuning(headless, capsys):
    """Continued pre-training (`bert train --init-from`) trains the heads a checkpoint lacks and
    says so; fine-tuning never uses them and says nothing."""
    from nlp_tutorials.training.config import FinetuneConfig
    from nlp_tutorials.training.continued import initial_model
    from nlp_tutorials.training.finetuning import backbone_and_tokenizer

    notes = []
    initial_model(headless, seed=1, printer=notes.append)
    assert notes == [f"note: {headless} has no pre-training heads (masked-LM, next-sentence); "
                     f"they keep their fresh random initialisation"]
    backbone_and_tokenizer(FinetuneConfig(init_from=str(headless)))
    assert capsys.readouterr().out == ""


@pytest.mark.slow
def test_a_run_of_several_seeds_from_a_checkpoint_without_heads_says_nothing_of_them(
        headless, tmp_path):
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.training.config import FinetuneConfig
    from nlp_tutorials.training.finetuning import finetune

    pairs = load_mrpc("train")[:40]
    for split, rows in (("train", pairs[:32]), ("dev", pairs[32:])):
        lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String",
                 *[f"{p.label}\t{i}\t{i}\t{p.text}\t{p.pair}" for i, p in enumerate(rows)]]
        (tmp_path / f"{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    printed = []
    finetune(FinetuneConfig(init_from=str(headless), data=str(tmp_path),
                            output_dir=str(tmp_path / "out"), epochs=1, batch_size=16,
                            max_len=32, seeds=2, swap_augment=False), printer=printed.append)
    assert any(line.startswith("seed 2 epoch 1") for line in printed)
    assert not any("pre-training heads" in line for line in printed)
    assert any(line.startswith("seed 2 epoch 1") for line in printed)


def test_phases_of_a_run_resumed_in_the_warm_up():
    """Phases from a resumed step: the rest of the warm-up first, then everything."""
    from nlp_tutorials.training.continued import training_phases

    assert training_phases(0, 2, 4) == [(1, 2, True), (3, 4, False)]
    assert training_phases(1, 2, 4) == [(2, 2, True), (3, 4, False)]
    assert training_phases(2, 2, 4) == [(3, 4, False)]
    assert training_phases(3, 0, 4) == [(4, 4, False)]
    assert training_phases(4, 2, 4) == []


@pytest.mark.parametrize("overrides, given, message", [
    ({"dim": 64}, {"dim"}, r"drop --dim 64 \(checkpoint: 32\)$"),
    ({"layers": 3, "heads": 8}, {"layers", "heads"},
     r"drop --layers 3 \(checkpoint: 2\); --heads 8 \(checkpoint: 4\)$"),
    ({"tokenizer": "word"}, {"tokenizer"}, r"drop --tokenizer word \(checkpoint: wordpiece\)"),
    ({"max_len": 65}, {"max_len"}, r"--max-len 65: .* has 64 positions; expected at most 64"),
    ({"head_warmup_steps": 4}, {"head_warmup_steps"},
     r"--head-warmup-steps 4: expected fewer than --steps 4"),
    ({"model_type": "gpt"}, set(), r"only BERT starts from a pretrained checkpoint"),
])
def test_contradicting_flags_are_refused(headless, tmp_path, overrides, given, message):
    from nlp_tutorials.training.pretraining import settle_run

    with pytest.raises(UserError, match=message):
        settle_run(run_config(tmp_path, headless, **overrides), given, resume=False)
    assert not list(tmp_path.iterdir()), "a refused run wrote files"


def test_agreeing_flags_are_accepted(headless, tmp_path):
    from nlp_tutorials.training.pretraining import settle_run

    config, _, _, _ = settle_run(run_config(tmp_path, headless, dim=32, layers=2, heads=4),
                                 {"dim", "layers", "heads"}, resume=False)
    assert config.dim == 32


def test_folder_that_is_not_a_bert_checkpoint(tmp_path):
    from nlp_tutorials.training.pretraining import settle_run

    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match=r"empty: no config.json or bert_config.json found"):
        settle_run(run_config(tmp_path / "run", tmp_path / "empty"), set(), resume=False)
    folder = tmp_path / "no_weights"
    shutil.copytree(FIXTURES / "bert_tiny_hf", folder)
    (folder / "model.safetensors").unlink()
    for given in (set(), {"head_warmup_steps"}):
        with pytest.raises(UserError, match=r"no model.safetensors \(HuggingFace\) or "
                                            r"bert_model.ckpt.index \(Google\) found"):
            settle_run(run_config(tmp_path / "run", folder, head_warmup_steps=1), given,
                       resume=False)
        assert not (tmp_path / "run").exists(), "a refused run wrote files"


@pytest.mark.parametrize("argv, expected", [
    (["train", "--init-from", "no/such/bert"], "--init-from no/such/bert: no such folder"),
    (["train", "--head-warmup-steps", "5"], "--head-warmup-steps 5: only with --init-from"),
    (["train", "--head-learning-rate", "0.01"], "--head-learning-rate 0.01: only with --init-from"),
])
def test_bad_flags_fail_in_one_line_without_tensorflow(argv, expected):
    code = ("import sys\nfrom nlp_tutorials.cli import main\n"
            f"status = main('bert', {argv!r})\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n"
            "sys.exit(status)\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, cwd=ROOT)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr


def test_gpt_has_no_init_from():
    from nlp_tutorials.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser("gpt").parse_args(["train", "--init-from", "x"])


def test_heads_rate_is_constant_then_the_schedule_starts_over():
    """30 steps, 10 heads-only at 1e-3, then BERT's schedule over the 20 left (peak 1e-4,
    warm-up 2): the rate of update t (1 for the first) written out with numpy."""
    from nlp_tutorials.training.pretraining import optimizer_schedule

    config = TrainConfig(steps=30, learning_rate=1e-4, head_learning_rate=1e-3,
                         head_warmup_steps=10, init_from="x")
    schedule = optimizer_schedule(config)
    t = np.arange(1, 31, dtype=np.float64)
    later = t - 10  # the encoder's own update count
    expected = np.where(t <= 10, 1e-3,
                        1e-4 * np.clip(np.minimum(later / 2, (20 - later) / 18), 0, None))
    rates = np.array([float(schedule(step)) for step in range(30)])  # the optimizer's count
    np.testing.assert_allclose(rates, expected, rtol=1e-6, atol=1e-12)
    assert rates[10] == pytest.approx(0.5e-4) and rates[-1] == 0.0
    copy = type(schedule).from_config(schedule.get_config())  # as Keras saves an optimizer
    np.testing.assert_array_equal([float(copy(step)) for step in range(30)], rates)


def test_a_run_with_a_head_warm_up_is_not_extended(tmp_path):
    from nlp_tutorials.training.pretraining import extend_run

    config = TrainConfig(model_dir=str(tmp_path), steps=30, head_warmup_steps=10, init_from="x")
    with pytest.raises(UserError, match=r"--steps 40: a run with --head-warmup-steps cannot be "
                                        r"extended"):
        extend_run(config, 40, 30, printer=lambda _: None)


@pytest.mark.slow
def test_train_then_finetune_from_the_command_line(headless, tmp_path):
    """The two commands as a user runs them: continued pre-training, then fine-tuning on it."""
    run = run_main("bert", "train", "--init-from", str(headless), "--model-dir",
                   str(tmp_path / "run"), "--steps", "3", "--head-warmup-steps", "1",
                   "--batch-size", "8", "--max-len", "32", "--no-plots")
    assert run.returncode == 0, run.stderr
    assert "no pre-training heads" in run.stdout and "steps 1-1: the pre-training heads" in run.stdout
    folder = tmp_path / "run" / "pretrained"
    finetune = run_main("bert", "finetune", "--init-from", str(folder), "--output-dir",
                        str(tmp_path / "mrpc"), "--epochs", "1", "--max-len", "32",
                        "--dev-size", "0", "--no-swap")
    assert finetune.returncode == 0, finetune.stderr
    assert "MRPC test over 1 seed: " in finetune.stdout
    assert "no pre-training heads" not in finetune.stdout  # the folder holds the trained heads


def mrpc_corpus(path: Path, documents: int = 12, sentences: int = 6) -> Path:
    """MRPC train sentences as a corpus in google-research/bert's format: one sentence a line,
    ``sentences`` consecutive ones a document, a blank line between documents."""
    from nlp_tutorials.tasks.mrpc import load_mrpc

    lines = [pair.text for pair in load_mrpc("train")[:documents * sentences]]
    blocks = ["\n".join(lines[i:i + sentences]) for i in range(0, len(lines), sentences)]
    path.write_text("\n\n".join(blocks) + "\n", encoding="utf-8")
    return path


def logged_scalars(folder: Path, name: str) -> dict:
    """{step: value} of the TensorBoard scalar ``name`` in the event files under ``folder``."""
    found = {}
    for path in folder.rglob("events.out.tfevents.*"):
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == name:
                    found[event.step] = float(tf.make_ndarray(value.tensor))
    return found


@pytest.mark.slow
def test_continued_on_a_corpus(headless, tmp_path):
    """--init-from with --corpus: the checkpoint's vocabulary (not one learned from the text),
    the corpus' default length capped by the checkpoint's 64 positions, and a run that trains."""
    from nlp_tutorials.training.continued import initial_model
    from nlp_tutorials.training.pretraining import pretrain

    text = mrpc_corpus(tmp_path / "corpus.txt")
    model_dir = tmp_path / "run"
    config = run_config(model_dir, headless, corpus=str(text), max_len=0, steps=2,
                        head_warmup_steps=1)
    printed = []
    run = pretrain(config, given={"head_warmup_steps"}, printer=printed.append)
    vocab = (model_dir / "vocab.txt").read_text().split()
    assert vocab == (headless / "vocab.txt").read_text().split()
    assert run.config.max_len == 64 and run.config.corpus == str(text)
    assert "steps 1-1: the pre-training heads" in "\n".join(printed)
    assert (model_dir / "pretrained" / "model.safetensors").is_file()
    # Both steps ran: the optimizer counted them, step 2's loss is in the TensorBoard logs, and
    # the last checkpoint, ckpt-2, holds the trained weights.
    assert int(run.model.optimizer.iterations.numpy()) == 2
    loss = logged_scalars(model_dir / "logs", "loss")
    assert list(loss) == [2] and np.isfinite(loss[2]) and loss[2] > 0
    trained = weights_by_path(run.model)
    saved = checkpoint_weights(model_dir / "checkpoints" / "ckpt-2")
    assert saved.keys() == trained.keys()
    for path, value in trained.items():
        np.testing.assert_array_equal(saved[path], value, err_msg=path)
    # Step 1 trained the fresh heads at the heads' rate (the encoder's rate at step 2, the
    # schedule's last, is 0): every head kernel moved from the values the run drew for it.
    drawn = weights_by_path(initial_model(headless, run.config.seed, printer=lambda _: None))
    kernels = [path for path in trained if is_head(path) and path.endswith("kernel")]
    assert kernels and all(not np.array_equal(trained[path], drawn[path]) for path in kernels)


def test_shards_must_carry_the_checkpoint_vocabulary(headless, tmp_path):
    from nlp_tutorials.sources.corpus import learn_tokenizer
    from nlp_tutorials.sources.shards import prepare_shards
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.training.pretraining import settle_run

    text = mrpc_corpus(tmp_path / "corpus.txt")
    quiet = {"printer": lambda _: None}
    prepare_shards(str(text), tmp_path / "own", 2, learn_tokenizer("word", 500, [text], 1), 32, 1,
                   **quiet)
    with pytest.raises(UserError, match="another vocabulary"):
        settle_run(run_config(tmp_path / "a", headless, data=str(tmp_path / "own"), max_len=0),
                   set(), resume=False)
    prepare_shards(str(text), tmp_path / "same", 2, load_tokenizer(headless), 48, 1, **quiet)
    config, _, model_config, _ = settle_run(
        run_config(tmp_path / "b", headless, data=str(tmp_path / "same"), max_len=0), set(),
        resume=False)
    assert config.max_len == 48  # the shards' length, within the checkpoint's positions
    assert model_config.max_position_embeddings == 64
