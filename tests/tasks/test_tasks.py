"""The task seam: MRPC read, encoded, scored and predicted through its Task, a toy task of
another shape through the same methods, task names saved with a model, and [PAD] ids that
are not 0."""
import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS, get_task
from nlp_tutorials.tasks.base import Task
from nlp_tutorials.tasks.shapes import TOKEN, ClassPrediction
from nlp_tutorials.tasks.glue import TextExample
from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc
from support import tiny_model


def test_mrpc_task_reads_the_shipped_splits_and_holds_dev_out_of_train():
    task = get_task("mrpc")
    assert isinstance(task, MrpcTask) and task.shape.name == "sequence" and task.num_labels == 2
    assert len(task.examples("train")) == 4076 and len(task.examples("test")) == 1725
    assert task.examples("dev") == []
    held_out = MrpcTask(dev_size=408)
    train, dev = held_out.examples("train"), held_out.examples("dev")
    assert (len(train), len(dev)) == (3668, 408)
    assert train + dev == load_mrpc("train")
    with pytest.raises(UserError, match="unknown MRPC split 'validation'; expected one of "
                                        "train, dev, test"):
        task.examples("validation")


def test_unknown_task_is_one_line_listing_the_known_ones():
    with pytest.raises(UserError) as info:
        get_task("nope")
    assert str(info.value) == f"unknown task 'nope'; expected one of {', '.join(sorted(TASKS))}"
    assert "mrpc" in TASKS


def test_mrpc_task_encodes_each_pair_as_the_tokenizer_encodes_it_alone():
    from nlp_tutorials.text.tokenization import WordTokenizer

    task = get_task("mrpc")
    pairs = task.examples("test")[:30]
    tokenizer = WordTokenizer.build(task.texts(pairs))
    arrays = task.encode(tokenizer, pairs, 40)
    assert arrays["input_ids"].shape == arrays["token_type_ids"].shape == (30, 40)
    for row, pair in enumerate(pairs):
        ids, types = tokenizer.encode(pair.text, pair.pair, max_len=40)
        assert arrays["input_ids"][row].tolist() == ids
        assert arrays["token_type_ids"][row].tolist() == types
    np.testing.assert_array_equal(arrays["labels"], [int(p.label) for p in pairs])
    assert task.longest(tokenizer, pairs) == max(
        len(tokenizer.encode(p.text, p.pair)[0]) for p in pairs)


def test_mrpc_predictions_are_the_softmax_arg_max_and_scores_match_scikit_learn():
    from sklearn.metrics import accuracy_score, f1_score

    task = get_task("mrpc")
    examples = task.examples("test")
    logits = np.random.default_rng(0).normal(size=(len(examples), 2)).astype(np.float32)
    predictions = task.predictions(logits, {}, examples)
    want = np.exp(logits.astype(np.float64))
    want /= want.sum(axis=1, keepdims=True)
    np.testing.assert_allclose([p.probabilities for p in predictions], want, rtol=1e-6)
    predicted = [p.label for p in predictions]
    assert predicted == (logits[:, 1] > logits[:, 0]).astype(int).tolist()
    labels = [int(p.label) for p in examples]
    scores = task.score(examples, predictions)
    assert scores == {"accuracy": pytest.approx(accuracy_score(labels, predicted)),
                      "f1": pytest.approx(f1_score(labels, predicted))}
    assert task.describe(scores) == (f"accuracy {100 * scores['accuracy']:.1f}% "
                                     f"F1 {100 * scores['f1']:.1f}")


def test_a_summary_shows_a_spread_only_over_several_seeds():
    task = get_task("mrpc")
    summary = {"accuracy": (0.8123, 0.0061), "f1": (0.871, 0.0)}
    assert task.describe_mean_std(summary, 3) == "accuracy 81.2 ± 0.6%, F1 87.1 ± 0.0"
    assert task.describe_mean_std(summary, 1) == "accuracy 81.2%, F1 87.1"
    # One run's scores on the same scale as the summary: epoch lines, seed lines, evaluate.
    assert task.describe({"accuracy": 0.8123, "f1": 0.871}) == "accuracy 81.2% F1 87.1"


