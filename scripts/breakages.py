"""The deliberate breakages of docs/contributing.md ("How the suite is kept honest"), tried for real.

Each entry of BREAKAGES is a row of that table: one text change to one file of the package (the
rows of ``tests/conftest.py`` and ``tests/shared_folders.py`` change those test helpers
instead), and the tests that must fail under it. A row whose breakage reads "A; or B" is one
entry per alternative. For each row chosen, the repository is copied to a temporary folder
(without .git, .venv, visual/ and caches), the change is made there, and pytest runs the named
tests in that copy, with the copy first on PYTHONPATH and as the working directory, so that
the copy's package is the one imported (checked before every run: the venv's editable install
points at this tree).

Run from the repository root, with the project's virtual environment active:

    python scripts/breakages.py                  # every row (slow: some rows train models)
    python scripts/breakages.py 3 masking        # rows by index, or by a piece of their name
    python scripts/breakages.py --list           # the rows, numbered
    python scripts/breakages.py --unbroken 3     # row 3's tests on an unchanged copy

It prints one line per row, caught or NOT CAUGHT, then each named test's outcome, and exits 1
when a row is not caught. With ``--unbroken`` the tests must all pass instead, so that a
failure under a breakage is the breakage's doing. An ``old`` text that is not found exactly
once in its file stops the script before anything runs: the code has drifted from the table.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEFT_OUT = (".git", ".venv", "visual", "__pycache__", ".pytest_cache", ".hypothesis",
            "*.egg-info", "build", "dist", ".coverage*")
RUN_TIMEOUT = 3600  # seconds for one row's tests


@dataclass(frozen=True)
class Breakage:
    name: str  # "where: breakage", in the table's words
    path: str  # the file changed, from the repository root
    old: str  # text found exactly once in it
    new: str  # what replaces it
    fails: tuple  # pytest node ids that must fail


def tests(file: str, *names: str) -> tuple:
    """Node ids of tests ``names`` in tests/``file``."""
    return tuple(f"tests/{file}::{name}" for name in names)


PKG = "nlp_tutorials/"
EXPLORER, VISUAL = PKG + "analysis/explorer/__init__.py", PKG + "analysis/visual.py"
JS, CONFTEST = PKG + "analysis/explorer/explorer.js", "tests/conftest.py"
BERTOLOGY, TRAINABLE = PKG + "analysis/bertology.py", PKG + "models/trainable.py"
MASKING, GPT = PKG + "text/masking.py", PKG + "models/gpt.py"
HUGGINGFACE, PRUNING_CODE = PKG + "models/huggingface.py", PKG + "models/pruning.py"
SHARDS, CORPUS = PKG + "sources/shards.py", PKG + "sources/corpus.py"
SHARD_BATCHES = PKG + "sources/shard_batches.py"
EXPLORE = "analysis/test_explorer.py"
BROWSER = "analysis/test_explorer_browser.py"
RULE = "analysis/test_browser_rule.py"
CONTINUED, CORPUS_TESTS = "training/test_continued.py", "sources/test_corpus.py"
PRUNING, BERTOLOGY_TESTS = "models/test_pruning.py", "analysis/test_bertology.py"
TRAINABLE_TESTS = "models/test_trainable.py"
DATE_TEST = tests(EXPLORE, "test_explore_the_date_transformer")
HEAD_VIEW = "test_head_view_draws_the_pickle_weights"
SAVES = "test_saves_png_and_svg_of_the_same_drawing"
MODEL_PNG = "test_saved_png_of_the_model_view_holds_every_heads_heatmap"
ITERATIVE = "test_iterative_choice_measures_again_with_the_chosen_heads_masked"
STUDY = "test_masking_study_masks_least_important_first_and_averages_the_random_orders"
FIT_STEP = "test_one_fit_step_is_one_step_of_the_training_loop_and_reports_its_loss"
RANDOM_ORDER = "analysis/bertology: the random-order score "

BREAKAGES = (
    Breakage("analysis/explorer: `explore` on a pre-training folder draws a fresh model of the "
             "saved config", EXPLORER,
             "    model, tokenizer = restore_model(model_dir, model_name)\n",
             "    model, tokenizer = restore_model(model_dir, model_name)\n"
             "    model = type(model)(model.config)\n",
             tests(EXPLORE, "test_explore_a_pretraining_folder")),
    Breakage("analysis/explorer: `explore` on the date model draws a fresh Transformer", EXPLORER,
             "        return collect_date_attention(load(model_dir), n)",
             "        model = load(model_dir)\n"
             "        return collect_date_attention(type(model)(model.config), n)", DATE_TEST),
    Breakage("analysis/explorer: `explore` on a fine-tuned folder draws a fresh backbone",
             EXPLORER, "    found = attention_vectors(head.backbone, ",
             "    found = attention_vectors(type(head.backbone)(head.backbone.config), ",
             tests(EXPLORE, "test_explore_a_fine_tuned_folder_shows_its_backbone")),
    Breakage("analysis/visual: the date decoder is fed the target without `[BOS]`, with `[EOS]`",
             VISUAL, "dates.encode_targets(held_out)[:, :-1]",
             "dates.encode_targets(held_out)[:, 1:]", DATE_TEST),
    Breakage("analysis/visual: the cross-attention's heads come out in reverse order", VISUAL,
             '    found = attention_vectors(model, {"src_ids": tf.constant(src), '
             '"tgt_ids": tf.constant(tgt)})\n',
             '    found = attention_vectors(model, {"src_ids": tf.constant(src), '
             '"tgt_ids": tf.constant(tgt)})\n'
             '    for kind in found:\n'
             '        found[kind]["encoder_decoder"] = [x[:, ::-1] for x in '
             'found[kind]["encoder_decoder"]]\n', DATE_TEST),
    Breakage("explorer.js: *Save PNG* writes a blank canvas of the right size", JS,
             '  on("save-png", "click", () => canvas.toBlob(',
             '  on("save-png", "click", () => Object.assign(document.createElement("canvas"), '
             '{ width: canvas.width, height: canvas.height }).toBlob(',
             tests(BROWSER, SAVES, MODEL_PNG)),
    Breakage("explorer.js: model-view pictures on a linear, not square-root, scale", JS,
             "const t = Math.sqrt(byte / 255);", "const t = byte / 255;",
             tests(BROWSER, MODEL_PNG)),
    Breakage("explorer.js: each model-view cell shows the next head's picture", JS,
             "picture: pictures[layer * DATA.heads + head] });",
             "picture: pictures[layer * DATA.heads + (head + 1) % DATA.heads] });",
             tests(BROWSER, MODEL_PNG)),
    Breakage("explorer.js: the canvas draws no lines (the page's numbers still list them)", JS,
             "  lines(ctx, item) {\n", "  lines(ctx, item) {\n    return;\n",
             tests(BROWSER, HEAD_VIEW, SAVES)),
    Breakage("explorer.js: every head's lines drawn in head 0's colour", JS,
             'kind: "lines", points, colour: headColour(head),',
             'kind: "lines", points, colour: headColour(0),', tests(BROWSER, HEAD_VIEW)),
    Breakage("tests/conftest.py: browser tests skip under `CI=true`", CONFTEST,
             "    if missing and on_ci():", "    if missing and False:",
             tests(RULE, "test_without_chromium_a_ci_run_fails")),
    Breakage("tests/conftest.py: every run taken for a CI run", CONFTEST,
             '    return os.environ.get("CI", "").lower() == "true"', "    return True",
             tests(RULE, "test_without_chromium_a_developer_run_skips_and_says_why")),
    Breakage("tests/shared_folders.py: no lock around a shared folder's build",
             "tests/shared_folders.py", "            fcntl.flock(lock, fcntl.LOCK_EX)\n", "",
             tests("test_shared_folders.py",
                   "test_callers_together_get_one_build_and_a_write_is_named")),
    Breakage("tests/shared_folders.py: a write into a shared folder goes unseen",
             "tests/shared_folders.py", "            if paths:\n", "            if False:\n",
             tests("test_shared_folders.py",
                   "test_callers_together_get_one_build_and_a_write_is_named")),
    Breakage("training/loop: `train_steps` returns before its first step",
             PKG + "training/loop.py", "    total = total or last\n",
             "    return False\n    total = total or last\n",
             tests(CONTINUED, "test_continued_on_a_corpus")),
    Breakage("models/trainable: gradients computed, none applied", TRAINABLE,
             "        self.optimizer.apply_gradients(\n            [(grad, var)",
             "        (\n            [(grad, var)", tests(CONTINUED, "test_continued_on_a_corpus")),
    Breakage("training/continued: the warm-up freezes the heads instead of the encoder",
             PKG + "training/continued.py", "if layer.name not in HEAD_LAYERS]",
             "if layer.name in HEAD_LAYERS]",
             tests(CONTINUED, "test_continued_on_a_corpus",
                   "test_warm_up_moves_the_heads_and_leaves_the_encoder")),
    Breakage("text/masking: every chosen token becomes `[MASK]`", MASKING,
             "    replacement = np.where(draw < 0.8, mask_id, np.where(draw < 0.9, random_ids, "
             "original))", "    replacement = np.full_like(original, mask_id)",
             tests(CORPUS_TESTS, "test_epochs_mask_afresh_and_are_reproducible",
                   "test_training_batches_are_masked_afresh")),
    Breakage("text/masking: 80% `[MASK]`, 20% random, none kept", MASKING,
             "np.where(draw < 0.9, random_ids, original)", "random_ids",
             tests(CORPUS_TESTS, "test_epochs_mask_afresh_and_are_reproducible")),
    Breakage("sources/shard_batches: training batches come out unmasked", SHARD_BATCHES,
             '        return (masked["input_ids"], masked["mlm_positions"]',
             '        return (input_ids.astype(np.int32), masked["mlm_positions"]',
             tests(CORPUS_TESTS, "test_training_batches_are_masked_afresh")),
    Breakage("sources/shards: every pair written to the first shard, `corpus.json` counting as "
             "before", SHARDS, "writers[i % shards].write(", "writers[0].write(",
             tests(CORPUS_TESTS, "test_shards_hold_the_corpus_pairs")),
    Breakage("sources/corpus: an IsNext second segment repeats the first", CORPUS,
             "second, label = np.concatenate(chunk[a_end:]), IS_NEXT",
             "second, label = first.copy(), IS_NEXT",
             tests(CORPUS_TESTS, "test_shards_hold_the_corpus_pairs",
                   "test_pairs_follow_bert_rules")),
    Breakage("sources/corpus: IsNext and NotNext labels swapped", CORPUS,
             "            yield first, second, label\n",
             "            yield first, second, NOT_NEXT if label == IS_NEXT else IS_NEXT\n",
             tests(CORPUS_TESTS, "test_shards_hold_the_corpus_pairs")),
    Breakage("models/huggingface: `prune_heads` returns the pruned copy again (HuggingFace's "
             "name, not its in-place contract)", HUGGINGFACE,
             "        raise NotImplementedError(\n            f\"prune_heads:",
             "        return self.with_heads_pruned(heads_to_prune)\n"
             "        raise NotImplementedError(\n            f\"prune_heads:",
             tests(PRUNING, "test_prune_heads_raises_and_names_the_method_that_returns_a_"
                   "pruned_copy")),
    Breakage("models/pruning: `with_heads_pruned` returns the model itself, unpruned",
             PRUNING_CODE,
             "        return pruned_copy(self, heads_to_prune)", "        return self",
             tests(PRUNING, "test_pruned_heads_compute_what_masked_heads_do_with_smaller_weights",
                   "test_pruned_models_save_and_load_with_their_heads")),
    Breakage("analysis/bertology: heads sorted most important first", BERTOLOGY,
             '    for flat in np.argsort(importance.ravel(), kind="stable"):',
             '    for flat in np.argsort(-importance.ravel(), kind="stable"):',
             tests(BERTOLOGY_TESTS,
                   "test_heads_to_prune_takes_the_least_important_and_leaves_each_layer_one",
                   "test_iterative_choice_prunes_the_share_asked_for", ITERATIVE)),
    Breakage("analysis/bertology: the iterative choice takes the most important heads",
             BERTOLOGY, "heads_to_prune(measured, reached, kept)",
             "heads_to_prune(-measured, reached, kept)",
             tests(BERTOLOGY_TESTS, "test_iterative_choice_prunes_the_share_asked_for",
                   ITERATIVE)),
    Breakage("analysis/bertology: importance measured once, not again after each pruning step",
             BERTOLOGY,
             "    while reached < share:\n        reached = min(share, reached + step)\n"
             "        measured = importance(head, arrays, mask, display and display.named(\n",
             "    measured = importance(head, arrays, mask, display and display.named(\n"
             "            f\"pruning to {reached:.0%}\"))\n"
             "    while reached < share:\n        reached = min(share, reached + step)\n"
             "        (display and display.named(\n",
             tests(BERTOLOGY_TESTS, ITERATIVE)),
    Breakage("analysis/bertology: heads pruned before are chosen again", BERTOLOGY,
             "            if (chosen := [h for h in range(heads) if not mask[layer, h]\n"
             "                           and (layer, h) not in already])}",
             "            if (chosen := [h for h in range(heads) if not mask[layer, h]])}",
             tests(BERTOLOGY_TESTS, ITERATIVE)),
    Breakage("analysis/bertology: the masking study masks the most important heads first",
             BERTOLOGY, '    least_first = np.argsort(importance.ravel(), kind="stable")',
             '    least_first = np.argsort(-importance.ravel(), kind="stable")',
             tests(BERTOLOGY_TESTS, STUDY)),
    Breakage(RANDOM_ORDER + "is one order's, not the mean", BERTOLOGY,
             "float(np.mean([s[name] for s in scored[1:]]))", "float(scored[1][name])",
             tests(BERTOLOGY_TESTS, STUDY)),
    Breakage(RANDOM_ORDER + "includes the importance order", BERTOLOGY,
             "for s in scored[1:]]", "for s in scored]", tests(BERTOLOGY_TESTS, STUDY)),
    Breakage(RANDOM_ORDER + "comes from random orders that are the importance order", BERTOLOGY,
             "    randoms = [rng.permutation(layers * heads) for _ in range(random_orders)]",
             "    randoms = [least_first for _ in range(random_orders)]",
             tests(BERTOLOGY_TESTS, STUDY)),
    Breakage(RANDOM_ORDER + "comes from random orders drawn anew at each share", BERTOLOGY,
             "        scored = []\n",
             "        scored = []\n"
             "        randoms = [rng.permutation(layers * heads) for _ in range(random_orders)]\n",
             tests(BERTOLOGY_TESTS, STUDY)),
    Breakage("analysis/bertology: a share's head count truncated instead of rounded", BERTOLOGY,
             "mask_of(order[:round(share * layers * heads)]",
             "mask_of(order[:int(share * layers * heads)]", tests(BERTOLOGY_TESTS, STUDY)),
    Breakage("models/trainable: `fit`'s step runs with `training=False`", TRAINABLE,
             "return self._track(self.step(data, training=True))",
             "return self._track(self.step(data, training=False))",
             tests(TRAINABLE_TESTS, FIT_STEP)),
    Breakage("models/trainable: `fit`'s step runs twice", TRAINABLE,
             "        return self._track(self.step(data, training=True))",
             "        self.step(data, training=True)\n"
             "        return self._track(self.step(data, training=True))",
             tests(TRAINABLE_TESTS, FIT_STEP)),
    Breakage("models/trainable: the reported metrics doubled", TRAINABLE,
             "means[name].update_state(value * replicas)",
             "means[name].update_state(2 * value * replicas)",
             tests(TRAINABLE_TESTS, FIT_STEP, "test_evaluate_averages_step_over_the_batches")),
    Breakage("models/gpt: the next-sentence weight 0.5 instead of 0.2", GPT,
             "NSP_WEIGHT = 0.2", "NSP_WEIGHT = 0.5", tests(TRAINABLE_TESTS, FIT_STEP)),
    Breakage("tasks/answers: SQuAD's normalisation keeps the articles a/an/the",
             PKG + "tasks/answers.py", '    text = _ARTICLES.sub(" ", text)\n', "",
             tests("tasks/test_answers.py",
                   "test_normalisation_lowers_drops_punctuation_articles_and_extra_spaces")),
    Breakage("tasks/entities: an `I-` tag continues an entity of another type",
             PKG + "tasks/entities.py",
             "continues = prefix == INSIDE and start is not None and entity_type == current",
             "continues = prefix == INSIDE and start is not None",
             tests("tasks/test_entities.py", "test_a_change_of_type_or_a_stray_i_starts_an_"
                   "entity_as_conlleval_reads_it")),
    Breakage("tasks/metrics: Matthews correlation's sign turned over", PKG + "tasks/metrics.py",
             "return float(covariance / np.sqrt(spread)) if spread > 0 else 0.0",
             "return float(-covariance / np.sqrt(spread)) if spread > 0 else 0.0",
             tests("tasks/test_glue_metrics.py", "test_matthews_hand_worked")),
    Breakage("tasks/glue: GLUE's TSVs read with CSV quoting on (rows run together)",
             PKG + "tasks/glue.py",
             '    return [(number, line.split("\\t")) for number, line in numbered_lines(path)]',
             "    import csv\n\n    lines = list(numbered_lines(path))\n"
             '    rows = csv.reader([line for _, line in lines], delimiter="\\t")\n'
             "    return [(number, fields) for (number, _), fields in zip(lines, rows)]",
             tests("tasks/test_glue.py",
                   "test_each_task_reads_every_line_of_its_files_as_one_example")),
    Breakage("tasks/shapes: a class prediction takes the arg-min", PKG + "tasks/shapes.py",
             "ClassPrediction(int(np.argmax(p)), p)", "ClassPrediction(int(np.argmin(p)), p)",
             tests("training/test_task_runs.py",
                   "test_evaluate_scores_and_writes_what_the_head_predicts")),
    Breakage("training/finetuning: a fine-tuned start hands on its encoder, not its head",
             PKG + "training/finetuning.py",
             "for weight, value in zip(mine, theirs):\n            weight.assign(value)",
             "for weight, value in zip(mine, theirs):\n            pass",
             tests("training/test_finetuned_start.py",
                   "test_a_span_head_goes_on_to_squad2_with_its_encoder")),
    Breakage("tasks/squad_split: `--without` leaves every article in", PKG + "tasks/squad_split.py",
             "kept = [i for i, title in enumerate(titles) if title not in without]",
             "kept = list(range(len(titles)))",
             tests("tasks/test_squad_split.py",
                   "test_articles_titled_as_in_another_file_are_left_out_before_the_split")),
    Breakage("training/search: a trial is stopped after its last epoch", PKG + "training/search.py",
             "if epoch < trial_config.epochs and trial.should_prune():",
             "if trial.should_prune():",
             tests("training/test_search.py",
                   "test_a_trial_at_its_last_epoch_counts_whatever_the_median")),
    Breakage("training/search: `--search-held-out` ignored, a tenth held out",
             PKG + "training/search.py",
             "trial_task = held_out_task(task, config.search_held_out, config.seed)",
             "trial_task = held_out_task(task, 0.1, config.seed)",
             tests("training/test_search.py", "test_the_held_out_share_and_the_first_epoch_to_"
                   "stop_after_are_the_flags")),
    Breakage("training/search: `--search-stop-from` ignored, trials stopped after epoch 1",
             PKG + "training/search.py", "n_warmup_steps=config.search_stop_from))",
             "n_warmup_steps=0))",
             tests("training/test_search.py", "test_the_held_out_share_and_the_first_epoch_to_"
                   "stop_after_are_the_flags")),
    Breakage("system/json_files: JSON nested any depth Python's parser takes",
             PKG + "system/json_files.py",
             "    if depth.size and depth.max() > MAX_JSON_DEPTH:", "    if False:",
             tests("system/test_files.py", "test_bad_json_names_the_file_in_one_line")),
    Breakage("system/json_files: an escaped lone surrogate taken as text",
             PKG + "system/json_files.py", "    _check_surrogates(text, where, first_line)\n",
             "", tests("system/test_files.py", "test_bad_json_names_the_file_in_one_line")),
    Breakage("system/json_files: JSON lines split where `str.splitlines` splits",
             PKG + "system/json_files.py", 'read_utf8(path).split("\\n")',
             "read_utf8(path).splitlines()",
             tests("system/test_files.py", "test_json_lines_end_at_newlines_only")),
    Breakage("system/safe_pickle: a pickle's lengths taken on trust", PKG + "system/safe_pickle.py",
             "    _check_sizes(stream)\n", "",
             tests("system/test_safe_files.py",
                   "test_sizes_a_pickle_claims_are_checked_before_it_is_built[bytearray]")),
    Breakage("sources/records: a record's length read before it is checked against the file",
             PKG + "sources/records.py",
             "        if length + CHECK_BYTES > os.fstat(handle.fileno()).st_size - len(header):",
             "        if False:",
             tests("sources/test_shard_checks.py",
                   "test_a_shard_that_is_no_tfrecord_file_is_named")),
    Breakage("sources/corpus: a lone `\\r` ends no line", CORPUS,
             'LINE_END = re.compile(rb"\\r\\n|\\r|\\n")', 'LINE_END = re.compile(rb"\\r?\\n")',
             tests(CORPUS_TESTS, "test_lines_end_at_each_newline_of_every_system",
                   "test_a_corpus_with_old_mac_line_ends_holds_its_documents")),
    Breakage("models/config: sizes unbounded above", PKG + "models/config.py",
             "check_integer(getattr(self, name), name, source, 1, SIZE_LIMITS[name])",
             "check_integer(getattr(self, name), name, source, 1)",
             tests("models/test_config_fields.py", "test_each_bad_field_is_named_with_its_file")),
    Breakage("models/pretrained: a config's sizes not held against the weights it comes with",
             PKG + "models/pretrained.py", "    check_sizes(path, config, column, tensors)\n", "",
             tests("models/test_pretrained.py", "test_a_config_claiming_more_than_the_weights_"
                   "hold_is_refused_before_building")),
)

def check_old_text(breakage: Breakage, root: Path) -> str | None:
    """What is wrong with ``breakage`` against the tree at ``root``, or None when its ``old``
    text occurs exactly once in its file and every test file it names exists."""
    path = root / breakage.path
    if not path.is_file():
        return f"{breakage.path}: no such file"
    found = path.read_text(encoding="utf-8").count(breakage.old)
    if found != 1:
        return f"{breakage.path}: the old text occurs {found} times, expected once"
    missing = sorted({node.split("::")[0] for node in breakage.fails
                      if not (root / node.split("::")[0]).is_file()})
    return f"no test file {', '.join(missing)}" if missing else None


def apply(breakage: Breakage, root: Path) -> None:
    """Make the change in the tree at ``root`` (a copy)."""
    problem = check_old_text(breakage, root)
    if problem:
        raise SystemExit(f"{breakage.name}: {problem}")
    path = root / breakage.path
    path.write_text(path.read_text(encoding="utf-8").replace(breakage.old, breakage.new),
                    encoding="utf-8")


def copy_tree(target: Path) -> Path:
    """A copy of the repository in ``target``/repo, without .git, .venv, visual/, caches."""
    copy = target / "repo"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*LEFT_OUT), symlinks=True)
    return copy


def copy_environment(copy: Path) -> dict:
    """The environment that makes Python import the package from ``copy``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(copy), env.get("PYTHONPATH")) if p)
    return env


