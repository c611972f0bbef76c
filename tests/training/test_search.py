"""`finetune --search`: trials on a held-out part of train, search.json, pruning, resuming, and
the best settings trained on all of train; checked with MRPC cut small on a tiny real BERT."""
import dataclasses
import json
import shutil
import types

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.outputs import Interrupted
from nlp_tutorials.tasks.mrpc import DEFAULT_DATA_DIR
from nlp_tutorials.training.config import FinetuneConfig
from nlp_tutorials.training.search import PAPER_GRID, held_out_task, import_optuna, read_space
from support import REPOSITORY, fails_without_tensorflow, run_main, without_progress

TINY_BERT = REPOSITORY / "tests" / "fixtures" / "bert_tiny_hf"


@pytest.fixture(scope="module")
def mrpc_folder(tmp_path_factory):
    """A GLUE-style MRPC folder: train.tsv (80 pairs), dev.tsv (24 pairs)."""
    folder = tmp_path_factory.mktemp("glue_mrpc")
    lines = (DEFAULT_DATA_DIR / "msr_paraphrase_train.txt").read_text(
        encoding="utf-8-sig").splitlines()
    for name, rows in (("train.tsv", lines[1:81]), ("dev.tsv", lines[81:105])):
        (folder / name).write_text("\n".join([lines[0], *rows]) + "\n", encoding="utf-8")
    return folder


def space_file(tmp_path, space: dict):
    path = tmp_path / "space.json"
    path.write_text(json.dumps(space))
    return str(path)


def search_config(mrpc_folder, output, space, trials, **settings):
    return FinetuneConfig(data=str(mrpc_folder), init_from=str(TINY_BERT), output_dir=str(output),
                          max_len=32, search=trials, search_space=space, **settings)


def test_the_default_space_is_the_papers_grid():
    assert read_space("") == {"learning_rate": [5e-5, 4e-5, 3e-5, 2e-5], "batch_size": [16, 32],
                              "epochs": [2, 3, 4]} == PAPER_GRID


@pytest.mark.parametrize("text, message", [
    ("[1, 2]", "expected a JSON object {setting: [values]}, not empty"),
    ('{"dropout": [0.1]}', "'dropout' cannot be searched; expected some of learning_rate, "),
    ('{"epochs": []}', "epochs: expected a non-empty list of int values, got []"),
    ('{"batch_size": [16, 2.5]}', "batch_size: expected a non-empty list of int values"),
    ('{"pooling": ["cls", 1]}', "pooling: expected a non-empty list of str values"),
    ("{oops", ":1: not valid JSON (Expecting property name"),
])
def test_a_bad_space_file_is_one_line_naming_it(tmp_path, text, message):
    path = tmp_path / "space.json"
    path.write_text(text)
    with pytest.raises(UserError, match=f"^--search-space {path}:") as raised:
        read_space(str(path))
    assert message in str(raised.value)
    assert read_space(space_file(tmp_path, {"learning_rate": [1e-3, 5], "pooling": ["mean"]}))


def test_search_flags_answer_before_tensorflow(tmp_path):
    line = fails_without_tensorflow("finetune", "--search-space", "s.json")
    assert line.endswith("--search-space s.json: only with --search TRIALS")
    # The same checks before the run: in this process.
    result = run_main("bert", "finetune", "--search", "2", "--search-space",
                      str(tmp_path / "none.json"))
    assert result.returncode == 2 and result.stderr == (
        f"python -m nlp_tutorials.bert finetune: error: --search-space "
        f"{tmp_path / 'none.json'}: no such file\n")


def test_without_optuna_search_is_one_line(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "optuna", None)  # import optuna raises ImportError
    with pytest.raises(UserError, match=r"^--search needs Optuna: pip install "
                                        r"'nlp_tutorials\[search\]' \(or pip install optuna\)$"):
        import_optuna()


def test_the_trials_hold_out_a_tenth_of_train_and_never_see_dev_or_test(mrpc_folder):
    task = FinetuneConfig(data=str(mrpc_folder)).make_task(printer=None)
    train = task.examples("train")
    trial_task = held_out_task(task, 0.1, seed=3)
    trial_train, held = trial_task.examples("train"), trial_task.examples("dev")
    assert len(held) == 8 and len(trial_train) == 72 and trial_task.examples("test") == []
    assert sorted(map(id, trial_train + held)) == sorted(map(id, train))  # a split of train
    assert [p for p in train if p in held] == held  # in file order, drawn from all of train
    assert held != train[-8:] and held_out_task(task, 0.1, seed=3).examples("dev") == held
    assert not set(map(id, held + trial_train)) & set(map(id, task.examples("dev")))


