"""Fine-tuning on MRPC and predicting with the result, on a tiny pre-trained BERT."""
import json
import re

import numpy as np
import pytest

from nlp_tutorials.training.config import FinetuneConfig
from nlp_tutorials.tasks.mrpc import DEFAULT_DATA_DIR, load_mrpc
from nlp_tutorials.system.errors import UserError
from support import run_main, without_progress


@pytest.fixture(scope="module")
def finetuned(pretrained_bert, tmp_path_factory):
    """The run's shared tiny pre-trained BERT (``pretrained_bert``) fine-tuned with 2 seeds of
    2 epochs each.

    Returns (the fine-tuned folder, what finetune returned, what it printed, the heads it
    trained, in memory: one per seed, as finetune_once handed them back).
    """
    from nlp_tutorials.training import finetuning

    root, bert = tmp_path_factory.mktemp("finetune"), pretrained_bert / "run"
    printed, heads = [], []
    config = FinetuneConfig(model_dir=str(bert), output_dir=str(root / "mrpc"),
                            epochs=2, batch_size=64, learning_rate=1e-3, seeds=2)
    train_one = finetuning.finetune_once

    def keeping_the_head(*args, **kwargs):
        trained = train_one(*args, **kwargs)
        heads.append(trained[0])
        return trained

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(finetuning, "finetune_once", keeping_the_head)
        result = finetuning.finetune(config, printer=printed.append)
    return root / "mrpc", result, printed, heads


def test_train_dev_split_is_glue_sized():
    from nlp_tutorials.tasks.base import default_dev_size, split_train_dev

    assert default_dev_size(4076) == 408  # a tenth of MRPC's train pairs: GLUE's dev
    train, dev = split_train_dev(load_mrpc("train"), 408)
    assert (len(train), len(dev)) == (3668, 408)
    assert dev[-1] == load_mrpc("train")[-1]
    with pytest.raises(UserError, match="^--dev-size 5000: train holds 4,076 examples; "
                                        "expected 0 to 4075$"):
        split_train_dev(load_mrpc("train"), 5000)
    train, dev = split_train_dev(load_mrpc("train"), 0)
    assert (len(train), dev) == (4076, [])


