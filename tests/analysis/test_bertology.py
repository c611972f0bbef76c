"""Head importance, attention entropy, the masking study, choosing heads to prune, and the
`bert heads` command, on a tiny fine-tuning head."""
import functools
import itertools
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.analysis import bertology
from nlp_tutorials.bert import BERT
from nlp_tutorials.cli import main
from nlp_tutorials.models.config import ModelConfig
from nlp_tutorials.tasks.mrpc import MrpcTask
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.tasks import get_task
from nlp_tutorials.finetuned.folders import load_finetuned, save_head
from nlp_tutorials.finetuned.inference import score_examples
from nlp_tutorials.models.task_heads import SequenceClassifier
from nlp_tutorials.models.pruning import pruned_head_model
from nlp_tutorials.text.tokenization import WordTokenizer
from nlp_tutorials.training.config import (
    RECOVERY_BATCH_SIZE,
    RECOVERY_LEARNING_RATE,
    WARMUP_FRACTION,
    WEIGHT_DECAY,
)


@pytest.fixture(scope="module")
def tokenizer():
    train = load_mrpc("train")
    return WordTokenizer.build([s for p in train for s in (p.text, p.pair)])


def tiny_classifier(vocab_size: int, seed: int):
    """An untrained MRPC classifier of 2 layers x 4 heads, dropout off."""
    keras.utils.set_random_seed(seed)
    config = ModelConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2,
                         num_attention_heads=4, intermediate_size=64, max_position_embeddings=64,
                         hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return SequenceClassifier(BERT(config), num_labels=2, dropout=0.0)


@pytest.fixture(scope="module")
def head(tokenizer):
    return tiny_classifier(tokenizer.vocab_size, seed=11)


@pytest.fixture(scope="module")
def pairs(tokenizer):
    return MrpcTask().encode(tokenizer, load_mrpc("test")[:4], 64)


@functools.cache
def traced_loss(head):
    """The head's loss as one traced function: the central differences below call it 128 times,
    which eagerly would take most of this file's time."""
    return tf.function(lambda batch: head.loss_and_metrics(batch)[0])


def example_loss(head, pairs, row, head_mask):
    length = np.count_nonzero(pairs["input_ids"][row])
    batch = {"input_ids": pairs["input_ids"][row:row + 1, :length],
             "token_type_ids": pairs["token_type_ids"][row:row + 1, :length],
             "labels": pairs["labels"][row:row + 1],
             "head_mask": tf.constant(head_mask, tf.float32)}
    return float(traced_loss(head)(batch))


def test_importance_is_the_summed_absolute_gradient_normalised_per_layer(head, pairs):
    importance = bertology.importance(head, pairs)
    # Central differences of each example's loss in each head's mask value. The untrained
    # model's gradients are ~2e-5, so a wide step keeps float32 round-off (~1e-7) out of them.
    step = 0.3
    raw = np.zeros([2, 4])
    for row in range(4):
        for layer in range(2):
            for h in range(4):
                up, down = np.ones([2, 4]), np.ones([2, 4])
                up[layer, h] += step
                down[layer, h] -= step
                raw[layer, h] += abs(example_loss(head, pairs, row, up)
                                     - example_loss(head, pairs, row, down)) / (2 * step)
    expected = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    np.testing.assert_allclose(importance, expected, atol=1e-2)
    np.testing.assert_allclose(np.linalg.norm(importance, axis=1), 1.0, rtol=1e-6)