# A rate's held-out score at epoch 1; each later epoch adds as much again.
FIRST_EPOCH = {1e-5: 0.50, 2e-5: 0.62, 3e-5: 0.56, 4e-5: 0.41, 5e-5: 0.60}


def scripted_training(calls: list, stop_at: int | None = None):
    """A stand-in for finetune_once whose epoch scores are FIRST_EPOCH's, scaled by the epoch:
    the search's bookkeeping, pruning and resuming checked without training. ``stop_at``: the
    call (from 1) that is Ctrl-C'd."""
    def train_once(config, task, seed, strategy, printer, after_epoch, display):
        calls.append(config.learning_rate)
        if len(calls) == stop_at:
            raise KeyboardInterrupt
        for epoch in range(1, config.epochs + 1):
            after_epoch(epoch, FIRST_EPOCH[config.learning_rate] * epoch)
    return train_once


def test_the_search_prunes_below_the_median_goes_on_after_ctrl_c_and_chooses_the_best(
        mrpc_folder, tmp_path):
    """Without training: which trials the median rule stops (worked out here from the order the
    trials ran), search.json after a Ctrl-C, and the setting chosen."""
    from nlp_tutorials.training.search import SEARCH_FILE, search_recipe

    space = space_file(tmp_path, {"learning_rate": sorted(FIRST_EPOCH), "epochs": [2]})
    config = search_config(mrpc_folder, tmp_path / "out", space, trials=5)
    task = config.make_task(printer=None)
    calls, printed = [], []
    with pytest.raises(Interrupted, match="2 trial\\(s\\) kept in"):
        search_recipe(config, task, None, scripted_training(calls, stop_at=3), tmp_path / "out",
                      printer=printed.append)
    saved = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())
    assert [t["settings"]["learning_rate"] for t in saved["trials"]] == calls[:2]

    calls.clear()
    best, summary = search_recipe(config, task, None, scripted_training(calls), tmp_path / "out",
                                  printer=printed.append)
    trials = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())["trials"]
    assert len(calls) == 3 and sorted(t["settings"]["learning_rate"] for t in trials) == sorted(
        FIRST_EPOCH)  # the grid, each setting once, the two kept trials not run again
    completed, expected_states = [], []
    for trial in trials:  # Optuna's median rule, after 2 complete trials, at epoch 1
        first = FIRST_EPOCH[trial["settings"]["learning_rate"]]
        stopped = len(completed) >= 2 and first < float(np.median(completed))
        expected_states.append("pruned" if stopped else "complete")
        completed += [] if stopped else [first]
    assert [t["state"] for t in trials] == expected_states and "pruned" in expected_states
    for trial, state in zip(trials, expected_states):
        first = FIRST_EPOCH[trial["settings"]["learning_rate"]]
        assert trial["epoch_scores"] == pytest.approx([first] if state == "pruned"
                                                      else [first, 2 * first])
    winner = max(completed)
    assert best.learning_rate == [r for r, s in FIRST_EPOCH.items() if s == winner][0]
    assert summary["held_out_score"] == pytest.approx(2 * winner)
    assert summary["pruned"] == expected_states.count("pruned") and summary["trials"] == 5
    assert printed[-1].startswith(f"chosen: learning_rate {best.learning_rate:g}, epochs 2")


def test_a_trial_at_its_last_epoch_counts_whatever_the_median(mrpc_folder, tmp_path):
    """One-epoch trials: stopping one after its only epoch would save nothing and lose its
    score, so every trial completes and the best of all five is chosen."""
    from nlp_tutorials.training.search import search_recipe

    space = space_file(tmp_path, {"learning_rate": sorted(FIRST_EPOCH), "epochs": [1]})
    config = search_config(mrpc_folder, tmp_path / "out", space, trials=5)
    calls = []
    best, summary = search_recipe(config, config.make_task(printer=None), None,
                                  scripted_training(calls), tmp_path / "out",
                                  printer=lambda *_: None)
    ranked = sorted(FIRST_EPOCH, key=FIRST_EPOCH.get)
    assert sorted(calls) == sorted(FIRST_EPOCH) and summary["pruned"] == 0
    assert best.learning_rate == ranked[-1] and summary["held_out_score"] == FIRST_EPOCH[ranked[-1]]
    # So that the check can fail: in the order they ran, a trial from the third on was below
    # the median of those before it after its only epoch, where the rule would have stopped it.
    scores = [FIRST_EPOCH[rate] for rate in calls]
    assert any(scores[i] < np.median(scores[:i]) for i in range(2, len(scores)))