def small_train_file(folder, pairs: int):
    """An MRPC-style train file of the first ``pairs`` shipped train pairs (no dev file)."""
    lines = (DEFAULT_DATA_DIR / "msr_paraphrase_train.txt").read_text(
        encoding="utf-8-sig").splitlines()
    path = folder / "train.txt"
    path.write_text("\n".join(lines[:pairs + 1]) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("pairs, held, said", [
    (200, 20, "train.txt: 200 examples, fewer than 4,080; the last 20 (a tenth) held out as "
              "dev"),
    (4, 0, "train.txt: 4 examples, fewer than 4,080; too few to hold out a tenth as dev: "
           "none is"),
])
def test_the_default_dev_size_adapts_to_a_small_train_file_and_says_so(tmp_path, pairs, held,
                                                                       said):
    printed = []
    config = FinetuneConfig(train=str(small_train_file(tmp_path, pairs)))
    task = config.make_task(printed.append)
    task.read_splits()
    assert (len(task.examples("train")), len(task.examples("dev"))) == (pairs - held, held)
    assert printed[0].startswith(f"train.txt: {pairs} sentence pairs") and printed[1] == said


def test_an_explicit_dev_size_too_large_for_the_train_file_is_one_line(tmp_path):
    path = small_train_file(tmp_path, 200)
    result = run_main("bert", "finetune", "--train", str(path), "--dev-size", "408",
                      "--output-dir", str(tmp_path / "out"))
    assert result.returncode == 2 and result.stderr == (
        "python -m nlp_tutorials.bert finetune: error: --dev-size 408: train.txt holds 200 "
        "examples; expected 0 to 199\n")


@pytest.mark.slow
def test_a_saved_head_reloads_and_predicts_pairs_in_order(tmp_path):
    """An untrained tiny classifier through save_head, load_finetuned and predict."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.config import ModelConfig
    from nlp_tutorials.tasks import get_task
    from nlp_tutorials.finetuned.folders import load_finetuned, save_head
    from nlp_tutorials.finetuned.inference import class_probabilities
    from nlp_tutorials.finetuned.predicting import predict
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import WordTokenizer

    pairs = load_mrpc("test")[:20]
    tokenizer = WordTokenizer.build([s for p in pairs for s in (p.text, p.pair)])
    keras.utils.set_random_seed(0)
    head = SequenceClassifier(BERT(ModelConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1,
        num_attention_heads=2, intermediate_size=32, max_position_embeddings=64)))
    save_head(head, tmp_path)
    tokenizer.save(tmp_path)
    loaded, loaded_tokenizer, task = load_finetuned(tmp_path)
    arrays = get_task("mrpc").encode(tokenizer, pairs, 64)
    np.testing.assert_allclose(class_probabilities(loaded, arrays),
                               class_probabilities(head, arrays), atol=1e-6)
    printed = []
    lines = [f"{p.text}\t{p.pair}\n" for p in pairs[:3]]
    assert predict(loaded, loaded_tokenizer, task, lines, "pairs.tsv", printer=printed.append,
                   chunk=2) == 3
    assert [line.split("\t")[2:] for line in printed] == [[p.text, p.pair] for p in pairs[:3]]


@pytest.mark.slow
def test_without_dev_pairs_every_pair_trains_and_the_last_epoch_is_kept(pretrained_bert,
                                                                       tmp_path):
    from nlp_tutorials.training.finetuning import finetune

    printed = []
    config = FinetuneConfig(model_dir=str(pretrained_bert / "run"),
                            output_dir=str(tmp_path / "all_pairs"),
                            epochs=2, batch_size=64, learning_rate=1e-3, dev_size=0)
    result = finetune(config, printer=printed.append)
    assert result["runs"][0]["dev"] is None
    assert 0.3 < result["runs"][0]["test"]["accuracy"] < 1.0
    assert printed[:2] == ["msr_paraphrase_train.txt: 4,076 sentence pairs (2,753 paraphrases, "
                           "1,323 not)",
                           "msr_paraphrase_test.txt: 1,725 sentence pairs (1,147 paraphrases, "
                           "578 not)"]
    epochs = [line for line in without_progress(printed) if line.startswith("seed 1 epoch")]
    assert "seed 1 epoch 2: train loss" in epochs[1] and "dev" not in epochs[1]
    assert any("last epoch (no dev examples)" in line for line in printed)
    assert (tmp_path / "all_pairs" / "model.keras").is_file()


def test_finetune_without_pretrained_checkpoint_says_what_to_do(tmp_path):
    from nlp_tutorials.training.finetuning import finetune

    with pytest.raises(UserError, match="run `python -m nlp_tutorials.bert train` first, or "
                                        "pass --from-scratch"):
        finetune(FinetuneConfig(model_dir=str(tmp_path)), printer=lambda *_: None)


@pytest.mark.slow
def test_finetune_reports_test_scores_over_seeds(finetuned):
    folder, result, printed, _ = finetuned
    assert [run["seed"] for run in result["runs"]] == [1, 2]
    for run in result["runs"]:
        assert 0.3 < run["test"]["accuracy"] < 1.0 and 0.0 <= run["test"]["f1"] <= 1.0
    accuracies = [run["test"]["accuracy"] for run in result["runs"]]
    mean, std = result["test_mean_std"]["accuracy"]
    assert mean == pytest.approx(np.mean(accuracies))
    assert std == pytest.approx(np.std(accuracies, ddof=1))
    assert any("MRPC test over 2 seeds: " in line for line in printed)
    saved = json.loads((folder / "results.json").read_text())
    assert saved["runs"] == result["runs"]


@pytest.mark.slow
def test_saved_model_is_the_head_that_was_trained(finetuned):
    """model.keras holds the head fine-tuning kept in memory (the seed with the best dev
    accuracy): the same weights and the same predictions; the other seed's head differs."""
    from nlp_tutorials.tasks import get_task
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.inference import class_probabilities

    folder, result, _, heads = finetuned
    dev = [run["dev"]["accuracy"] for run in result["runs"]]
    kept, other = heads[dev.index(max(dev))], heads[1 - dev.index(max(dev))]
    head, tokenizer, _ = load_finetuned(folder)
    assert len(head.weights) == len(kept.weights)
    for loaded, trained in zip(head.weights, kept.weights):
        np.testing.assert_array_equal(loaded.numpy(), trained.numpy(), err_msg=trained.path)
    assert max(np.abs(a.numpy() - b.numpy()).max()
               for a, b in zip(kept.weights, other.weights)) > 1e-3
    arrays = get_task("mrpc").encode(tokenizer, load_mrpc("test")[:50], 24)
    first = class_probabilities(head, arrays)[:, 1]
    assert first.shape == (50,) and ((first >= 0) & (first <= 1)).all()
    np.testing.assert_array_equal(first, class_probabilities(kept, arrays)[:, 1])


@pytest.mark.slow
def test_saved_model_holds_the_weights_and_no_optimizer_state(finetuned):
    import zipfile

    import h5py

    from nlp_tutorials.finetuned.folders import load_finetuned

    folder = finetuned[0]
    head = load_finetuned(folder).head
    with zipfile.ZipFile(folder / "model.keras") as archive:
        with archive.open("model.weights.h5") as weights, h5py.File(weights) as h5:
            names = []
            h5.visititems(lambda name, item: names.append(name)
                          if isinstance(item, h5py.Dataset) else None)
    assert len(names) == len(head.weights)
    assert not [name for name in names if "optimizer" in name]


@pytest.mark.slow
def test_predict_prints_pairs_before_a_malformed_line(finetuned):
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.predicting import predict

    head, tokenizer, task = load_finetuned(finetuned[0])
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n",
             "1\t1\t2\tShares rose.\tShares went up.\n",
             "The cat sat.\tA cat was sitting.\n",
             "one sentence only\n",
             "never\treached\n"]
    printed = []
    with pytest.raises(UserError, match=r"pairs.tsv, line 4: expected two tab-separated"):
        predict(head, tokenizer, task, lines, "pairs.tsv", printer=printed.append)
    assert [line.split("\t")[2] for line in printed] == ["Shares rose.", "The cat sat."]
    for line in printed:
        label, probability = line.split("\t")[:2]
        assert label == str(int(float(probability) > 0.5))


