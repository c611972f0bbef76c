"""``finetune --search TRIALS``: the recipe chosen by trials before the run that counts.

The BERT paper chose each task's learning rate, batch size and epochs from a small grid on dev.
Here every trial trains on train less a share held out for the search (a tenth unless
``--search-held-out`` says otherwise; drawn once, from the run's seed) and is scored on that
share, so dev keeps choosing the final run's epoch and test is scored once, by the final run
alone. The space is a grid of declared choices, less the settings given on the command line
(``--epochs 1`` keeps every trial at one epoch: the search varies the others); Optuna's grid
sampler takes its settings in a seeded random order, none twice (a repeat would cost a whole
trial), and its median pruner stops a trial whose held-out score after an epoch before its last
(from the first on, or from ``--search-stop-from``) is below the median of the trials before it
at that epoch. Every trial goes to ``search.json`` as it ends, so a search killed or stopped
with Ctrl-C goes on from the trials it has when run again. The best trial's settings then
fine-tune on the whole of train (:func:`nlp_tutorials.training.finetuning.finetune`).

Why Optuna rather than KerasTuner: docs/tasks.md ("Searching the recipe").
"""
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.json_files import read_json, read_json_object
from nlp_tutorials.system.outputs import Interrupted
from nlp_tutorials.system.progress import ProgressDisplay
from nlp_tutorials.system.settings import (default_of, flag_of, non_negative_int, open_share,
                                           positive_int, setting)
from nlp_tutorials.tasks.base import reported
from nlp_tutorials.training.distribute import check_batch_size

SEARCH_FILE = "search.json"
# The BERT paper's grid (appendix A.3), searched when no --search-space is given.
PAPER_GRID = {"learning_rate": [5e-5, 4e-5, 3e-5, 2e-5], "batch_size": [16, 32],
              "epochs": [2, 3, 4]}
# What a search may choose, and the type of its values.
SEARCHABLE = {"learning_rate": float, "batch_size": int, "epochs": int,
              "warmup_fraction": float, "weight_decay": float, "pooling": str}


def search_settings() -> dict:
    """``finetune``'s search fields, declared once: {field name: its setting}."""
    return {
        "search": setting(0, "choose the recipe first by this many trials, each trained on train "
                             "less a held-out part and scored on that part (never on dev or "
                             "test); the best then trains on all of train. --epochs, "
                             "--batch-size or --learning-rate given stay fixed. Needs Optuna: "
                             "pip install 'nlp_tutorials[search]'", kind=non_negative_int,
                          metavar="TRIALS", default_help="0: no search"),
        "search_space": setting("", "with --search: a JSON object of the choices to try, "
                                    "{{setting: [values]}}, among " + ", ".join(SEARCHABLE),
                                metavar="FILE",
                                default_help="the BERT paper's grid: "
                                + describe_space(PAPER_GRID)),
        # 0.1 and 1: what the search tables of docs/results.md were measured with.
        "search_held_out": setting(0.1, "with --search: the share of train held out to score "
                                        "the trials", kind=open_share, metavar="SHARE"),
        "search_stop_from": setting(1, "with --search: the first epoch after which a trial "
                                       "scoring below the median of the trials before it at "
                                       "that epoch is stopped", kind=positive_int,
                                    metavar="EPOCH"),
    }


def search_defaults(config) -> dict:
    """The search fields of ``config``'s class at their defaults: no search."""
    return {name: default_of(config, name) for name in search_settings()}


def check_search_flags(config) -> None:
    """The search's flags other than --search come only with it."""
    if not config.search:
        for name, default in search_defaults(config).items():
            if getattr(config, name) != default:
                raise UserError(f"{flag_of(config, name)} {getattr(config, name)}: only with "
                                f"--search TRIALS")


