"""`finetune --task`, `evaluate` and task.json: the run around any task, checked with MRPC on a
tiny real BERT (tests/fixtures/bert_tiny_hf) and MRPC-format files cut from the shipped copy."""
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.mrpc import DEFAULT_DATA_DIR
from nlp_tutorials.training.config import FINETUNED_DIR, OWN_DATA_TASK, FinetuneConfig
from support import REPOSITORY, fails_without_tensorflow, without_progress

TINY_BERT = REPOSITORY / "tests" / "fixtures" / "bert_tiny_hf"


def test_every_task_name_is_a_registered_task():
    from nlp_tutorials.tasks import TASKS, named_tasks

    assert set(TASKS) == {*named_tasks(), OWN_DATA_TASK}
    for name, task_class in TASKS.items():
        assert task_class.name == name


def test_the_task_fills_what_the_flags_left():
    mrpc = FinetuneConfig()
    assert (mrpc.task, mrpc.output_dir, mrpc.learning_rate, mrpc.epochs) == (
        "mrpc", FINETUNED_DIR, 1e-4, 3)
    own = FinetuneConfig(train="t.csv", text_columns="text", label_column="label")
    assert (own.task, own.output_dir) == (OWN_DATA_TASK, "visual/models/bert_custom")
    assert FinetuneConfig(train="t.txt", file_format="conll").task == "conll2003"
    given = FinetuneConfig(task="rte", data=".", epochs=7, learning_rate=3e-5)
    assert (given.epochs, given.learning_rate, given.output_dir) == (
        7, 3e-5, "visual/models/bert_rte")


@pytest.mark.parametrize("settings, message", [
    (dict(task="sst2"), "--task sst2 needs its files: --data DIR"),
    (dict(train="t.csv", text_columns="text"), "needs --text-columns A[,B] and --label-column"),
    (dict(label_column="y"), "expected --text-columns as well"),
    (dict(text_columns="a,b,c", label_column="y", train="t.csv"),
     "--text-columns a,b,c: expected one column name, or two"),
    (dict(file_format="conll"), "your own data needs --train FILE"),
])
def test_settings_that_cannot_work_are_one_line(settings, message):
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("]", r"\]")):
        FinetuneConfig(**settings)


@pytest.mark.parametrize("argv, message", [
    (["finetune", "--task", "nosuch"], "argument --task: invalid choice: 'nosuch'"),
    (["finetune", "--task", "rte", "--data", "no/such/folder"],
     "--data no/such/folder: no such folder"),
    (["finetune", "--task", "cola", "--text-columns", "s", "--label-column", "y", "--train",
      "x.csv"], "--task reads a task's own files"),
    (["finetune", "--train", "missing.csv", "--text-columns", "s", "--label-column", "y"],
     "--train missing.csv: no such file"),
    (["evaluate", "--file", "missing.tsv"], "--file missing.tsv: no such file"),
])
def test_bad_task_flags_answer_before_tensorflow(argv, message):
    assert message in fails_without_tensorflow(*argv)


def test_a_broken_task_file_answers_before_tensorflow(tmp_path):
    data = tmp_path / "conll"
    data.mkdir()
    (data / "eng.train").write_text("-DOCSTART- -X- O O\n\nJohn NNP I-NP I-PER\nlives VBZ\n")
    line = fails_without_tensorflow("finetune", "--task", "conll2003", "--data", str(data),
                                    "--output-dir", str(tmp_path / "out"))
    assert f"{data / 'eng.train'}:4:" in line
    own = tmp_path / "train.csv"
    own.write_text("text,label\nfine,pos\n")
    (tmp_path / "dev.csv").write_text("text,label\nbad,neg\n")
    line = fails_without_tensorflow("finetune", "--train", str(own), "--dev",
                                    str(tmp_path / "dev.csv"), "--text-columns", "text",
                                    "--label-column", "label", "--output-dir",
                                    str(tmp_path / "out"))
    assert f"{tmp_path / 'dev.csv'}:2: unknown label 'neg'" in line
    assert not (tmp_path / "out").exists()