def test_length_grouped_order_is_a_permutation_with_tighter_batches():
    from nlp_tutorials.finetuned.batch_order import length_grouped_order

    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 100, size=1000)
    order = length_grouped_order(lengths, 32, np.random.default_rng(1), window=8)
    assert sorted(order.tolist()) == list(range(1000))
    np.testing.assert_array_equal(order, length_grouped_order(lengths, 32,
                                                              np.random.default_rng(1), window=8))

    def padding(indices):  # padded cells when each full batch is trimmed to its longest item
        batches = indices[:len(indices) // 32 * 32].reshape(-1, 32)
        return int(sum((lengths[b].max() - lengths[b]).sum() for b in batches))

    assert padding(order) < 0.2 * padding(rng.permutation(1000))
    # Batches are not simply sorted by length: their order is shuffled.
    longest = [lengths[order[i:i + 32]].max() for i in range(0, 992, 32)]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)


@pytest.mark.slow
def test_the_epochs_train_loss_is_the_mean_over_its_steps():
    """With the learning rate 0 every step sees the same weights, so each batch's loss can be
    computed again afterwards: the reported loss is their mean over the epoch, not the last
    batch's."""
    import keras
    import tensorflow as tf

    from fake_tasks import SENTENCES, Sentence, SentenceTask, tiny_wordpiece_head
    from nlp_tutorials.finetuned.batching import batches
    from nlp_tutorials.training.finetuning import train_epochs

    task = SentenceTask()
    head, tokenizer = tiny_wordpiece_head(task)
    examples = [Sentence(text, task.labels[i % 3]) for i, text in enumerate(SENTENCES)]
    arrays = task.shape.for_model(task.encode(tokenizer, examples, 16))
    head.compile(optimizer=keras.optimizers.SGD(0.0))
    reported = []
    train_epochs(head, arrays, 2, 2, np.random.default_rng(5), tf.distribute.get_strategy(),
                 lambda epoch, metrics: reported.append((epoch, metrics["loss"])))
    rng = np.random.default_rng(5)  # the same orders again, epoch by epoch
    expected = []
    for epoch in (1, 2):
        epoch_batches = list(batches(arrays, 2, rng, drop_remainder=True,
                                     pad_id=tokenizer.pad_id))
        # Each loss computed again as a graph, as the training step computes it: on some CPUs
        # (AVX-512) oneDNN's eager kernels sum in another order, 4e-5 apart on these logits.
        loss_of = head.compiled_step(epoch_batches[0], training=False)
        losses = [float(loss_of(batch)["loss"]) for batch in epoch_batches]
        assert len(losses) > 1 and np.std(losses) > 1e-3  # the last batch's would differ
        expected.append((epoch, pytest.approx(np.mean(losses), rel=1e-5)))
    assert reported == expected