def import_optuna():
    """The optuna module, or one line saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise UserError("--search needs Optuna: pip install 'nlp_tutorials[search]' "
                        "(or pip install optuna)") from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # the trial lines say what happens
    return optuna


def read_space(path: str) -> dict:
    """The search space in the JSON file ``path`` ({setting: [values]}); "" gives
    :data:`PAPER_GRID`. A bad file is one line naming it and what is wrong."""
    if not path:
        return dict(PAPER_GRID)
    where = f"--search-space {path}"
    if not Path(path).exists():
        raise UserError(f"{where}: no such file")
    try:
        space = read_json(path)
    except UserError as err:
        raise UserError(f"--search-space {err}") from None
    if not isinstance(space, dict) or not space:
        raise UserError(f"{where}: expected a JSON object {{setting: [values]}}, not empty")
    for name, values in space.items():
        if name not in SEARCHABLE:
            raise UserError(f"{where}: {name!r} cannot be searched; expected some of "
                            f"{', '.join(SEARCHABLE)}")
        kind = SEARCHABLE[name]
        if not isinstance(values, list) or not values or not all(
                isinstance(v, kind) and not isinstance(v, bool)
                or kind is float and isinstance(v, int) and not isinstance(v, bool)
                for v in values):
            raise UserError(f"{where}: {name}: expected a non-empty list of "
                            f"{kind.__name__} values, got {json.dumps(values)}")
    return space


def fixed_settings(config) -> dict:
    """The recipe settings ``config`` was given (``--epochs 1``), which a search keeps as they
    are: {name: value}."""
    return {name: getattr(config, name) for name in config.recipe_given}


def search_space(config) -> dict:
    """What the search varies: ``--search-space``'s choices (the BERT paper's grid without one)
    less the settings given on the command line, which stay fixed. A file that varies a setting
    also given, or nothing left to vary, is refused in one line."""
    space, fixed = read_space(config.search_space), fixed_settings(config)
    given = " ".join(f"{flag_of(config, name)} {setting_text(value)}"
                     for name, value in fixed.items())
    varied_too = [name for name in fixed if config.search_space and name in space]
    if varied_too:
        raise UserError(f"{given}: --search-space {config.search_space} varies "
                        f"{', '.join(varied_too)} too; expected the flag or the file's "
                        f"choices, not both")
    space = {name: values for name, values in space.items() if name not in fixed}
    if not space:
        raise UserError(f"--search {config.search} with {given}: nothing left to search; "
                        f"expected fewer of these flags, or --search-space FILE")
    return space


def held_out_task(task, share: float, seed: int):
    """A copy of ``task`` whose train is its train less a random ``share`` (at least one
    example), whose dev is that share and which has no test: what the trials read."""
    train = task.examples("train")
    order = np.random.default_rng(seed).permutation(len(train))
    cut = max(1, round(share * len(train)))
    splits = {"train": [train[i] for i in sorted(order[cut:])],
              "dev": [train[i] for i in sorted(order[:cut])], "test": []}
    return task.replace(examples_given=splits)  # the trials read these splits, nothing else


def search_recipe(config, task, strategy, train_once, output_dir, printer=print) -> tuple:
    """Run ``config.search`` trials (less those ``output_dir``/search.json holds already) on
    ``task``, each one ``train_once`` (:func:`~nlp_tutorials.training.finetuning.finetune_once`);
    return (``config`` with the best trial's settings, what results.json keeps of the search)."""
    optuna = import_optuna()
    space, fixed = search_space(config), fixed_settings(config)
    for batch_size in space.get("batch_size", ()):  # each must split across the replicas
        check_batch_size(batch_size, strategy)
    log = SearchLog(Path(output_dir) / SEARCH_FILE, space, config.seed,
                    config.search_held_out, fixed)
    score_key = task.metrics[0][0]
    study = optuna.create_study(
        direction="maximize", sampler=optuna.samplers.GridSampler(space, seed=config.seed),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=2,
                                           n_warmup_steps=config.search_stop_from))
    distributions = {name: optuna.distributions.CategoricalDistribution(values)
                     for name, values in space.items()}
    for done in log.trials:
        study.add_trial(recorded_trial(optuna, done, distributions))
    trial_task = held_out_task(task, config.search_held_out, config.seed)
    total = min(config.search, math.prod(len(values) for values in space.values()))
    printer(f"recipe search: {total} trials over {describe_space(space)}"
            + (f" (every setting of it: --search {config.search} asked for more)"
               if total < config.search else "")
            + (f"; fixed: {describe_settings(fixed)}" if fixed else "")
            + f"; each scored on {len(trial_task.examples('dev')):,} train examples held out "
              f"for it" + (f", none stopped before the end of epoch {config.search_stop_from}"
                           if config.search_stop_from > 1 else "")
            + (f"; {len(log.trials)} done before" if log.trials else ""))

    def objective(trial):
        settings = {name: trial.suggest_categorical(name, values)
                    for name, values in space.items()}
        shown = ProgressDisplay(printer, f"trial {len(log.trials) + 1}/{total}")
        record = run_trial(optuna, trial, settings, config, trial_task, strategy, train_once,
                           shown)
        log.add(record)
        printer(trial_line(len(log.trials), total, record, score_key))
        if record["state"] == "pruned":
            raise optuna.TrialPruned()
        return record["score"]

    try:
        study.optimize(objective, n_trials=total - len(log.trials))
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted; {len(log.trials)} trial(s) kept in {log.path}: "
                          f"the same command goes on from them") from None
    return chosen(config, log, score_key, printer)