def test_mrpc_reads_predict_lines_and_writes_predict_s_columns():
    task = get_task("mrpc")
    lines = ["Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n", "\n",
             "1\t7\t8\tShares rose.\tShares went up.\r\n", "The cat sat.\tA cat sat.\n",
             "one sentence\n"]
    read = task.parse_lines(lines, "pairs.tsv")
    assert next(read) == TextExample("Shares rose.", "Shares went up.", "0", "3")
    assert next(read).pair == "A cat sat."
    with pytest.raises(UserError, match="pairs.tsv, line 5: expected two tab-separated"):
        next(read)
    pair = TextExample("a", "b", "0", "1")
    probabilities = np.array([0.6, 0.4], np.float32)
    assert task.format_prediction(pair, ClassPrediction(0, probabilities)) == "0\t0.400\ta\tb"
    assert task.format_prediction(pair, ClassPrediction(1, probabilities[::-1])) == \
        "1\t0.600\ta\tb"


class Sentence(tuple):
    """A toy example: its words, and a tag (0 word, 1 number) or a label per example."""

    words = property(lambda self: self[0])
    tags = property(lambda self: self[1])


class ToyNumberTagging(Task):
    """Token tagging: is each word a number? The tags count at each word's one token."""

    name, title, shape, labels, files = "toy_tags", "TOY", TOKEN, ("word", "number"), ("train",)

    def read(self, split):
        rng = np.random.default_rng(3)
        sentences = []
        for _ in range(12):
            words = [str(rng.integers(100)) if rng.random() < 0.4 else "cat"
                     for _ in range(rng.integers(2, 9))]
            sentences.append(Sentence((words, [int(w.isdigit()) for w in words])))
        return sentences

    def texts(self, examples):
        return [" ".join(e.words) for e in examples]

    def encode(self, tokenizer, examples, max_len):
        n = len(examples)
        arrays = {"input_ids": np.zeros([n, max_len], np.int32),
                  "token_type_ids": np.zeros([n, max_len], np.int32),
                  "tag_ids": np.zeros([n, max_len], np.int32),
                  "tag_weights": np.zeros([n, max_len], np.float32)}
        for row, example in enumerate(examples):
            ids, types = tokenizer.encode(" ".join(example.words), None, max_len)
            arrays["input_ids"][row], arrays["token_type_ids"][row] = ids, types
            words = len(example.words)  # one token a word, after [CLS]
            arrays["tag_ids"][row, 1:1 + words] = example.tags
            arrays["tag_weights"][row, 1:1 + words] = 1.0
        return arrays

    def predictions(self, outputs, encoded, examples):
        return [outputs[row, 1:1 + len(e.words)].argmax(-1).tolist()
                for row, e in enumerate(examples)]

    def score(self, examples, predictions):
        right = sum(p == t for e, tags in zip(examples, predictions) for p, t in zip(e.tags, tags))
        return {"accuracy": right / sum(len(e.tags) for e in examples)}