@pytest.mark.slow  # a training step compiled: some 5 s (the quick tier's check: test_task_runs)
def test_training_shows_its_progress_within_each_epoch():
    """A clock that moves 31 s between two readings (more than the 30 s between two plain
    lines): a line after every step, each epoch's steps counted from 1 and its line last
    before the epoch's scores, the next epoch's first step timed from there."""
    import itertools

    import keras
    import tensorflow as tf

    from fake_tasks import SENTENCES, Sentence, SentenceTask, tiny_wordpiece_head
    from nlp_tutorials.system.progress import ProgressDisplay
    from nlp_tutorials.training.finetuning import train_epochs

    task = SentenceTask()
    head, tokenizer = tiny_wordpiece_head(task)
    examples = [Sentence(text, task.labels[i % 3]) for i, text in enumerate(SENTENCES)]
    head.compile(optimizer=keras.optimizers.SGD(0.0))
    printed, seconds = [], itertools.count(0, 31)
    display = ProgressDisplay(printed.append, "seed 1", interactive=False,
                              clock=lambda: next(seconds))
    train_epochs(head, task.shape.for_model(task.encode(tokenizer, examples, 16)), 2, 2,
                 np.random.default_rng(5), tf.distribute.get_strategy(),
                 lambda epoch, metrics: printed.append(f"epoch {epoch} over"), display)
    assert [line.split(" - ")[0] for line in printed] == [
        "seed 1 epoch 1/2: step 1/3", "seed 1 epoch 1/2: step 2/3", "seed 1 epoch 1/2: step 3/3",
        "epoch 1 over",
        "seed 1 epoch 2/2: step 1/3", "seed 1 epoch 2/2: step 2/3", "seed 1 epoch 2/2: step 3/3",
        "epoch 2 over"]
    # 2 examples a step, a step every 31 s; one step left after the second.
    assert re.fullmatch(r"seed 1 epoch 2/2: step 2/3 - 1:02 - 0\.065 examples/s - 31s left - "
                        r"loss: \d\.\d{4}", printed[5]), printed[5]


def test_on_a_terminal_each_epoch_is_a_keras_bar_of_its_own(capsys):
    from nlp_tutorials.system.progress import ProgressDisplay
    from nlp_tutorials.training.finetuning import EpochProgress

    progress = EpochProgress(ProgressDisplay(print, "seed 1", interactive=True), 2, 3, 4)
    for step in (1, 2, 3):
        progress.update(step, {"loss": 0.5})
    print("seed 1 epoch 1: train loss 0.500")  # the epoch's scores, below its finished bar
    progress.next_epoch()
    for step in (4, 5, 6):
        progress.update(step, {"loss": 0.25})
    out = capsys.readouterr().out
    first, second = out.split("seed 1 epoch 1: train loss 0.500\n")
    assert first.startswith("seed 1 epoch 1/2\n") and second.startswith("seed 1 epoch 2/2\n")
    # Each bar counts its epoch's steps from 1 and ends its line once the epoch is done.
    assert "3/3" in first and "loss: 0.5000" in first and first.endswith("\n")
    assert "\r" in second and "3/3" in second and "loss: 0.2500" in second
    assert "6/3" not in second and "4/3" not in second
