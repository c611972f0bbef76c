"""A task added from outside the package: one subclass and one ``register_task`` line, then every
command knows it (``finetune``, ``evaluate``, ``predict``, ``export-model``, ``baseline``), on
a tiny real BERT (tests/fixtures/bert_tiny_hf) and tab-separated files written here."""
import json

import pytest

from nlp_tutorials.tasks import TASKS, get_task, register_task
from nlp_tutorials.tasks.glue import GlueTask
from support import REPOSITORY, run_main

TINY_BERT = REPOSITORY / "tests" / "fixtures" / "bert_tiny_hf"
AGREE = [("the cat sat on the mat", "a cat sat on a mat"),
         ("prices rose in may", "prices went up in may"),
         ("he left early", "he went away early"),
         ("the film was good", "the movie was good")]
DISAGREE = [("the cat sat on the mat", "the dog ran in the park"),
            ("prices rose in may", "the team lost the final"),
            ("he left early", "she stayed until the end"),
            ("the film was good", "rain fell all night")]


class AgreementTask(GlueTask):
    """Do two sentences say the same thing? Columns ``first second label``, labels agree and
    disagree."""

    name = "agreement"
    title = "Agreement"
    labels = ("agree", "disagree")
    pair = True
    columns = {"text": "first", "pair": "second", "label": "label"}


def write_split(path, copies: int) -> None:
    rows = [f"{a}\t{b}\tagree" for a, b in AGREE] + [f"{a}\t{b}\tdisagree" for a, b in DISAGREE]
    path.write_text("first\tsecond\tlabel\n" + "\n".join(rows * copies) + "\n", encoding="utf-8")


@pytest.fixture
def registered():
    register_task("agreement", AgreementTask)
    yield
    del TASKS["agreement"]


@pytest.fixture
def data(tmp_path):
    folder = tmp_path / "agreement"
    folder.mkdir()
    write_split(folder / "train.tsv", copies=4)
    write_split(folder / "dev.tsv", copies=1)
    return folder


def test_register_task_refuses_what_no_command_could_find(registered):
    with pytest.raises(TypeError, match="expected a Task subclass"):
        register_task("other", dict)
    with pytest.raises(ValueError, match="the class is named 'agreement'"):
        register_task("other", AgreementTask)
    with pytest.raises(ValueError, match="rte is RteTask"):
        register_task("rte", type("Rte", (AgreementTask,), {"name": "rte"}))
    assert TASKS["rte"].__name__ == "RteTask"


def test_a_registered_task_is_in_the_task_flags_choices_and_help(registered, monkeypatch):
    monkeypatch.setenv("COLUMNS", "1000")
    for model, command in (("bert", ["finetune"]), ("baseline", [])):
        result = run_main(model, *command, "--help")
        assert result.returncode == 0
        assert ("the task: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, agreement (a "
                "label or score of a sentence or pair); conll2003") in result.stdout
    refused = run_main("bert", "finetune", "--task", "agreemen")
    assert refused.returncode == 2 and "'agreement'" in refused.stderr


@pytest.mark.slow
def test_every_command_runs_a_registered_task(registered, data, tmp_path):
    model = tmp_path / "model"
    finetuned = run_main("bert", "finetune", "--task", "agreement", "--data", str(data),
                         "--init-from", str(TINY_BERT), "--output-dir", str(model),
                         "--epochs", "1", "--batch-size", "8", "--max-len", "24")
    assert finetuned.returncode == 0, finetuned.stderr
    assert json.loads((model / "task.json").read_text())["task"] == "agreement"

    evaluated = run_main("bert", "evaluate", "--model-dir", str(model), "--data", str(data),
                         "--output-dir", str(tmp_path / "scores"))
    assert evaluated.returncode == 0, evaluated.stderr
    metrics = json.loads((tmp_path / "scores" / "metrics_dev.json").read_text())
    assert metrics["examples"] == 8 and 0 <= metrics["scores"]["accuracy"] <= 1

    inputs = tmp_path / "pairs.tsv"
    inputs.write_text("he left early\the went away early\nprices rose\train fell\n")
    predicted = run_main("bert", "predict", str(inputs), "--model-dir", str(model))
    assert predicted.returncode == 0, predicted.stderr
    answers = predicted.stdout.splitlines()
    assert len(answers) == 2 and all(
        any(label in line for label in AgreementTask.labels) for line in answers)

    exported = run_main("bert", "export-model", "--model-dir", str(model), "--output",
                        str(tmp_path / "served"))
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "served" / "1" / "saved_model.pb").is_file()

    baselines = run_main("baseline", "--task", "agreement", "--data", str(data))
    assert baselines.returncode == 0, baselines.stderr
    lines = baselines.stdout.splitlines()
    assert lines[0] == "majority: accuracy 50.0% on dev (dev.tsv, 8 examples)"
    assert lines[1].startswith("bag of words (C ") and len(lines) == 2


def test_a_registered_task_reads_its_files(registered, data):
    task = get_task("agreement", data_dir=data)
    assert len(task.examples("train")) == 32 and task.examples("dev")[0].label == "agree"