def run_trial(optuna, trial, settings, config, trial_task, strategy, train_once,
              display: ProgressDisplay) -> dict:
    """Fine-tune one trial's ``settings`` on the held-out split, its progress on ``display``;
    its record for search.json."""
    scores, start = [], time.monotonic()

    trial_config = dataclasses.replace(config, **settings, **search_defaults(config), seeds=1)

    def after_epoch(epoch, score):
        scores.append(float(score))
        trial.report(score, epoch)
        # After its last epoch a trial has cost all it will cost: its score counts, whatever
        # the median says.
        if epoch < trial_config.epochs and trial.should_prune():
            raise optuna.TrialPruned()

    try:
        train_once(trial_config, trial_task, config.seed, strategy,
                   printer=lambda *_: None, after_epoch=after_epoch, display=display)
        state = "complete"
    except optuna.TrialPruned:
        state = "pruned"
    best = int(np.argmax(scores))
    return {"number": trial.number, "settings": settings, "state": state,
            "score": scores[best], "epoch": best + 1, "epoch_scores": scores,
            "seconds": round(time.monotonic() - start, 1)}


def recorded_trial(optuna, record: dict, distributions: dict):
    """A trial of search.json as Optuna's study keeps one, its per-epoch scores included."""
    complete = record["state"] == "complete"
    return optuna.trial.create_trial(
        params=record["settings"], distributions=distributions,
        value=record["score"] if complete else None,
        state=optuna.trial.TrialState.COMPLETE if complete else optuna.trial.TrialState.PRUNED,
        intermediate_values={epoch: score
                             for epoch, score in enumerate(record["epoch_scores"], start=1)})


class SearchLog:
    """``search.json``: the space, the seed, the held-out share, the settings fixed by flags
    and every trial so far, written whole after each trial. One made with another of those
    four is refused rather than mixed in."""

    def __init__(self, path: Path, space: dict, seed: int, held_out_share: float,
                 fixed: dict):
        self.path, self.head = path, {"space": space, "seed": seed,
                                      "held_out_share": held_out_share, "fixed": fixed}
        self.trials = []
        if path.is_file():
            saved = {"fixed": {}, **read_json_object(path)}  # older files fixed nothing
            if {key: saved.get(key) for key in self.head} != self.head:
                raise UserError(f"{path} holds a search of another space, seed, held-out "
                                f"share or fixed settings; remove it, or choose another "
                                f"--output-dir")
            self.trials = saved["trials"]

    def add(self, record: dict) -> None:
        self.trials.append(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps({**self.head, "trials": self.trials},
                                                indent=2) + "\n")


def chosen(config, log: SearchLog, score_key: str, printer) -> tuple:
    """(``config`` with the best complete trial's settings, the search's summary), after
    printing every trial best first (scores as the task's ``score_key`` is reported)."""
    complete = [t for t in log.trials if t["state"] == "complete"]
    if not complete:
        raise UserError(f"no trial of {log.path} ran to its end; expected --search of at "
                        f"least 1 trial that is not stopped")
    ranked = sorted(log.trials, key=lambda t: (t["state"] != "complete", -t["score"]))
    printer("trials, best first:")
    for record in ranked:
        printer("  " + trial_line(record["number"] + 1, len(log.trials), record, score_key))
    best = ranked[0]
    printer(f"chosen: {describe_settings(best['settings'])}; now on all of train")
    summary = {"settings": best["settings"], "held_out_score": best["score"],
               "trials": len(log.trials), "pruned": len(log.trials) - len(complete),
               "seconds": round(sum(t["seconds"] for t in log.trials), 1),
               "held_out_share": config.search_held_out, "stop_from": config.search_stop_from,
               "fixed": log.head["fixed"]}
    return dataclasses.replace(config, **best["settings"]), summary


def setting_text(value) -> str:
    """A setting's value as the lines show it: 3e-05 rather than 3.0000000000000004e-05."""
    return f"{value:g}" if isinstance(value, float) else str(value)


def describe_settings(settings: dict) -> str:
    return ", ".join(f"{name} {setting_text(value)}" for name, value in settings.items())


def describe_space(space: dict) -> str:
    return "; ".join(f"{name} {', '.join(setting_text(v) for v in values)}"
                     for name, values in space.items())


def trial_line(number: int, total: int, record: dict, score_key: str) -> str:
    """``trial 3/12: learning_rate 3e-05, batch_size 16, epochs 3: held-out 81.2% at epoch 2
    (41 s)``, or ``... stopped after epoch 1: 51.2% ...``: the score as the task's
    ``score_key`` is reported everywhere (:func:`~nlp_tutorials.tasks.base.reported`)."""
    if record["state"] == "complete":
        outcome = f"held-out {reported(score_key, record['score'])} at epoch {record['epoch']}"
    else:
        outcome = (f"stopped after epoch {len(record['epoch_scores'])}: "
                   f"{reported(score_key, record['epoch_scores'][-1])}")
    return (f"trial {number}/{total}: {describe_settings(record['settings'])}: {outcome} "
            f"({record['seconds']:.0f} s)")
