"""A refused run leaves nothing of its own: `train` checks its checkpoint, batch size and data
before writing its settings, and a resumed run records a longer schedule only once it starts."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nlp_tutorials.cli import main
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.training.config import TrainConfig

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
TINY = dict(dim=32, layers=1, heads=2, max_len=32, batch_size=8, checkpoint_every=2,
            sample_every=100, log_every=100)


@pytest.fixture
def wider_vocabulary(tmp_path) -> Path:
    """The tiny HuggingFace BERT with a config and vocabulary of 150 tokens and the
    checkpoint's embeddings of 100 rows: refused only when its weights are read."""
    folder = Path(shutil.copytree(FIXTURES / "bert_tiny_hf", tmp_path / "wider"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "vocab_size": 150}))
    with open(folder / "vocab.txt", "a") as vocab:
        vocab.writelines(f"extra{i}\n" for i in range(50))
    return folder


WRONG_SHAPE = "tensors of the wrong shape: bert.embeddings.word_embeddings.weight [100, 32] "


def test_pretrain_refused_by_its_checkpoint_writes_nothing(tmp_path, wider_vocabulary):
    from nlp_tutorials.training.pretraining import pretrain

    model_dir = tmp_path / "run"
    config = TrainConfig(model_dir=str(model_dir), init_from=str(wider_vocabulary), steps=4,
                         **TINY)
    with pytest.raises(UserError) as refused:
        pretrain(config, set(), printer=lambda *_: None)
    assert WRONG_SHAPE in str(refused.value)
    assert not model_dir.exists()


def test_train_refused_by_its_checkpoint_leaves_no_folder(tmp_path, wider_vocabulary, capsys):
    model_dir = tmp_path / "new" / "run"
    status = main("bert", ["train", "--init-from", str(wider_vocabulary), "--model-dir",
                           str(model_dir), "--steps", "2", "--batch-size", "8", "--no-plots"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and WRONG_SHAPE in err, err
    assert list(tmp_path.iterdir()) == [wider_vocabulary]


@pytest.mark.slow
def test_train_refused_for_its_batch_size_leaves_no_folder(tmp_path):
    """Three logical CPU replicas do not split a batch of 16: refused once the strategy is
    made (a fresh process: logical devices are set up before TensorFlow starts)."""
    model_dir = tmp_path / "run"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "nlp_tutorials.bert", "train", "--strategy", "mirrored",
         "--cpu-replicas", "3", "--batch-size", "16", "--model-dir", str(model_dir),
         "--steps", "1", "--no-plots"], capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": path})
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        "python -m nlp_tutorials.bert train: error: --batch-size 16 is not divisible by the 3 "
        "replicas; the global batch is split evenly across them, so use a multiple of 3"]
    assert list(tmp_path.iterdir()) == []


def test_a_refused_finetune_leaves_no_output_folder(tmp_path, capsys):
    output_dir = tmp_path / "new" / "mrpc"
    status = main("bert", ["finetune", "--model-dir", str(tmp_path / "nothing"),
                           "--output-dir", str(output_dir)])
    assert status == 2 and "no pre-trained checkpoint" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_a_refused_resume_keeps_the_saved_schedule(tmp_path):
    """--resume --steps 8 on a folder whose config.json no longer fits its checkpoint: refused
    when the checkpoint is restored, and train_config.json still says 4 steps."""
    from nlp_tutorials.training.pretraining import pretrain

    model_dir = tmp_path / "run"
    pretrain(TrainConfig(model_dir=str(model_dir), steps=4, **TINY), printer=lambda *_: None)
    settings = (model_dir / "train_config.json").read_bytes()
    config = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config, "intermediate_size": 64}))
    with pytest.raises(UserError, match="does not fit the model in config.json"):
        pretrain(TrainConfig(model_dir=str(model_dir), steps=8, **TINY), {"steps"},
                 resume=True, printer=lambda *_: None)
    assert (model_dir / "train_config.json").read_bytes() == settings