@pytest.mark.slow
def test_entropy_is_the_mean_over_query_tokens_of_each_heads_attention_entropy(head, pairs):
    entropy = bertology.entropy(head, pairs)
    expected = np.zeros([2, 4])
    for row in range(4):
        length = np.count_nonzero(pairs["input_ids"][row])
        attentions = head.backbone.encode(pairs["input_ids"][row:row + 1, :length],
                                          pairs["token_type_ids"][row:row + 1, :length])
        for layer, probs in enumerate(attentions["attentions"]):
            p = probs.numpy()[0]  # [heads, query, key]
            expected[layer] += (-(p * np.log(p + 1e-12)).sum(-1)).mean(-1) / 4
    np.testing.assert_allclose(entropy, expected, rtol=1e-4)
    pruned = bertology.entropy(pruned_head_model(head, {0: [1]}), pairs)
    assert np.isnan(pruned[0, 1]) and np.isnan(pruned).sum() == 1


def test_heads_to_prune_takes_the_least_important_and_leaves_each_layer_one():
    importance = np.array([[0.1, 0.2, 0.3, 0.4], [0.05, 0.06, 0.07, 0.9]])
    assert bertology.heads_to_prune(importance, 0.25) == {1: [0, 1]}
    # layer 1 keeps head 3 although heads of layer 0 matter more
    assert bertology.heads_to_prune(importance, 0.5) == {0: [0], 1: [0, 1, 2]}
    assert bertology.heads_to_prune(importance, 0.0) == {}
    # heads pruned before count towards the share and are never chosen again
    assert bertology.heads_to_prune(importance, 0.5, [[1, 2, 3], [0, 1, 2, 3]]) == {1: [0, 1, 2]}


def silence(head, heads: dict) -> None:
    """Zero the value weights of ``heads`` ({layer: [head, ...]}): their attention output is
    then exactly 0 whatever their mask, so the loss's gradient in their mask, their importance,
    is exactly 0 and every other head's is not."""
    for layer, silenced in heads.items():
        attention = head.backbone.encoder.blocks[layer].attention
        size = attention.head_size
        columns = [h * size + i for h in silenced for i in range(size)]
        kernel, bias = attention.value.kernel.numpy(), attention.value.bias.numpy()
        kernel[:, columns], bias[columns] = 0.0, 0.0
        attention.value.kernel.assign(kernel)
        attention.value.bias.assign(bias)


@pytest.mark.slow
def test_iterative_choice_prunes_the_share_asked_for(tokenizer, pairs):
    # Four heads that cannot matter: a choice of the least important half must be these four,
    # whichever two the first quarter takes; layer 1 keeps head 2, the one it has left.
    silent = tiny_classifier(tokenizer.vocab_size, seed=12)
    silence(silent, {0: [2], 1: [0, 1, 3]})
    np.testing.assert_array_equal(bertology.importance(silent, pairs) == 0,
                                  [[0, 0, 1, 0], [1, 1, 0, 1]])
    spec = bertology.iterative_heads_to_prune(silent, pairs, 0.5, step=0.25)
    assert sum(map(len, spec.values())) == 4
    assert all(len(heads) < 4 for heads in spec.values())
    assert spec == {0: [2], 1: [0, 1, 3]}


def test_iterative_choice_measures_again_with_the_chosen_heads_masked(head, monkeypatch):
    """A hand-made importance in which head (0, 1) takes over once head (0, 0) is masked, on a
    model whose head (0, 3) was pruned before: the second measurement must see the first
    choice masked, and the heads pruned before count towards the share but are not returned."""
    model = pruned_head_model(head, {0: [3]})
    first = np.array([[0.1, 0.2, 0.9, 0.0], [0.3, 0.15, 0.7, 0.6]])
    measured_at = []

    def importance(measured_head, arrays, head_mask, display=None):
        assert measured_head is model and arrays == "dev pairs"
        measured_at.append(head_mask.copy())
        values = first.copy()
        if head_mask[0, 0] == 0:
            values[0, 1] = 1.0
        return values * head_mask  # a masked or pruned head has importance 0

    monkeypatch.setattr(bertology, "importance", importance)
    spec = bertology.iterative_heads_to_prune(model, "dev pairs", 0.5, step=0.25)
    # First quarter (2 heads): (0, 3) is gone already, so one more, the least important
    # (0, 0). Second quarter (2 more): now (0, 1) scores 1.0, so (1, 1) at 0.15 and (1, 0) at
    # 0.3. Measured once only, the choice would have been (1, 1) and (0, 1).
    assert spec == {0: [0], 1: [0, 1]}
    np.testing.assert_array_equal(measured_at, [[[1, 1, 1, 0], [1, 1, 1, 1]],
                                                [[0, 1, 1, 0], [1, 1, 1, 1]]])