def test_the_held_out_share_and_the_first_epoch_to_stop_after_are_the_flags(mrpc_folder,
                                                                           tmp_path):
    """--search-held-out 0.25 holds out a quarter of the 80 train pairs; --search-stop-from 2
    leaves every trial its first epoch and stops below the median after the second."""
    from nlp_tutorials.training.search import SEARCH_FILE, search_recipe

    space = space_file(tmp_path, {"learning_rate": sorted(FIRST_EPOCH), "epochs": [3]})
    config = search_config(mrpc_folder, tmp_path / "out", space, trials=5, search_held_out=0.25,
                           search_stop_from=2)
    task, held_out, printed = config.make_task(printer=None), [], []

    def train_once(trial_config, trial_task, *args, after_epoch, **kwargs):
        held_out.append(len(trial_task.examples("dev")))
        assert trial_config.search == 0 and trial_config.search_held_out == 0.1  # no search
        for epoch in range(1, trial_config.epochs + 1):
            after_epoch(epoch, FIRST_EPOCH[trial_config.learning_rate] * epoch)

    best, summary = search_recipe(config, task, None, train_once, tmp_path / "out",
                                  printer=printed.append)
    trials = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())["trials"]
    assert held_out == [20] * 5 and "each scored on 20 train examples" in printed[0]
    assert printed[0].endswith("none stopped before the end of epoch 2")
    stopped = [t for t in trials if t["state"] == "pruned"]
    assert stopped and all(len(t["epoch_scores"]) == 2 for t in stopped)
    assert (summary["held_out_share"], summary["stop_from"]) == (0.25, 2)
    # A search.json of another share is not mixed in.
    with pytest.raises(UserError, match="holds a search of another space, seed, held-out "):
        search_recipe(dataclasses.replace(config, search_held_out=0.2), task, None, train_once,
                      tmp_path / "out", printer=printed.append)


def test_a_larger_search_on_the_same_folder_adds_settings_not_tried_yet(mrpc_folder, tmp_path):
    """--search 2, then --search 4 on its output: the second run keeps the first two trials and
    runs two settings of the grid that neither of them had."""
    from nlp_tutorials.training.search import SEARCH_FILE, search_recipe

    space = space_file(tmp_path, {"learning_rate": sorted(FIRST_EPOCH), "epochs": [1]})
    first_calls, more_calls = [], []
    for trials, calls in ((2, first_calls), (4, more_calls)):
        config = search_config(mrpc_folder, tmp_path / "out", space, trials=trials)
        best, summary = search_recipe(config, config.make_task(printer=None), None,
                                      scripted_training(calls), tmp_path / "out",
                                      printer=lambda *_: None)
    saved = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())["trials"]
    assert len(first_calls) == 2 and len(more_calls) == 2 and summary["trials"] == 4
    assert [t["settings"]["learning_rate"] for t in saved] == first_calls + more_calls
    assert len(set(first_calls + more_calls)) == 4  # none tried twice
    assert best.learning_rate == max(first_calls + more_calls, key=FIRST_EPOCH.get)


@pytest.mark.parametrize("flags", [{"search_held_out": 0.25}, {"search_stop_from": 2}])
def test_the_search_flags_come_with_search_only(flags):
    flag, value = next(iter(flags.items()))
    with pytest.raises(UserError, match=f"^--{flag.replace('_', '-')} {value}: only with "
                                        f"--search TRIALS$"):
        FinetuneConfig(**flags)