def check_imports_copy(copy: Path, env: dict) -> None:
    """Stop unless ``nlp_tutorials`` imports from ``copy`` when run as the tests will be."""
    found = subprocess.run(
        [sys.executable, "-c", "import nlp_tutorials; print(nlp_tutorials.__file__)"],
        cwd=copy, env=env, capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(copy.resolve()):
        raise SystemExit(f"nlp_tutorials imported from {found}, not from the copy {copy}")


def run_tests(copy: Path, node_ids: tuple) -> tuple[dict, str]:
    """Run ``node_ids`` with pytest in ``copy``; ({node id: (outcome, first line of the
    failure or skip message)}, pytest's output)."""
    env = copy_environment(copy)
    check_imports_copy(copy, env)
    report = copy.parent / "report.xml"
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               f"--junitxml={report}", *node_ids]
    result = subprocess.run(command, cwd=copy, env=env, capture_output=True, text=True,
                            timeout=RUN_TIMEOUT)
    cases = ElementTree.parse(report).getroot().iter("testcase") if report.is_file() else []
    return outcomes(list(cases), node_ids), result.stdout + result.stderr


def outcomes(cases: list, node_ids: tuple) -> dict:
    """Per node id: "failed" (any of its cases failed or errored: a parametrized test counts
    as failed when one of its parameters does), "passed" (all passed), "skipped", or
    "not run"; with the first line of the first failure's or skip's message."""
    found = {}
    for node in node_ids:
        module, name = node.split("::")
        classname = module.removesuffix(".py").replace("/", ".")
        mine = [case for case in cases if case.get("classname") == classname
                and (case.get("name") == name or case.get("name").startswith(name + "["))]
        states = [(child.tag, (child.get("message") or "").splitlines()[:1])
                  for case in mine for child in case if child.tag in ("failure", "error",
                                                                      "skipped")]
        bad = [message for tag, message in states if tag in ("failure", "error")]
        if not mine:
            found[node] = ("not run", "")
        elif bad:
            share = f"{len(bad)} of {len(mine)} cases: " if len(mine) > 1 else ""
            found[node] = ("failed", share + (bad[0] or [""])[0])
        elif states:
            found[node] = ("skipped", (states[0][1] or [""])[0])
        else:
            found[node] = ("passed", "")
    return found