def mrpc_slice(path: Path, split_file: str, rows: slice) -> Path:
    """An MRPC-format file of some of the shipped file's rows (header kept)."""
    lines = (DEFAULT_DATA_DIR / split_file).read_text(encoding="utf-8-sig").splitlines()
    path.write_text("\n".join([lines[0], *lines[1:][rows]]) + "\n", encoding="utf-8")
    return path


def write_glue_folder(folder):
    """A GLUE-style MRPC folder: train.tsv (96 pairs) and dev.tsv (40 pairs)."""
    folder.mkdir(parents=True)
    mrpc_slice(folder / "train.tsv", "msr_paraphrase_train.txt", slice(0, 96))
    mrpc_slice(folder / "dev.tsv", "msr_paraphrase_train.txt", slice(96, 136))


def finetune_on_glue_folder(folder):
    """``folder/data``: :func:`write_glue_folder`; ``folder/model``: the tiny BERT fine-tuned
    one epoch on it; ``folder/result.json`` and ``folder/printed.json``: what finetune returned
    and printed."""
    from nlp_tutorials.training.finetuning import finetune

    write_glue_folder(folder / "data")
    printed = []
    config = FinetuneConfig(data=str(folder / "data"), init_from=str(TINY_BERT),
                            output_dir=str(folder / "model"), epochs=1, batch_size=16,
                            max_len=48)
    result = finetune(config, printer=printed.append)
    (folder / "result.json").write_text(json.dumps(result))
    (folder / "printed.json").write_text(json.dumps(printed))


@pytest.fixture(scope="module")
def finetuned_run(shared_folders):
    """The run's one fine-tuning on the GLUE-style folder, built once for all workers."""
    return shared_folders.folder("glue_mrpc_run", finetune_on_glue_folder)


@pytest.fixture(scope="module")
def glue_folder(finetuned_run):
    """The GLUE-style MRPC folder the run fine-tuned on (read-only)."""
    return finetuned_run / "data"


@pytest.fixture(scope="module")
def finetuned(finetuned_run):
    """The tiny BERT fine-tuned one epoch on the GLUE-style folder: (folder, result, printed)."""
    return (finetuned_run / "model", json.loads((finetuned_run / "result.json").read_text()),
            json.loads((finetuned_run / "printed.json").read_text()))


def described(path: Path) -> str:
    """What reading an MRPC file should report, counted here from its Quality column."""
    labels = [line.split("\t")[0] for line in path.read_text(encoding="utf-8").splitlines()[1:]]
    return (f"{path.name}: {len(labels)} sentence pairs ({labels.count('1')} paraphrases, "
            f"{labels.count('0')} not)")


def test_a_task_folder_is_read_once_and_reported(finetuned, glue_folder):
    _, result, printed = finetuned
    assert printed[:2] == [described(glue_folder / "train.tsv"),
                           described(glue_folder / "dev.tsv")]
    # No labelled test file in a GLUE folder: dev is the summary.
    assert result["runs"][0]["test"] is None and "dev_mean_std" in result


def test_the_run_says_its_precision_before_training_and_records_it(finetuned):
    """--precision auto (the default) is resolved: results.json holds what the run computed
    in, which its line says, before the first epoch's."""
    folder, _, printed = finetuned
    precision = json.loads((folder / "results.json").read_text())["config"]["precision"]
    assert precision in ("float32", "mixed_bfloat16")
    said = [line for line in printed if line.startswith("precision: ")]
    assert len(said) == 1 and said[0].startswith(f"precision: {precision} (auto: ")
    assert printed.index(said[0]) < min(i for i, line in enumerate(printed) if "epoch" in line)


def test_task_json_keeps_what_predict_and_evaluate_need(finetuned):
    folder, _, _ = finetuned
    saved = json.loads((folder / "task.json").read_text())
    assert saved == {"task": "mrpc", "labels": ["0", "1"], "max_len": 48, "stride": 128}