@pytest.mark.slow
def test_masking_study_scores_every_share_in_both_orders(head, pairs):
    importance = np.arange(8, dtype=float).reshape(2, 4)
    lines = []
    examples = load_mrpc("test")[:4]  # the pairs `pairs` encodes
    task = get_task("mrpc")
    study = bertology.masking_study(head, task, examples, pairs, importance, random_orders=2,
                                    printer=lines.append)
    assert study["shares"] == bertology.STUDY_SHARES and len(lines) == 10
    unmasked = score_examples(head, task, examples, pairs, head_mask=np.ones([2, 4]))
    assert study["importance_order"][0] == unmasked
    assert study["random_order"][0] == unmasked
    masked = score_examples(head, task, examples, pairs,
                            head_mask=bertology.mask_of(np.array([0, 1]), 2, 4))
    assert study["importance_order"][2] == masked  # 20% of 8 heads: the two least important


def test_masking_study_masks_least_important_first_and_averages_the_random_orders(
        monkeypatch):
    """A hand-made scorer in place of evaluating the model: each head masked costs a distinct
    power of two of "accuracy", so every set of masked heads scores differently and the mean
    over the random orders can be told from any one of them."""
    importance = np.array([[0.5, 0.1, 0.9, 0.3], [0.2, 0.8, 0.05, 0.7]])
    least_first = [(1, 2), (0, 1), (1, 0), (0, 3), (0, 0), (1, 3), (1, 1), (0, 2)]
    masked_counts = [0, 1, 2, 2, 3, 4, 5, 6, 6, 7]  # round(share x 8 heads) for 0%, ..., 90%
    cost = 2.0 ** -np.arange(1, 9).reshape(2, 4)
    task = get_task("mrpc")

    def score(head_mask):
        return {"accuracy": 1 - float(np.sum((1 - head_mask) * cost)),
                "f1": float(np.sum(head_mask[0]))}  # layer 0's heads left

    evaluated, per_share, lines = [], [], []

    def score_examples(head, scored_task, examples, arrays, head_mask):
        assert (head, scored_task, examples, arrays) == ("head", task, "examples", "arrays")
        evaluated.append(np.array(head_mask, copy=True))
        return score(head_mask)

    def printer(line):  # one line after each share: the masks since the last are that share's
        lines.append(line)
        per_share.append(evaluated[:])
        evaluated.clear()

    monkeypatch.setattr(bertology, "score_examples", score_examples)
    study = bertology.masking_study("head", task, "examples", "arrays", importance,
                                    random_orders=3, printer=printer)
    assert study["shares"] == bertology.STUDY_SHARES and len(per_share) == 10
    random_masks, importance_masks = [], []
    for share, (count, masks) in enumerate(zip(masked_counts, per_share)):
        by_importance = np.ones([2, 4])
        for layer, h in least_first[:count]:
            by_importance[layer, h] = 0
        assert len(masks) == 4
        position = next(i for i, m in enumerate(masks) if np.array_equal(m, by_importance))
        randoms = masks[:position] + masks[position + 1:]
        assert all(np.sum(m == 0) == count for m in randoms)
        random_masks.append(randoms)
        importance_masks.append(by_importance)
        assert study["importance_order"][share] == pytest.approx(score(by_importance))
        mean = {name: np.mean([score(m)[name] for m in randoms]) for name in ("accuracy", "f1")}
        assert study["random_order"][share] == pytest.approx(mean, abs=1e-12)
        assert lines[share] == (f"{share * 10:3d}% of the heads masked: accuracy "
                                f"{100 * score(by_importance)['accuracy']:.1f}% (least important "
                                f"first), {100 * mean['accuracy']:.1f}% (random order, mean of 3)")
    # Each random order masks more heads of the same order as the share grows...
    for before, after in zip(random_masks, random_masks[1:]):
        assert any(all(np.all(after[j] <= before[i]) for i, j in enumerate(matching))
                   for matching in itertools.permutations(range(3)))
    # ...and the three are different orders, none of them the importance order, so their mean
    # is no single order's score.
    half = random_masks[5]
    assert len({m.tobytes() for m in half}) == 3
    assert not any(np.array_equal(m, importance_masks[5]) for m in half)
    assert len({score(m)["accuracy"] for m in half}) == 3


