"""Fine-tuning heads: shapes, padding, losses against numpy, saving, and synthetic tasks learnt.

Each head is fine-tuned on a tiny BERT for a few hundred steps on a generated task and must
score well on fresh examples it never saw.
"""
import keras
import numpy as np
import pytest

from nlp_tutorials.bert import BERT
from nlp_tutorials.gpt import GPT
from nlp_tutorials.models.task_heads import (
    MultipleChoice,
    SequenceClassifier,
    SpanExtractor,
    TokenClassifier,
    best_span,
)
from nlp_tutorials.models.masks import MASK_VALUE
from support import tiny_model

VOCAB = 30
PAD, CLS, SEP = 0, 1, 2
WORDS = np.arange(3, VOCAB)  # ordinary tokens


def tiny_backbone(seed=0, layers=1, model_class=BERT, **overrides):
    return tiny_model(model_class.__name__.lower(), seed, vocab_size=VOCAB,
                      num_hidden_layers=layers, num_attention_heads=2,
                      max_position_embeddings=16, **overrides)


def log_softmax(x):
    x = x.astype("float64") - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


# --- small batches for the shape, padding, loss and saving tests ----------------------------

def random_batch(seed=0, batch=3, step=7, choices=None):
    """Inputs with padding and labels for every head. MultipleChoice adds a choice axis."""
    rng = np.random.default_rng(seed)
    shape = (batch, step) if choices is None else (batch, choices, step)
    ids = rng.integers(3, VOCAB, shape).astype("int32")
    ids[..., 0] = CLS
    ids[1, ..., step - 2:] = PAD
    ids[2, ..., step - 3:] = PAD
    segments = np.zeros_like(ids)
    segments[..., step // 2:] = 1
    return {"input_ids": ids, "token_type_ids": segments * (ids != PAD),
            "labels": rng.integers(0, 2, batch).astype("int32"),
            "scores": rng.random(batch).astype("float32"),
            "tag_ids": rng.integers(0, 3, (batch, step)).astype("int32"),
            "start_positions": np.array([1, 2, 3], "int32"),
            "end_positions": np.array([4, 3, 3], "int32")}


HEADS = {
    "classifier": lambda backbone: SequenceClassifier(backbone, num_labels=3, dropout=0.2),
    "regressor": lambda backbone: SequenceClassifier(backbone, num_labels=1),
    "mean_pooled": lambda backbone: SequenceClassifier(backbone, num_labels=3, pooling="mean"),
    "tagger": lambda backbone: TokenClassifier(backbone, num_labels=3),
    "span": SpanExtractor,
    "choice": lambda backbone: MultipleChoice(backbone, dropout=0.3),
}


def head_batch(name, seed=0):
    batch = random_batch(seed, choices=4 if name == "choice" else None)
    if name == "regressor":
        batch["labels"] = batch.pop("scores")
    return batch


def inputs_of(batch):
    return {"input_ids": batch["input_ids"], "token_type_ids": batch["token_type_ids"]}


def numpy_outputs(outputs):
    if isinstance(outputs, dict):
        return {key: value.numpy() for key, value in outputs.items()}
    return {"logits": outputs.numpy()}


@pytest.fixture(scope="module")
def heads():
    """Every head on one BERT (dropout 0.1: inference ignores it, the default reads it)."""
    backbone = tiny_backbone(seed=3, hidden_dropout_prob=0.1)
    return {name: make(backbone) for name, make in HEADS.items()}


def test_output_shapes_and_dropout(heads):
    expected = {"classifier": {"logits": (3, 3)}, "regressor": {"logits": (3, 1)},
                "mean_pooled": {"logits": (3, 3)},
                "tagger": {"logits": (3, 7, 3)},
                "span": {"start_logits": (3, 7), "end_logits": (3, 7)},
                "choice": {"logits": (3, 4)}}
    for name, head in heads.items():
        outputs = numpy_outputs(head(inputs_of(head_batch(name))))
        assert {key: value.shape for key, value in outputs.items()} == expected[name], name
        assert all(np.isfinite(value).all() for value in outputs.values())
    assert heads["classifier"].dropout_rate == 0.2
    assert heads["regressor"].dropout_rate == heads["tagger"].dropout_rate == 0.1


def test_mean_pooling_averages_real_token_vectors(heads):
    """pooling="mean": the classifier reads the numpy mean of the real tokens' final vectors."""
    head = heads["mean_pooled"]
    inputs = inputs_of(head_batch("mean_pooled", seed=6))
    tokens = head.backbone(inputs, training=False)["sequence_output"].numpy()
    real = inputs["input_ids"] != PAD
    mean = np.stack([tokens[row][real[row]].mean(axis=0) for row in range(len(tokens))])
    kernel, bias = (w.numpy() for w in head.classifier.weights)
    np.testing.assert_allclose(head(inputs).numpy(), mean @ kernel + bias, atol=1e-5)
    with pytest.raises(ValueError, match="pooling='max'"):
        SequenceClassifier(head.backbone, pooling="max")


def test_heads_accept_a_gpt_backbone():
    backbone = tiny_backbone(seed=1, model_class=GPT)
    for name in ("classifier", "span", "choice"):
        outputs = numpy_outputs(HEADS[name](backbone)(inputs_of(head_batch(name))))
        assert all(value.shape[0] == 3 and np.isfinite(value).all()
                   for value in outputs.values())


@pytest.mark.parametrize("name", list(HEADS))
def test_padding_does_not_change_real_positions(name, heads):
    """Extra padding columns leave every output at real positions unchanged."""
    head = heads[name]
    batch = inputs_of(head_batch(name))
    extra = np.zeros(batch["input_ids"].shape[:-1] + (5,), "int32")
    longer = {key: np.concatenate([value, extra], axis=-1) for key, value in batch.items()}
    short, long = numpy_outputs(head(batch)), numpy_outputs(head(longer))
    real = batch["input_ids"] != PAD
    step = real.shape[-1]
    for key in short:
        if name in ("tagger", "span"):  # per token: compare real positions only
            np.testing.assert_allclose(long[key][:, :step][real], short[key][real], atol=1e-5)
        else:
            np.testing.assert_allclose(long[key], short[key], atol=1e-5)
    if name == "span":  # padded positions can never be chosen
        for key in long:
            assert (long[key][:, step:] == MASK_VALUE).all()
            assert (short[key][~real] == MASK_VALUE).all()


def test_token_loss_ignores_padding_and_unweighted_tags(heads):
    head = heads["tagger"]
    batch = head_batch("tagger")
    loss = float(head.loss_and_metrics(batch)[0])
    changed = dict(batch, tag_ids=np.where(batch["input_ids"] == PAD, 2 - batch["tag_ids"],
                                           batch["tag_ids"]))
    assert float(head.loss_and_metrics(changed)[0]) == pytest.approx(loss, rel=1e-6)

    weights = (batch["input_ids"] != PAD).astype("float32")
    weights[:, 1] = 0.0
    weighted = dict(batch, tag_weights=weights)
    changed = dict(weighted, tag_ids=batch["tag_ids"].copy())
    changed["tag_ids"][:, 1] = 2 - changed["tag_ids"][:, 1]
    assert (float(head.loss_and_metrics(changed)[0])
            == pytest.approx(float(head.loss_and_metrics(weighted)[0]), rel=1e-6))


@pytest.mark.parametrize("name", list(HEADS))
def test_loss_matches_numpy(name, heads):
    head = heads[name]
    batch = head_batch(name, seed=4)
    loss, metrics = head.loss_and_metrics(batch)
    outputs = numpy_outputs(head(inputs_of(batch)))
    if name == "regressor":
        expected = np.mean((outputs["logits"][:, 0] - batch["labels"]) ** 2)
    elif name in ("classifier", "mean_pooled", "choice"):
        logp = log_softmax(outputs["logits"])
        expected = -logp[np.arange(3), batch["labels"]].mean()
        accuracy = np.mean(outputs["logits"].argmax(-1) == batch["labels"])
        assert float(metrics["accuracy"]) == pytest.approx(accuracy)
    elif name == "tagger":
        logp = np.take_along_axis(log_softmax(outputs["logits"]), batch["tag_ids"][..., None], -1)
        expected = -logp[..., 0][batch["input_ids"] != PAD].mean()
    else:
        rows = np.arange(3)
        expected = -(log_softmax(outputs["start_logits"])[rows, batch["start_positions"]]
                     + log_softmax(outputs["end_logits"])[rows, batch["end_positions"]]).mean() / 2
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    assert float(metrics["loss"]) == float(loss)


@pytest.mark.parametrize("name", ["classifier", "mean_pooled", "tagger", "span", "choice"])
def test_save_and_load_give_identical_predictions(name, heads, tmp_path):
    head = heads[name]
    path = tmp_path / f"{name}.keras"
    head.save(path)
    loaded = keras.models.load_model(path)
    assert type(loaded) is type(head) and type(loaded.backbone) is BERT
    assert loaded.get_config() == head.get_config()
    inputs = inputs_of(head_batch(name, seed=5))
    expected, got = numpy_outputs(head(inputs)), numpy_outputs(loaded(inputs))
    for key in expected:
        np.testing.assert_array_equal(got[key], expected[key])


# --- best_span ------------------------------------------------------------------------------

def test_best_span_by_hand():
    start = np.array([1.0, 9.0, 0.0, 0.0, 0.0])
    end = np.array([8.0, 0.5, 0.0, 0.0, 5.0])
    # (1, 0) would score 17 but ends before it starts; (1, 4) scores 14.
    assert best_span(start, end) == (1, 4)
    # At most 3 tokens: (1, 1) scores 9.5, (0, 0) 9.
    assert best_span(start, end, max_length=3) == (1, 1)
    # Position 1 excluded: (0, 0) scores 9, (0, 4) 6.
    assert best_span(start, end, allowed=np.array([1, 0, 1, 1, 1], bool)) == (0, 0)
    # Only positions 2.. allowed: (2, 4) scores 5.
    assert best_span(start, end, allowed=np.arange(5) >= 2) == (2, 4)
    assert best_span(start, end, allowed=np.zeros(5, bool)) == (0, 0)
    starts, ends = best_span(np.stack([start, start]), np.stack([end, end]), max_length=3)
    np.testing.assert_array_equal(starts, [1, 1])
    np.testing.assert_array_equal(ends, [1, 1])


def test_best_span_matches_brute_force():
    rng = np.random.default_rng(0)
    start, end = rng.normal(size=(50, 9)), rng.normal(size=(50, 9))
    allowed = rng.random((50, 9)) < 0.7
    allowed[:, 4] = True  # at least one candidate per row
    starts, ends = best_span(start, end, max_length=3, allowed=allowed)
    for row in range(50):
        candidates = [(start[row, i] + end[row, j], i, j) for i in range(9) for j in range(i, 9)
                      if j - i < 3 and allowed[row, i] and allowed[row, j]]
        _, i, j = max(candidates)
        assert (starts[row], ends[row]) == (i, j)


# --- synthetic tasks, learnt ----------------------------------------------------------------

def pad_rows(rows, step):
    ids = np.full((len(rows), step), PAD, "int32")
    for i, row in enumerate(rows):
        ids[i, :len(row)] = row
    return ids


def train_and_test(make, n_train=2048, n_test=512):
    """A training set and a held-out set with no input in common."""
    train = make(np.random.default_rng(1), n_train)
    test = make(np.random.default_rng(2), n_test)
    seen = {row.tobytes() for row in train["input_ids"]}
    fresh = np.array([row.tobytes() not in seen for row in test["input_ids"]])
    return train, {key: value[fresh] for key, value in test.items()}


def fine_tune(head, data, steps, batch_size=32, learning_rate=3e-3):
    """Adam on random batches of ``data`` through one compiled step, traced once."""
    head.compile(optimizer=keras.optimizers.Adam(learning_rate))
    rng = np.random.default_rng(0)

    def sample():
        rows = rng.integers(0, len(data["input_ids"]), batch_size)
        return {key: value[rows] for key, value in data.items()}

    step = head.compiled_step(sample())
    for _ in range(steps):
        step(sample())
    assert step.experimental_get_tracing_count() == 1


def single_sentences(rng, n, step, place):
    """[CLS] + 3..step-1 words (``place`` edits the words) + padding; returns ids, extras."""
    rows, extras = [], []
    for _ in range(n):
        words = list(rng.choice(WORDS, rng.integers(3, step)))
        extras.append(place(words))
        rows.append([CLS] + words)
    ids = pad_rows(rows, step)
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids)}, np.array(extras)


