"""`finetune --init-from` a fine-tuned model: its encoder, and its head where the new task's is
alike (SQuAD v1.1's span head going on to v2.0), else a fresh head."""
import json
import shutil

import numpy as np
import pytest

from nlp_tutorials.cli import main
from nlp_tutorials.training.config import FinetuneConfig
from support import REPOSITORY

TINY_BERT = REPOSITORY / "tests" / "fixtures" / "bert_tiny_hf"
SLICES = REPOSITORY / "tests" / "fixtures" / "squad"


def squad_folder(folder, version):
    """``folder`` holding the fixture slice of ``version`` ("1.1", "2.0") as train and dev."""
    folder.mkdir(parents=True)
    for name in (f"train-v{version}.json", f"dev-v{version}.json"):
        shutil.copy(SLICES / f"dev-v{version}-slice.json", folder / name)
    return folder


def finetune_on_the_v1_slice(root):
    """``root/model``: the tiny BERT fine-tuned one epoch on the SQuAD v1.1 slice."""
    data = squad_folder(root / "data", "1.1")
    assert main("bert", ["finetune", "--task", "squad", "--data", str(data), "--init-from",
                         str(TINY_BERT), "--epochs", "1", "--batch-size", "8", "--max-len",
                         "48", "--stride", "16", "--dev-size", "0",
                         "--output-dir", str(root / "model")]) in (0, None)


@pytest.fixture(scope="module")
def squad_model(shared_folders):
    """The one SQuAD v1.1 model of a test run, built once for all workers."""
    return shared_folders.folder("squad_v1_model", finetune_on_the_v1_slice) / "model"


def own_weights(head) -> list:
    from nlp_tutorials.training.finetuning import head_layers

    return [weight.numpy() for weight in head_layers(head)]


def start(init_from, task_name):
    """(the new task's head built on what ``init_from`` gives, the earlier head, printed)."""
    from nlp_tutorials.tasks import get_task
    from nlp_tutorials.training.finetuning import carry_head, starting_point

    printed = []
    backbone, _, earlier = starting_point(FinetuneConfig(task=task_name, init_from=str(init_from),
                                                         data="unused"))
    head = get_task(task_name).build_head(backbone)
    carry_head(earlier, head, str(init_from), printed.append)
    return head, earlier, printed


@pytest.mark.slow
def test_a_span_head_goes_on_to_squad2_with_its_encoder(squad_model):
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.tasks import get_task

    saved = load_finetuned(squad_model).head  # read again, apart from the run under test
    fresh = get_task("squad2").build_head(saved.backbone)
    assert not np.allclose(own_weights(fresh)[0], own_weights(saved)[0])  # the test can fail
    head, _, printed = start(squad_model, "squad2")
    assert printed == [f"started from {squad_model}: its encoder and its SpanExtractor head"]
    for mine, theirs in zip(own_weights(head), own_weights(saved), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    for mine, theirs in zip(head.backbone.weights, saved.backbone.weights, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.parametrize("task_name, head_name", [("squad2", "SpanExtractor"),
                                                  ("stsb", "SequenceClassifier")])
def test_a_head_that_does_not_fit_starts_fresh_on_the_earlier_encoder(mrpc_classifier,
                                                                      task_name, head_name):
    # MRPC's two-label classifier fits neither a span head nor STS-B's one-number regression.
    head, earlier, printed = start(mrpc_classifier, task_name)
    assert printed == [f"started from {mrpc_classifier}: its encoder; its SequenceClassifier "
                       f"head does not fit this task's {head_name}, which starts fresh"]
    assert head.backbone is earlier.backbone
    assert not np.array_equal(own_weights(head)[0], own_weights(earlier)[0])  # the kernel


@pytest.mark.slow
def test_finetune_runs_squad2_from_a_squad_model(squad_model, tmp_path, capsys):
    data = squad_folder(tmp_path / "data", "2.0")
    output = tmp_path / "squad2"
    assert main("bert", ["finetune", "--task", "squad2", "--data", str(data), "--init-from",
                         str(squad_model), "--epochs", "1", "--batch-size", "8", "--max-len",
                         "48", "--stride", "16", "--output-dir", str(output)]) in (0, None)
    printed = capsys.readouterr().out
    assert f"started from {squad_model}: its encoder and its SpanExtractor head" in printed
    assert json.loads((output / "results.json").read_text())["config"]["init_from"] == str(
        squad_model)
    assert json.loads((output / "task.json").read_text())["task"] == "squad2"