def test_evaluate_scores_and_writes_what_the_head_predicts(finetuned, glue_folder, tmp_path):
    from nlp_tutorials.finetuned.evaluation import evaluate_model
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.tasks.mrpc import MrpcTask

    folder, _, _ = finetuned
    printed = []
    scores = evaluate_model(folder, "dev", tmp_path, data_dir=glue_folder, printer=printed.append,
                            dev_size=FinetuneConfig.dev_size)
    # Independently: the head's own logits on the dev pairs, arg-maxed and scored in numpy.
    head, tokenizer, _ = load_finetuned(folder)
    pairs = MrpcTask().read_file(glue_folder / "dev.tsv")
    arrays = MrpcTask().encode(tokenizer, pairs, 48)
    logits = head({"input_ids": arrays["input_ids"], "token_type_ids": arrays["token_type_ids"]},
                  training=False).numpy()
    predicted = logits.argmax(axis=1)
    labels = np.array([int(p.label) for p in pairs])
    assert scores["accuracy"] == pytest.approx(np.mean(predicted == labels))
    metrics = json.loads((tmp_path / "metrics_dev.json").read_text())
    assert metrics["examples"] == 40 and metrics["scores"]["accuracy"] == pytest.approx(
        scores["accuracy"])
    rows = (tmp_path / "predictions_dev.tsv").read_text().splitlines()
    assert rows[0] == "index\tprediction"
    assert [row.split("\t")[1] for row in rows[1:]] == [str(p) for p in predicted]
    said = without_progress(printed)
    assert said[0] == described(glue_folder / "dev.tsv")
    _, result, run_printed = finetuned
    # evaluate prints the run's dev scores on the scale the run printed them.
    assert said[1] == f"MRPC dev: {shown_scores(scores, ' ')}"
    assert said[1].split(": ", 1)[1] in "\n".join(run_printed)


def shown_scores(scores: dict, between: str) -> str:
    """MRPC's scores as the docs' tables write them, worked out here: x100 to one decimal,
    accuracy as a percentage."""
    return (f"accuracy {100 * scores['accuracy']:.1f}%{between}"
            f"F1 {100 * scores['f1']:.1f}")


def test_the_epoch_seed_and_summary_lines_show_a_score_on_one_scale(finetuned):
    """The one epoch's dev scores, the seed's kept epoch and the summary over seeds print the
    same numbers for the same scores."""
    _, result, printed = finetuned
    printed = without_progress(printed)
    dev = result["runs"][0]["dev"]
    assert printed[3].startswith("seed 1 epoch 1: train loss ")
    assert printed[3].endswith(f", dev {shown_scores(dev, ' ')}")
    assert printed[4] == f"seed 1: epoch 1, best dev accuracy {100 * dev['accuracy']:.1f}%"
    assert printed[5] == f"MRPC dev over 1 seed: {shown_scores(dev, ', ')}"


def test_evaluate_without_the_split_names_what_to_pass(finetuned, tmp_path):
    from nlp_tutorials.finetuned.evaluation import evaluate_model

    folder, _, _ = finetuned
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no dev file for MRPC: expected dev.tsv in --data DIR, "
                                        "or --file FILE"):
        evaluate_model(folder, "dev", tmp_path, data_dir=empty,
                       dev_size=FinetuneConfig.dev_size)


def test_a_task_json_field_the_task_does_not_keep_is_one_line(finetuned, tmp_path):
    from nlp_tutorials.finetuned.folders import load_task

    saved = json.loads((finetuned[0] / "task.json").read_text())
    (tmp_path / "task.json").write_text(json.dumps({**saved, "columns": ["a"]}))
    with pytest.raises(UserError, match="task.json: a field MRPC does not keep"):
        load_task(tmp_path)
    (tmp_path / "task.json").write_text(json.dumps({**saved, "max_len": 0}))
    with pytest.raises(UserError, match="task.json: max_len is 0; expected a positive integer"):
        load_task(tmp_path)


def test_fewer_train_examples_than_a_batch_is_one_line(glue_folder, tmp_path):
    from nlp_tutorials.training.finetuning import finetune

    config = FinetuneConfig(data=str(glue_folder), init_from=str(TINY_BERT),
                            output_dir=str(tmp_path / "out"), batch_size=200,
                            swap_augment=False)
    with pytest.raises(UserError, match="96 train examples for MRPC, fewer than --batch-size 200"):
        finetune(config, printer=lambda *_: None)