def contains_seven(rng, n):
    """label 1 when token 7 occurs (half the examples), else 0."""
    def place(words):
        words[:] = [w if w != 7 else 8 for w in words]
        label = int(rng.random() < 0.5)
        if label:
            words[rng.integers(len(words))] = 7
        return label

    data, labels = single_sentences(rng, n, 12, place)
    return {**data, "labels": labels.astype("int32")}


def fraction_of_fives(rng, n):
    """target = the fraction of the words that are token 5."""
    def place(words):
        fives = rng.integers(0, len(words) + 1)
        words[:] = [5] * fives + [w if w != 5 else 6 for w in words[fives:]]
        rng.shuffle(words)
        return fives / len(words)

    data, targets = single_sentences(rng, n, 12, place)
    return {**data, "labels": targets.astype("float32")}


@pytest.mark.slow
def test_sequence_classifier_learns_whether_a_token_occurs():
    train, test = train_and_test(contains_seven)
    head = SequenceClassifier(tiny_backbone(seed=10), num_labels=2)
    fine_tune(head, train, steps=100)
    accuracy = np.mean(head(inputs_of(test)).numpy().argmax(-1) == test["labels"])
    assert accuracy >= 0.95


@pytest.mark.slow
def test_regression_head_learns_a_token_fraction():
    train, test = train_and_test(fraction_of_fives)
    head = SequenceClassifier(tiny_backbone(seed=11), num_labels=1)
    fine_tune(head, train, steps=150)
    mse = np.mean((head(inputs_of(test)).numpy()[:, 0] - test["labels"]) ** 2)
    assert mse < 0.05 * test["labels"].var()