def tiny_bert(tokenizer, seed: int = 0):
    return tiny_model("bert", seed=seed, vocab_size=tokenizer.vocab_size, hidden_size=16,
                      num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                      max_position_embeddings=16, pad_token_id=tokenizer.pad_id,
                      hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


@pytest.mark.slow
def test_a_token_task_runs_through_the_same_seam(monkeypatch):
    """Read, encode, build the head, train a step on trimmed batches, predict and score."""
    import keras
    import tensorflow as tf

    from nlp_tutorials.models.task_heads import TokenClassifier
    from nlp_tutorials.text.tokenization import WordTokenizer
    from nlp_tutorials.finetuned.inference import head_outputs, score_examples
    from nlp_tutorials.training.finetuning import train_epochs

    monkeypatch.setitem(TASKS, "toy_tags", ToyNumberTagging)
    task = get_task("toy_tags", dev_size=4)
    train, dev = task.examples("train"), task.examples("dev")
    assert (len(train), len(dev)) == (8, 4)
    tokenizer = WordTokenizer.build(task.texts(train + dev))
    arrays = task.encode(tokenizer, train, 16)
    head = task.build_head(tiny_bert(tokenizer), dropout=0.0)
    assert isinstance(head, TokenClassifier) and head.num_labels == 2
    head.compile(optimizer=keras.optimizers.Adam(1e-2))
    losses = []
    train_epochs(head, arrays, 1, 4, np.random.default_rng(0), tf.distribute.get_strategy(),
                 lambda epoch, metrics: losses.append(float(metrics["loss"])))
    assert len(losses) == 1 and np.isfinite(losses[0])
    outputs = head_outputs(head, arrays, batch_size=3)  # batches trimmed to different lengths
    assert outputs.shape == (8, 16, 2)
    full = head({k: arrays[k] for k in ("input_ids", "token_type_ids")}).numpy()
    real = arrays["input_ids"] != tokenizer.pad_id
    np.testing.assert_allclose(outputs[real], full[real], atol=1e-5)
    predictions = task.predictions(outputs, arrays, train)
    assert [len(p) for p in predictions] == [len(e.words) for e in train]
    scores = score_examples(head, task, train, arrays)
    right = sum((np.array(p) == e.tags).sum() for p, e in zip(predictions, train))
    assert scores == {"accuracy": pytest.approx(right / sum(len(e.tags) for e in train))}


class ToyMood(MrpcTask):
    """A three-way sentence-pair task whose label names come with the model."""

    name, title, labels = "toy_mood", "MOOD", ("sad", "calm", "glad")


@pytest.mark.slow
def test_label_names_round_trip_through_a_saved_model_and_predict_prints_them(
        tmp_path, monkeypatch):
    from nlp_tutorials.text.tokenization import WordTokenizer
    from nlp_tutorials.finetuned.folders import load_finetuned, save_head, save_task
    from nlp_tutorials.finetuned.inference import class_probabilities
    from nlp_tutorials.finetuned.predicting import predict

    monkeypatch.setitem(TASKS, "toy_mood", ToyMood)
    pairs = load_mrpc("test")[:6]
    tokenizer = WordTokenizer.build(get_task("mrpc").texts(pairs))
    task = get_task("toy_mood", labels=("down", "even", "up"))
    head = task.build_head(tiny_bert(tokenizer))
    save_head(head, tmp_path)
    tokenizer.save(tmp_path)
    save_task(tmp_path, task)
    loaded, _, loaded_task = load_finetuned(tmp_path)
    assert type(loaded_task) is ToyMood and loaded_task.labels == ("down", "even", "up")
    printed = []
    lines = [f"{p.text}\t{p.pair}\n" for p in pairs]
    assert predict(loaded, tokenizer, loaded_task, lines, "pairs.tsv",
                   printer=printed.append) == 6
    # MRPC's encoding: the same inputs, with the pairs' own labels ("0", "1").
    probabilities = class_probabilities(head, get_task("mrpc").encode(tokenizer, pairs, 16))
    want = [f"{('down', 'even', 'up')[np.argmax(p)]}\t{p.max():.3f}\t{pair.text}\t{pair.pair}"
            for p, pair in zip(probabilities, pairs)]
    assert printed == want

    save_task(tmp_path, get_task("mrpc"))  # a 3-label head under a 2-label task
    with pytest.raises(UserError, match=r"model\.keras: the head has 3 label\(s\); MRPC has 2"):
        load_finetuned(tmp_path)


def test_export_model_refuses_a_token_task_not_encoded_as_conll_in_one_line(tmp_path,
                                                                             monkeypatch):
    from nlp_tutorials.serving.savedmodel import export_model
    from nlp_tutorials.text.tokenization import WordTokenizer
    from nlp_tutorials.finetuned.folders import save_head, save_task

    monkeypatch.setitem(TASKS, "toy_tags", ToyNumberTagging)
    task = get_task("toy_tags")
    tokenizer = WordTokenizer.build(task.texts(task.read("train")))
    save_head(task.build_head(tiny_bert(tokenizer)), tmp_path)
    tokenizer.save(tmp_path)
    save_task(tmp_path, task)
    with pytest.raises(UserError, match="^TOY: a token task that does not declare "
                                        "tags_first_pieces; export-model lays out each word's "
                                        "tag on its first word piece"):
        export_model(tmp_path, tmp_path / "served")


def test_trim_padding_counts_the_pad_id_it_is_given():
    from nlp_tutorials.text.packing import trim_padding

    pad = 5
    ids = np.full((2, 12), pad, np.int32)
    ids[0, :3] = [1, 0, 2]  # 0 is an ordinary token here
    ids[1, :7] = [1, 9, 0, 0, 8, 0, 2]
    batch = {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
             "labels": np.array([0, 1], np.int32)}
    trimmed = trim_padding(batch, pad_id=pad)
    assert trimmed["input_ids"].shape == trimmed["token_type_ids"].shape == (2, 7)
    np.testing.assert_array_equal(trimmed["input_ids"], ids[:, :7])
    assert trimmed["labels"].shape == (2,)
    # Told nothing, 0 is [PAD]: the length is then row 0's 11 ids that are not 0.
    assert trim_padding(batch)["input_ids"].shape == (2, 11)
    choices = {"input_ids": np.stack([ids, ids[::-1]], axis=1)}  # [batch, choices, step]
    assert trim_padding(choices, pad_id=pad)["input_ids"].shape == (2, 2, 7)