@pytest.mark.slow
def test_squad2_keeps_the_epoch_best_at_its_tuned_threshold_each_seed_tuning_its_own(
        tmp_path, monkeypatch):
    """Dev scores scripted over a real run: F1 at the threshold in use ties between the two
    epochs (a model that answers nothing scores the share of unanswerable questions), F1 at the
    dev-best threshold rises. The second epoch is kept and recorded; the second seed starts
    from the declared threshold 0, not from the first seed's tuned one."""
    from nlp_tutorials.training import finetuning
    from nlp_tutorials.training.finetuning import finetune

    data = tmp_path / "squad"
    data.mkdir()
    for name in ("train-v2.0.json", "dev-v2.0.json"):
        shutil.copy(REPOSITORY / "tests" / "fixtures" / "squad" / "dev-v2.0-slice.json",
                    data / name)
    real_score, thresholds_seen = finetuning.score_examples, []
    scripted = [dict(f1=0.5, best_f1=0.5, best_threshold=1.5),   # each seed's first epoch
                dict(f1=0.5, best_f1=0.7, best_threshold=2.5)]   # and its second

    def score_examples(head, task, examples, arrays, head_mask=None, display=None):
        thresholds_seen.append(task.null_threshold)
        scores = real_score(head, task, examples, arrays, head_mask, display)
        return {**scores, **scripted[(len(thresholds_seen) - 1) % 2]}

    monkeypatch.setattr(finetuning, "score_examples", score_examples)
    output = tmp_path / "model"
    config = FinetuneConfig(task="squad2", data=str(data), init_from=str(TINY_BERT),
                            output_dir=str(output), epochs=2, seeds=2, batch_size=8,
                            max_len=48, stride=16)
    result = finetune(config, printer=lambda *_: None)
    assert thresholds_seen == [0.0] * 4
    for run in result["runs"]:
        assert (run["epoch"], run["dev"]["best_f1"]) == (2, 0.7)
    saved = json.loads((output / "results.json").read_text())
    assert [run["epoch"] for run in saved["runs"]] == [2, 2]
    assert json.loads((output / "task.json").read_text())["null_threshold"] == 2.5


def test_finetune_shows_each_epoch_and_each_pass_as_it_goes(finetuned):
    """What the one-epoch run printed: its epoch's progress (the first step's line, then the
    last's; a run this short has no line between) before the epoch's scores, then the dev
    pass's, each with the examples per second."""
    _, _, printed = finetuned
    scores = next(i for i, line in enumerate(printed) if line.startswith("seed 1 epoch 1: "))
    training = [line for line in printed[:scores] if line.startswith("seed 1 epoch 1/1: ")]
    steps = 96 * 2 // 16  # the train pairs, each also swapped (--swap-augment), in 16s
    assert [line.split(" - ")[0] for line in training] == [
        "seed 1 epoch 1/1: step 1/%d" % steps, "seed 1 epoch 1/1: step %d/%d" % (steps, steps)]
    assert re.fullmatch(r"seed 1 epoch 1/1: step \d+/\d+ - \d+s - [\d.]+ examples/s - "
                        r"loss: \d\.\d{4}", training[-1]), training[-1]
    dev = [line for line in printed[:scores] if line.startswith("seed 1 epoch 1 dev: ")]
    assert [line.split(" - ")[0] for line in dev] == ["seed 1 epoch 1 dev: batch 1/1"]
    assert "examples/s" in dev[0]
    test_pass = [line for line in printed[scores:] if line.startswith("seed 1 test")]
    assert test_pass == []  # a GLUE folder has no labelled test file


def test_evaluate_shows_its_pass(finetuned, glue_folder, tmp_path):
    from nlp_tutorials.finetuned.evaluation import evaluate_model

    folder, _, _ = finetuned
    printed = []
    evaluate_model(folder, "dev", tmp_path, data_dir=glue_folder, printer=printed.append)
    # 40 dev pairs in one batch of 64: the pass's first step is its last.
    passes = [line for line in printed if line.startswith("MRPC dev: batch")]
    assert [line.split(" - ")[0] for line in passes] == ["MRPC dev: batch 1/1"]
    assert re.fullmatch(r"MRPC dev: batch 1/1 - \d+s - [\d.]+ examples/s", passes[0])
    assert printed.index(passes[0]) < next(i for i, line in enumerate(printed)
                                           if line.startswith("MRPC dev: accuracy"))