DIGITS = np.arange(20, VOCAB)  # the tokens to tag
O, B, I = 0, 1, 2


def digit_runs(rng, n, step=14):
    """Words and runs of digits; a run's first digit is B, the rest I, everything else O.

    Padded positions carry random tags: the loss must not see them.
    """
    rows, tags = [], []
    for _ in range(n):
        row, row_tags = [CLS], [O]
        digits = rng.random() < 0.5
        while len(row) < step - 3:
            length = rng.integers(1, 4)
            if digits:
                row += list(rng.choice(DIGITS, length))
                row_tags += [B] + [I] * (length - 1)
            else:
                row += list(rng.choice(np.arange(3, 20), length))
                row_tags += [O] * length
            digits = not digits  # runs alternate, so a digit after a digit is always I
            if rng.random() < 0.25:
                break
        rows.append(row)
        tags.append(row_tags)
    ids = pad_rows(rows, step)
    tag_ids = np.where(ids == PAD, rng.integers(0, 3, ids.shape), pad_rows(tags, step))
    return {"input_ids": ids, "token_type_ids": np.zeros_like(ids),
            "tag_ids": tag_ids.astype("int32")}


@pytest.mark.slow  # 300 steps
def test_token_classifier_learns_bio_tags():
    train, test = train_and_test(digit_runs)
    head = TokenClassifier(tiny_backbone(seed=12), num_labels=3)
    fine_tune(head, train, steps=300)
    predicted = head(inputs_of(test)).numpy().argmax(-1)
    real = test["input_ids"] != PAD
    digits = test["input_ids"] >= DIGITS[0]
    assert np.mean(predicted[real] == test["tag_ids"][real]) >= 0.95
    assert np.mean(predicted[digits] == test["tag_ids"][digits]) >= 0.9  # B versus I