def try_row(index: int, breakage: Breakage, unbroken: bool) -> bool:
    """Run one row's tests on a broken (or, with ``unbroken``, unchanged) copy; print the
    result; True when every test failed (with ``unbroken``: passed)."""
    wanted = "passed" if unbroken else "failed"
    with tempfile.TemporaryDirectory(prefix="breakage-") as folder:
        copy = copy_tree(Path(folder))
        if not unbroken:
            apply(breakage, copy)
        results, output = run_tests(copy, breakage.fails)
    good = all(outcome == wanted for outcome, _ in results.values())
    verdict = ("all pass" if good else "NOT ALL PASS") if unbroken else (
        "caught" if good else "NOT CAUGHT")
    print(f"[{index}] {verdict}: {breakage.name}", flush=True)
    for node, (outcome, message) in results.items():
        note = f" ({message[:110]})" if message else ""
        print(f"      {outcome:8s} {node}{note}", flush=True)
    if not good:
        print("      pytest's last lines:\n" + "\n".join(
            "        " + line for line in output.strip().splitlines()[-12:]), flush=True)
    return good


def choose(selectors: list) -> list:
    """(index, breakage) of the rows named by index or by a piece of their name (all if none)."""
    rows = list(enumerate(BREAKAGES))
    if not selectors:
        return rows
    chosen = []
    for selector in selectors:
        picked = [(i, b) for i, b in rows if (str(i) == selector if selector.isdigit()
                                              else selector.lower() in b.name.lower())]
        if not picked:
            raise SystemExit(f"{selector!r}: no such row (see --list)")
        chosen += [row for row in picked if row not in chosen]
    return chosen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("rows", nargs="*", help="row indices or pieces of row names (default: all)")
    parser.add_argument("--list", action="store_true", help="print the rows and stop")
    parser.add_argument("--unbroken", action="store_true",
                        help="run the rows' tests on an unchanged copy: they must all pass")
    args = parser.parse_args()
    rows = choose(args.rows)
    if args.list:
        for index, breakage in rows:
            print(f"[{index}] {breakage.name}\n      {breakage.path}; fails: "
                  f"{', '.join(node.split('::')[1] for node in breakage.fails)}")
        return 0
    drifted = [f"[{i}] {b.name}: {problem}" for i, b in rows
               if (problem := check_old_text(b, ROOT))]
    if drifted:
        raise SystemExit("the code has drifted from these rows:\n" + "\n".join(drifted))
    good = [try_row(index, breakage, args.unbroken) for index, breakage in rows]
    what = "pass unbroken" if args.unbroken else "caught"
    print(f"\n{sum(good)} of {len(good)} rows {what}"
          + ("" if all(good) else ": NOT " + ", ".join(
              str(index) for (index, _), ok in zip(rows, good) if not ok)))
    return 0 if all(good) else 1


if __name__ == "__main__":
    sys.exit(main())
