"""A fifth shape, made up in this file alone: one number per token.

Its shape names its head (a token regressor defined here) and the arrays the head reads, one
of a name no other shape uses (``numbers``); its serving module (defined here) registers itself
for it; it has no baselines. Its task reads ``words<TAB>numbers`` lines. Nothing in the package
is edited: fine-tuning, ``evaluate`` and ``export-model`` run it as they run the four shapes.
"""
import json
from types import SimpleNamespace

import keras
import numpy as np
import pytest
import tensorflow as tf

from nlp_tutorials.models.task_heads import TokenClassifier
from nlp_tutorials.serving.savedmodel import SequenceModule
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks import TASKS
from nlp_tutorials.tasks.base import Task, example_lines
from nlp_tutorials.tasks.shapes import Shape
from support import REPOSITORY

TINY_BERT = REPOSITORY / "tests" / "fixtures" / "bert_tiny_hf"  # vocabulary: w5 ... w99


@keras.saving.register_keras_serializable(package="tests_new_shape")
class TokenRegressor(TokenClassifier):
    """A number per token: the token classifier's one output read as the number, trained by
    squared error against ``numbers`` on the tokens ``tag_weights`` marks."""

    def __init__(self, backbone, num_labels: int = 1, dropout=None, **kwargs):
        super().__init__(backbone, num_labels=1, dropout=dropout, **kwargs)

    def loss_and_metrics(self, batch, training=False):
        numbers = self(batch, training=training)[..., 0]  # [batch, step]
        weights = tf.cast(batch["tag_weights"], numbers.dtype)
        error = tf.square(numbers - tf.cast(batch["numbers"], numbers.dtype)) * weights
        loss = tf.reduce_sum(error) / tf.maximum(tf.reduce_sum(weights), 1.0)
        return loss, {"loss": loss}


class NumberPerToken(Shape):
    name = "number per token"
    text_inputs = ("sentence",)
    model_arrays = ("input_ids", "token_type_ids", "numbers", "tag_weights")
    served = True

    def head_class(self):
        return TokenRegressor


NUMBER_PER_TOKEN = NumberPerToken()


@NUMBER_PER_TOKEN.register_server
class NumberModule(SequenceModule):
    """The shape's serving module: its SavedModel answers ``numbers`` float32 [batch, step]."""

    answers_label_names = False

    def answer(self, logits):
        return {"numbers": tf.cast(logits, tf.float32)[..., 0]}


class Numbers(Task):
    """``w12 w40 w7<TAB>1 1 0``: each word's number (here: 1 where the word's index is even)."""

    name, title, shape, labels = "numbers", "Numbers", NUMBER_PER_TOKEN, ("number",)
    file_names = {"train": ("train.tsv",), "dev": ("dev.tsv",)}
    recipe = {"epochs": 2, "batch_size": 8, "learning_rate": 1e-3}
    metrics = (("agreement", "agreement"),)  # tokens whose rounded number is right

    def read_file(self, path):
        examples = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            words, _, numbers = line.partition("\t")
            examples.append((words.split(), [float(n) for n in numbers.split()]))
            if len(examples[-1][0]) != len(examples[-1][1]):
                raise UserError(f"{path}, line {number}: expected a number per word")
        return examples

    def texts(self, examples):
        return [" ".join(words) for words, _ in examples]

    def longest(self, tokenizer, examples):
        return 2 + max(len(words) for words, _ in examples)

    def encode(self, tokenizer, examples, max_len):
        rows = len(examples)
        ids = np.full((rows, max_len), tokenizer.pad_id, np.int32)
        numbers, weights = np.zeros((rows, max_len), np.float32), np.zeros((rows, max_len))
        for row, (words, targets) in enumerate(examples):
            words, targets = words[:max_len - 2], targets[:max_len - 2]
            ids[row, :len(words) + 2] = [tokenizer.cls_id,
                                         *tokenizer.convert_tokens_to_ids(words),
                                         tokenizer.sep_id]
            numbers[row, 1:len(words) + 1], weights[row, 1:len(words) + 1] = targets, 1.0
        return {"input_ids": ids, "token_type_ids": np.zeros_like(ids), "numbers": numbers,
                "tag_weights": weights.astype(np.float32)}

    def predictions(self, outputs, encoded, examples):
        return [np.asarray(row)[1:len(words) + 1, 0].tolist()
                for row, (words, _) in zip(outputs, examples)]

    def score(self, examples, predictions):
        right = [round(p) == t for (_, targets), guess in zip(examples, predictions)
                 for p, t in zip(guess, targets)]
        return {"agreement": float(np.mean(right))}

    def prediction_file(self, examples, predictions):
        return ".json", json.dumps(predictions)

    def parse_lines(self, lines, source):
        for _, line in example_lines(lines, source, "no words found"):
            yield line.split(), [0.0] * len(line.split())

    def format_prediction(self, example, prediction):
        return " ".join(f"{word}={number:.2f}" for word, number in zip(example[0], prediction))