OPEN, CLOSE = 3, 4  # the markers around the answer


def marked_spans(rng, n, step=16):
    """[CLS] q [SEP] passage [SEP]: the answer is the 1-4 words between OPEN and CLOSE."""
    rows, segments, starts, ends = [], [], [], []
    ordinary = np.arange(5, VOCAB)
    for _ in range(n):
        passage = list(rng.choice(ordinary, rng.integers(1, 5)))
        before = list(rng.choice(ordinary, rng.integers(0, 4)))
        after = list(rng.choice(ordinary, rng.integers(0, 4)))
        question = [CLS, rng.choice(ordinary), SEP]
        starts.append(len(question) + len(before) + 1)
        ends.append(starts[-1] + len(passage) - 1)
        context = before + [OPEN] + passage + [CLOSE] + after + [SEP]
        rows.append(question + context)
        segments.append([0] * len(question) + [1] * len(context))
    return {"input_ids": pad_rows(rows, step), "token_type_ids": pad_rows(segments, step),
            "start_positions": np.array(starts, "int32"), "end_positions": np.array(ends, "int32")}


@pytest.mark.slow  # 300 steps
def test_span_extractor_finds_the_marked_span():
    train, test = train_and_test(marked_spans)
    head = SpanExtractor(tiny_backbone(seed=13))
    fine_tune(head, train, steps=300)
    logits = head(inputs_of(test))
    passage = (test["token_type_ids"] == 1) & (test["input_ids"] != PAD)
    starts, ends = best_span(logits["start_logits"].numpy(), logits["end_logits"].numpy(),
                             allowed=passage)
    exact = (starts == test["start_positions"]) & (ends == test["end_positions"])
    assert exact.mean() >= 0.95