@pytest.mark.slow
def test_heads_command_writes_importance_pictures_and_a_pruned_model_predict_reads(
        head, tokenizer, tmp_path, capsys):
    model_dir = tmp_path / "finetuned"
    save_head(head, model_dir)
    tokenizer.save(model_dir)
    status = main("bert", ["heads", "--model-dir", str(model_dir), "--output-dir",
                           str(tmp_path / "pictures"), "--dev-size", "6", "--prune", "0.25",
                           "--recover-epochs", "1"])
    assert status == 0
    out = capsys.readouterr().out
    assert "recovery epoch 1: train loss" in out
    # Each pass's progress: a run this short shows its first and last step of each.
    shown = [line.split(" - ")[0] for line in out.splitlines() if " - " in line]
    assert shown[:10] == ["importance: example 1/6", "importance: example 6/6",
                          "entropy: example 1/6", "entropy: example 6/6",
                          "pruning to 10%: example 1/6", "pruning to 10%: example 6/6",
                          "pruning to 20%: example 1/6", "pruning to 20%: example 6/6",
                          "pruning to 25%: example 1/6", "pruning to 25%: example 6/6"]
    steps = len(load_mrpc("train")) // RECOVERY_BATCH_SIZE  # a line every 30 s in between
    assert shown[10] == f"recovery epoch 1/1: step 1/{steps}"
    assert shown[-1] == f"recovery epoch 1/1: step {steps}/{steps}"
    written = json.loads((model_dir / bertology.IMPORTANCE_FILE).read_text())
    assert np.array(written["importance"]).shape == (2, 4) and written["dev_pairs"] == 6
    assert (tmp_path / "pictures" / "head_importance.png").stat().st_size > 1000
    pruned = load_finetuned(tmp_path / "finetuned_pruned25").head
    assert sum(map(len, pruned.backbone.config.pruned_heads.values())) == 2
    assert not np.allclose(pruned.classifier.kernel.numpy(), head.classifier.kernel.numpy())
    pairs_file = tmp_path / "pairs.tsv"
    pairs_file.write_text("The cat sat.\tA cat was sitting.\n")
    assert main("bert", ["predict", str(pairs_file), "--model-dir",
                         str(tmp_path / "finetuned_pruned25")]) == 0
    assert capsys.readouterr().out.count("\t") == 3