@pytest.mark.slow
def test_search_keeps_every_trial_goes_on_after_ctrl_c_and_trains_the_best_on_all_of_train(
        mrpc_folder, tmp_path, monkeypatch):
    pytest.importorskip("optuna")
    from nlp_tutorials.training import finetuning
    from nlp_tutorials.training.finetuning import finetune

    space = space_file(tmp_path, {"learning_rate": [1e-3, 1e-5], "epochs": [1, 2],
                                  "batch_size": [16]})
    output = tmp_path / "model"
    real_once, calls = finetuning.finetune_once, []

    def interrupted_at_the_third_trial(config, task, *args, **kwargs):
        calls.append(config)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_once(config, task, *args, **kwargs)

    monkeypatch.setattr(finetuning, "finetune_once", interrupted_at_the_third_trial)
    with pytest.raises(Interrupted, match=r"^interrupted; 2 trial\(s\) kept in .*search.json: "
                                          r"the same command goes on from them$"):
        finetune(search_config(mrpc_folder, output, space, 3), printer=lambda *_: None)
    kept = json.loads((output / "search.json").read_text())["trials"]
    assert len(kept) == 2
    monkeypatch.setattr(finetuning, "finetune_once", real_once)
    printed = []
    result = finetune(search_config(mrpc_folder, output, space, 3), printer=printed.append)
    saved = json.loads((output / "search.json").read_text())
    assert saved["trials"][:2] == kept and len(saved["trials"]) == 3  # one more trial, not three
    assert saved["space"] == json.loads(open(space).read()) and saved["held_out_share"] == 0.1
    for trial in saved["trials"]:
        assert trial["settings"]["batch_size"] == 16 and trial["state"] == "complete"
        assert len(trial["epoch_scores"]) == trial["settings"]["epochs"]
        assert trial["score"] == max(trial["epoch_scores"])
    best = max(saved["trials"], key=lambda t: t["score"])
    results = json.loads((output / "results.json").read_text())
    assert results["search"]["settings"] == best["settings"] == result_settings(results)
    assert results["search"]["trials"] == 3 and results["search"]["pruned"] == 0
    assert len(result["runs"]) == 1 and result["runs"][0]["dev"] is not None
    # the one new trial's line
    assert sum(line.startswith("trial ") for line in without_progress(printed)) == 1
    assert any(line.startswith("chosen: ") for line in printed)


def result_settings(results: dict) -> dict:
    """The settings the final run used, as results.json's config records them."""
    return {name: results["config"][name] for name in ("learning_rate", "epochs", "batch_size")}


@pytest.mark.slow
def test_a_trial_below_the_median_after_an_epoch_is_stopped(mrpc_folder, tmp_path,
                                                             monkeypatch):
    """Held-out scores scripted by learning rate over real runs: the third trial's first epoch
    is worse than the first two trials' at that epoch, so it stops there."""
    pytest.importorskip("optuna")
    from nlp_tutorials.training import finetuning
    from nlp_tutorials.training.finetuning import finetune

    real_score, rates = finetuning.score_examples, []
    real_once = finetuning.finetune_once

    def once_noting_its_rate(config, *args, **kwargs):
        rates.append(config.learning_rate)
        return real_once(config, *args, **kwargs)

    def score_examples(head, task, examples, arrays, head_mask=None, display=None):
        scores = real_score(head, task, examples, arrays, head_mask, display)
        return {**scores, "accuracy": {1e-3: 0.8, 1e-4: 0.7, 1e-5: 0.1}[rates[-1]]}

    monkeypatch.setattr(finetuning, "score_examples", score_examples)
    monkeypatch.setattr(finetuning, "finetune_once", once_noting_its_rate)
    space = space_file(tmp_path, {"learning_rate": [1e-3, 1e-4, 1e-5], "epochs": [2]})
    monkeypatch.setattr("optuna.samplers.GridSampler",
                        lambda space, seed: FixedOrder([1e-3, 1e-4, 1e-5]))
    shutil.rmtree(tmp_path / "model", ignore_errors=True)
    finetune(search_config(mrpc_folder, tmp_path / "model", space, 3, batch_size=16),
             printer=lambda *_: None)
    trials = json.loads((tmp_path / "model" / "search.json").read_text())["trials"]
    assert [(t["settings"]["learning_rate"], t["state"], len(t["epoch_scores"]))
            for t in trials] == [(1e-3, "complete", 2), (1e-4, "complete", 2),
                                 (1e-5, "pruned", 1)]


class FixedOrder:
    """A stand-in for Optuna's sampler that takes the learning rates in the order given (and the
    first choice of anything else), so which trial comes last is known."""

    def __init__(self, rates):
        import optuna

        self.rates, self.base = list(rates), optuna.samplers.RandomSampler(seed=0)

    def __getattr__(self, name):
        return getattr(self.base, name)

    def infer_relative_search_space(self, study, trial):
        return {}

    def sample_relative(self, study, trial, search_space):
        return {}

    def sample_independent(self, study, trial, name, distribution):
        return self.rates[trial.number] if name == "learning_rate" else distribution.choices[0]