def write_split(path, rows: int, seed: int):
    rng = np.random.default_rng(seed)
    lines = []
    for _ in range(rows):
        indices = rng.integers(5, 100, size=rng.integers(2, 7))
        lines.append(" ".join(f"w{i}" for i in indices) + "\t"
                     + " ".join(str(int(i % 2 == 0)) for i in indices))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def train_arrays(task_class, tmp_path):
    """(task, fine-tuning's train arrays of it) on 8 written examples, batches of 4."""
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.training.finetuning import encode_splits

    write_split(tmp_path / "train.tsv", 8, seed=0)
    write_split(tmp_path / "dev.tsv", 4, seed=1)
    task = task_class(data_dir=tmp_path, max_len=12)
    settings = SimpleNamespace(swap_augment=False, batch_size=4)
    train, _, _ = encode_splits(task, load_tokenizer(TINY_BERT), settings)
    return task, train


def test_an_array_of_a_new_name_reaches_the_model_when_its_shape_declares_it(tmp_path):
    from nlp_tutorials.bert import BERT

    task, train = train_arrays(Numbers, tmp_path)
    assert sorted(train) == sorted(NUMBER_PER_TOKEN.model_arrays)
    words, targets = task.examples("train")[0]
    assert train["numbers"][0, 1:len(words) + 1].tolist() == targets
    head = TokenRegressor(BERT.from_pretrained(TINY_BERT, printer=None), dropout=0.0)
    loss, _ = head.loss_and_metrics(train)
    # The loss worked out here: squared error against the numbers on the marked tokens.
    numbers = np.asarray(head(train))[..., 0]
    weights = train["tag_weights"]
    expected = ((numbers - train["numbers"]) ** 2 * weights).sum() / weights.sum()
    assert float(loss) == pytest.approx(float(expected), rel=1e-5)


def test_an_array_its_shape_does_not_declare_is_a_one_line_error(tmp_path):
    class Undeclared(NumberPerToken):  # forgets the new array
        model_arrays = ("input_ids", "token_type_ids", "tag_weights")

    class Forgetful(Numbers):
        shape = Undeclared()

    with pytest.raises(UserError) as error:
        train_arrays(Forgetful, tmp_path)
    assert str(error.value) == ("array 'numbers': the number per token shape declares it "
                                "neither in model_arrays (input_ids, token_type_ids, "
                                "tag_weights) nor in decoding_arrays (none)")


@pytest.mark.slow
def test_a_made_up_shape_fine_tunes_evaluates_and_exports(tmp_path, monkeypatch):
    from nlp_tutorials.serving.savedmodel import export_model
    from nlp_tutorials.training.config import FinetuneConfig
    from nlp_tutorials.finetuned.evaluation import evaluate_model
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.inference import head_outputs
    from nlp_tutorials.training.finetuning import finetune

    monkeypatch.setitem(TASKS, Numbers.name, Numbers)
    data = tmp_path / "data"
    data.mkdir()
    write_split(data / "train.tsv", 48, seed=0)
    write_split(data / "dev.tsv", 16, seed=1)
    model_dir = tmp_path / "model"
    result = finetune(FinetuneConfig(task="numbers", data=str(data), init_from=str(TINY_BERT),
                                     output_dir=str(model_dir), max_len=12),
                      printer=lambda line: None)
    assert [run["epoch"] for run in result["runs"]] and (model_dir / "model.keras").is_file()

    head, tokenizer, task = load_finetuned(model_dir, data_dir=str(data))
    assert isinstance(head, TokenRegressor) and isinstance(task, Numbers)
    dev = task.examples("dev")
    arrays = task.encode(tokenizer, dev, task.max_len)
    numbers = np.asarray(head_outputs(head, arrays))[..., 0]  # [examples, step]
    # The score, worked out here from the head's own outputs.
    right = [round(float(numbers[row, 1 + i])) == target
             for row, (_, targets) in enumerate(dev) for i, target in enumerate(targets)]
    scores = evaluate_model(model_dir, "dev", tmp_path / "scores", data_dir=str(data),
                            dev_size=0, printer=lambda line: None)
    assert scores == {"agreement": pytest.approx(np.mean(right))}
    assert len(json.loads((tmp_path / "scores" / "predictions_dev.json").read_text())) == 16

    version = export_model(model_dir, tmp_path / "served", ids_only=True,
                           printer=lambda line: None)
    served = tf.saved_model.load(str(version)).signatures["predict_ids"]
    ids = tf.constant(arrays["input_ids"])
    answer = served(input_ids=ids, token_type_ids=tf.zeros_like(ids),
                    attention_mask=tf.cast(ids != tokenizer.pad_id, tf.int32))
    real = arrays["input_ids"] != tokenizer.pad_id  # head_outputs pads what batches trimmed
    np.testing.assert_allclose(answer["numbers"].numpy()[real], numbers[real], atol=1e-5)