def test_heads_command_without_a_fine_tuned_model_is_one_line(tmp_path, capsys):
    assert main("bert", ["heads", "--model-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no fine-tuned model" in err
    assert main("bert", ["heads", "--model-dir", str(tmp_path), "--recover-epochs", "1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--recover-epochs 1: only with --prune" in err
    assert main("bert", ["heads", "--model-dir", str(tmp_path), "--prune", "0.25",
                         "--recover-batch-size", "8"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--recover-batch-size: only with --recover-epochs" in err


def test_heads_command_hands_the_recovery_rate_and_batch_size_on(tmp_path, monkeypatch):
    handed = []
    monkeypatch.setattr(bertology, "heads_command", handed.append)
    assert main("bert", ["heads", "--model-dir", str(tmp_path), "--prune", "0.25",
                         "--recover-epochs", "1", "--recover-learning-rate", "1e-4",
                         "--recover-batch-size", "8"]) == 0
    assert (handed[0].recover_learning_rate, handed[0].recover_batch_size) == (1e-4, 8)
    assert main("bert", ["heads", "--model-dir", str(tmp_path)]) == 0
    assert (handed[1].recover_learning_rate, handed[1].recover_batch_size) == (
        RECOVERY_LEARNING_RATE, RECOVERY_BATCH_SIZE)


def test_recover_compiles_fine_tunings_optimizer_for_the_rate_and_batch_it_is_given(
        tokenizer, monkeypatch):
    from nlp_tutorials.training import finetuning

    optimizers, trained = [], []
    real_optimizer = finetuning.make_optimizer

    def noting_optimizer(learning_rate, steps, warmup_fraction, weight_decay):
        optimizers.append((learning_rate, steps, warmup_fraction, weight_decay))
        return real_optimizer(learning_rate, steps, warmup_fraction, weight_decay)

    def noting_training(head, train, epochs, batch_size, rng, strategy, end_of_epoch, display):
        trained.append((len(train["input_ids"]), epochs, batch_size, head.optimizer is not None))

    monkeypatch.setattr(finetuning, "make_optimizer", noting_optimizer)
    monkeypatch.setattr(bertology, "train_epochs", noting_training)
    head = tiny_classifier(tokenizer.vocab_size, seed=3)
    bertology.recover(head, tokenizer, 2, learning_rate=3e-4, batch_size=8, max_len=64)
    pairs = len(load_mrpc("train"))
    assert trained == [(pairs, 2, 8, True)]
    assert optimizers == [(3e-4, 2 * (pairs // 8), WARMUP_FRACTION, WEIGHT_DECAY)]
    assert head.optimizer is None  # dropped, as finetune drops it before saving


class Clock:
    """31 s more at each reading: more than the 30 s between two plain progress lines."""

    def __init__(self):
        self.now = -31

    def __call__(self):
        self.now += 31
        return self.now


@pytest.mark.slow
def test_importance_and_entropy_show_their_pass_example_by_example(head, pairs):
    from nlp_tutorials.system.progress import ProgressDisplay

    printed = []
    display = ProgressDisplay(printed.append, interactive=False, clock=Clock())
    measured = bertology.importance(head, pairs, display=display.named("importance"))
    np.testing.assert_array_equal(measured, bertology.importance(head, pairs))
    bertology.entropy(head, pairs, display.named("entropy"))
    assert [line.split(" - ")[0] for line in printed] == [
        f"{name}: example {n}/4" for name in ("importance", "entropy") for n in range(1, 5)]
    # One example a step, a step every 31 s; two left after the second.
    assert printed[1].split(" - ")[1:] == ["1:02", "0.032 examples/s", "1:02 left"]


def test_the_masking_study_shows_its_passes_as_it_scores_them(monkeypatch):
    from nlp_tutorials.system.progress import ProgressDisplay

    monkeypatch.setattr(bertology, "score_examples",
                        lambda head, task, examples, arrays, head_mask: {"accuracy": 0.5,
                                                                         "f1": 0.5})
    printed = []
    display = ProgressDisplay(printed.append, "study", interactive=False, clock=Clock())
    bertology.masking_study("head", get_task("mrpc"), ["an example"] * 3, "arrays",
                            np.ones([2, 4]), random_orders=1, printer=printed.append,
                            display=display)
    # Two passes a share (the importance order and one random order), each shown once done,
    # before the share's line.
    assert [line.split(" - ")[0].split(" of the")[0] for line in printed[:6]] == [
        "study: pass 1/20", "study: pass 2/20", "  0%", "study: pass 3/20", "study: pass 4/20",
        " 10%"]
    assert printed[-2].startswith("study: pass 20/20") and printed[-1].startswith(" 90%")