CHOICE_WORDS = WORDS


def repeated_word_choices(rng, n, choices=4):
    """[CLS] four context words [SEP] option [SEP]; the right option repeats a context word."""
    ids = np.zeros((n, choices, 8), "int32")
    labels = rng.integers(0, choices, n).astype("int32")
    for i in range(n):
        words = rng.permutation(CHOICE_WORDS)
        context, others = words[:4], words[4:]
        options = rng.choice(others, choices)
        options[labels[i]] = rng.choice(context)
        for j, option in enumerate(options):
            ids[i, j] = [CLS, *context, SEP, option, SEP]
    segments = np.broadcast_to(np.array([0] * 6 + [1] * 2, "int32"), ids.shape).copy()
    return {"input_ids": ids, "token_type_ids": segments, "labels": labels}


@pytest.mark.slow
def test_multiple_choice_picks_the_repeated_word():
    train, test = train_and_test(repeated_word_choices)
    # Matching an option word to a context word is an attention pattern (query and key
    # projections aligned) that grows slowly from BERT's 0.02 initial weights; a wider start and
    # a second layer (to carry the match to [CLS]) make it a few seconds' work.
    head = MultipleChoice(tiny_backbone(seed=14, layers=2, initializer_range=0.2))
    fine_tune(head, train, steps=300)
    accuracy = np.mean(head(inputs_of(test)).numpy().argmax(-1) == test["labels"])
    assert accuracy >= 0.9, accuracy