def test_a_recipe_flag_given_stays_fixed_and_the_search_varies_the_others(mrpc_folder,
                                                                         tmp_path):
    """--search 2 --epochs 1 over the paper's grid: every trial trains 1 epoch (the grid's
    2, 3, 4 never run), the final run too, and search.json and the summary record it."""
    from nlp_tutorials.training.search import SEARCH_FILE, search_recipe

    config = search_config(mrpc_folder, tmp_path / "out", "", trials=2, epochs=1)
    trial_epochs, printed = [], []

    def train_once(trial_config, trial_task, *args, after_epoch, **kwargs):
        trial_epochs.append(trial_config.epochs)
        after_epoch(1, FIRST_EPOCH.get(trial_config.learning_rate, 0.5))

    one_replica = types.SimpleNamespace(num_replicas_in_sync=1)  # the paper's batch sizes split
    best, summary = search_recipe(config, config.make_task(printer=None), one_replica,
                                  train_once, tmp_path / "out", printer=printed.append)
    assert trial_epochs == [1, 1] and best.epochs == 1
    assert printed[0].startswith("recipe search: 2 trials over learning_rate 5e-05, 4e-05, "
                                 "3e-05, 2e-05; batch_size 16, 32; fixed: epochs 1;")
    saved = json.loads((tmp_path / "out" / SEARCH_FILE).read_text())
    assert "epochs" not in saved["space"] and saved["fixed"] == summary["fixed"] == {"epochs": 1}
    assert all(set(t["settings"]) == {"learning_rate", "batch_size"} for t in saved["trials"])
    # The same folder searched again with another fixed value is not mixed in.
    with pytest.raises(UserError, match="another space, seed, held-out share or fixed"):
        search_recipe(search_config(mrpc_folder, tmp_path / "out", "", trials=2, epochs=2),
                      config.make_task(printer=None), one_replica, train_once, tmp_path / "out")


def test_every_recipe_flag_given_or_one_the_space_file_varies_is_refused(tmp_path):
    pytest.importorskip("optuna")
    result = run_main("bert", "finetune", "--search", "2", "--epochs", "1", "--batch-size", "8",
                      "--learning-rate", "1e-4")
    assert result.returncode == 2 and result.stderr == (
        "python -m nlp_tutorials.bert finetune: error: --search 2 with --epochs 1 "
        "--batch-size 8 --learning-rate 0.0001: nothing left to search; expected fewer of "
        "these flags, or --search-space FILE\n")
    space = space_file(tmp_path, {"epochs": [2, 3], "learning_rate": [1e-4]})
    result = run_main("bert", "finetune", "--search", "2", "--epochs", "1", "--search-space",
                      space)
    assert result.returncode == 2 and result.stderr == (
        f"python -m nlp_tutorials.bert finetune: error: --epochs 1: --search-space {space} "
        f"varies epochs too; expected the flag or the file's choices, not both\n")


def test_the_recipe_left_to_the_task_is_not_fixed():
    assert FinetuneConfig().recipe_given == ()
    given = FinetuneConfig(epochs=1, learning_rate=1e-4)
    assert given.recipe_given == ("epochs", "learning_rate")
    # A copy with the search's choices keeps what the user gave, not what the search chose.
    assert dataclasses.replace(given, batch_size=16).recipe_given == ("epochs", "learning_rate")


def test_each_trial_shows_its_progress_under_its_number(mrpc_folder, tmp_path):
    """A trial prints nothing of its own (its scores are the search's line), but its progress
    goes to the search's printer, each trial's titled with its number."""
    from nlp_tutorials.training.search import search_recipe

    space = space_file(tmp_path, {"learning_rate": [1e-5, 2e-5], "epochs": [1]})
    config = search_config(mrpc_folder, tmp_path / "out", space, trials=2)
    printed = []

    def train_once(trial_config, trial_task, seed, strategy, printer, after_epoch, display):
        printer("a trial's own line")
        progress = display.named("epoch 1/1").start(1)
        progress.update(1)
        after_epoch(1, FIRST_EPOCH[trial_config.learning_rate])

    search_recipe(config, config.make_task(printer=None), None, train_once, tmp_path / "out",
                  printer=printed.append)
    shown = [line.split(" - ")[0] for line in printed if " - " in line]
    assert shown == ["trial 1/2 epoch 1/1: step 1/1", "trial 2/2 epoch 1/1: step 1/1"]
    assert "a trial's own line" not in printed
