"""Multiple choice: SWAG's CSV and CommonsenseQA's JSON lines read as they are written, each
(context, ending) pair encoded as the tokenizer encodes it alone, the softmax taken over each
example's own endings, and a real tiny BERT trained a few steps through the choice head."""
import collections
import json
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.choice import ChoiceExample, CommonsenseQaTask, SwagTask

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
SWAG = FIXTURES / "choice" / "swag"
CSQA = FIXTURES / "choice" / "commonsenseqa"
# The real files, where a copy sits beside the repository (its data/ README lists them).
REAL_CSQA = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "commonsenseqa"
SWAG_HEADER = (",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,"
               "ending3,label\n")


def written(tmp_path, name: str, text: str, encoding="utf-8") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode(encoding) if isinstance(text, str) else text)
    return path


# --- reading ----------------------------------------------------------------------------------

def test_swag_reads_quoted_fields_and_puts_sent2_before_each_ending():
    printed = []
    task = SwagTask(data_dir=SWAG, printer=printed.append)
    train, dev = task.examples("train"), task.examples("dev")
    assert (len(train), len(dev), task.examples("test")) == (6, 3, [])
    assert printed == ["train.csv: 6 contexts, 4 choices each (ending0 2, ending1 2, ending2 1, "
                       "ending3 1)",
                       "val.csv: 3 contexts, 4 choices each (ending0 1, ending1 1, ending2 1, "
                       "ending3 0)"]
    assert train[1] == ChoiceExample(
        "1", "The girl throws a red ball, and the dog runs after it.",
        ("The dog starts to sing a song.", "The dog brings the ball back to her.",
         "The dog folds the laundry, neatly.", "The dog drives away in a car."), 1)
    assert train[2].endings[3] == 'She says "hello" to the moon.'  # "" inside quotes is one "
    assert train[4].endings[1] == "When it turns green he falls asleep on the road,\nsnoring."
    assert [e.id for e in train] == ["0", "1", "2", "3", "4", "5"]
    assert [e.label for e in dev] == [0, 2, 1]


def test_swag_finds_its_columns_by_name_with_or_without_the_index_column(tmp_path):
    path = written(tmp_path, "mine.csv",
                   "label,ending3,ending2,ending1,ending0,sent2,sent1\n"
                   "2,d.,c.,b.,a.,Then he,He sits.\n")
    assert SwagTask().read_file(path) == [
        ChoiceExample("0", "He sits.", ("Then he a.", "Then he b.", "Then he c.", "Then he d."),
                      2)]


def test_commonsenseqa_keeps_the_stem_the_choices_the_answer_and_the_id():
    printed = []
    task = CommonsenseQaTask(data_dir=CSQA, printer=printed.append)
    train = task.examples("train")
    records = [json.loads(line) for line in (CSQA / "train_rand_split.jsonl").open()]
    assert train == [ChoiceExample(r["id"], r["question"]["stem"],
                                   tuple(c["text"] for c in r["question"]["choices"]),
                                   "ABCDE".index(r["answerKey"])) for r in records]
    assert printed == ["train_rand_split.jsonl: 8 questions, 5 choices each "
                       "(A 2, B 2, C 1, D 2, E 1)"]
    assert len(task.examples("dev")) == 4


def test_commonsenseqa_real_files_hold_the_published_counts():
    if not REAL_CSQA.is_dir():
        pytest.skip(f"{REAL_CSQA} not here")
    printed = []
    task = CommonsenseQaTask(data_dir=REAL_CSQA, printer=printed.append)
    for split, file_name, count in (("train", "train_rand_split.jsonl", 9741),
                                    ("dev", "dev_rand_split.jsonl", 1221)):
        assert len(task.examples(split)) == count
        answers = collections.Counter(json.loads(line)["answerKey"]
                                      for line in (REAL_CSQA / file_name).open())
        counts = ", ".join(f"{key} {answers[key]:,}" for key in "ABCDE")
        assert f"{file_name}: {count:,} questions, 5 choices each ({counts})" in printed
    assert printed[0].startswith("train_rand_split.jsonl: 9,741 questions, 5 choices each (A 1,909")


CHOICES = [{"label": name, "text": f"answer {name}"} for name in "ABCDE"]


def csqa_line(answer="A", choices=CHOICES, stem="Why?") -> str:
    return json.dumps({"answerKey": answer, "id": "q1",
                       "question": {"question_concept": "x", "choices": choices, "stem": stem}})


@pytest.mark.parametrize("line, expected", [
    ("{not json", r"q\.jsonl:2: not valid JSON \(Expecting property name"),
    (json.dumps({"id": "q1", "question": {}}), r"q\.jsonl:2: no answerKey; expected a string$"),
    (csqa_line(stem=None), r"q\.jsonl:2: question\.stem is null; expected a string$"),
    (csqa_line(choices=CHOICES[:4]),
     r"q\.jsonl:2: expected 5 choices \(A, B, C, D, E\), found 4$"),
    (csqa_line(choices=CHOICES[:4] + [{"label": "E"}]),
     r"q\.jsonl:2: no question\.choices\[\]\.text; expected a string$"),
    (csqa_line(choices=[CHOICES[1], CHOICES[0], *CHOICES[2:]]),
     r"q\.jsonl:2: expected choices labelled A, B, C, D, E in order, found B, A, C, D, E$"),
    (csqa_line().replace('"id": "q1", ', ""), r"q\.jsonl:2: no id; expected a string$"),
    (csqa_line(answer="F"), r"q\.jsonl:2: answerKey 'F' is not one of the choices A, B, C, D, E$"),
    ('["a list"]', r"q\.jsonl:2: expected an object holding answerKey, found an array$"),
])
def test_a_bad_commonsenseqa_line_is_named_with_what_was_expected(tmp_path, line, expected):
    path = written(tmp_path, "q.jsonl", csqa_line() + "\n" + line + "\n")
    with pytest.raises(UserError, match=expected):
        CommonsenseQaTask().read_file(path)


ROW = "0,v,1,He sits. He,He sits.,He,gold,a.,b.,c.,d.,{label}\n"


@pytest.mark.parametrize("text, expected", [
    (SWAG_HEADER.replace(",label", "") + "0,v,1,He sits. He,He sits.,He,gold,a.,b.,c.,d.\n",
     r"x\.csv:1: expected a header with the SWAG columns sent1, sent2, ending0, ending1, "
     r"ending2, ending3, label; missing label \(SWAG's test\.csv has no labels to score\)$"),
    (SWAG_HEADER.replace("sent1", "first"),
     r"x\.csv:1: expected .* missing sent1$"),
    (SWAG_HEADER + ROW.format(label=1) + "\n" + "0,v,1,He,He,gold,a.,b.,c.,d.,1\n",
     r"x\.csv:4: expected 12 comma-separated fields as the header names, found 11$"),
    (SWAG_HEADER + ROW.format(label=4),
     r"x\.csv:2: label '4' is not one of the endings 0, 1, 2, 3$"),
    (SWAG_HEADER + ROW.format(label=0) + '1,v,1,"He sits,He,He,gold,a.,b.,c.,d.,0\n' + ROW,
     r"x\.csv:3: not valid CSV \(unexpected end of data\)$"),
    (SWAG_HEADER + ROW.format(label=0) + "\n" + ROW.format(label=0).replace("sits", "s\xe9"),
     r"x\.csv:4: not valid UTF-8 \(byte 0xe9\)$"),
])
def test_a_bad_swag_row_is_named_with_what_was_expected(tmp_path, text, expected):
    encoding = "latin-1" if "\xe9" in text else "utf-8"
    path = written(tmp_path, "x.csv", text, encoding)
    with pytest.raises(UserError, match=expected):
        SwagTask().read_file(path)


def test_a_file_with_only_a_header_holds_no_examples(tmp_path):
    task = SwagTask(paths={"train": written(tmp_path, "x.csv", SWAG_HEADER)})
    with pytest.raises(UserError, match=r"x\.csv: holds no SWAG examples$"):
        task.examples("train")


def test_settings_round_trip_through_json():
    task = CommonsenseQaTask(max_len=64)
    rebuilt = CommonsenseQaTask(**json.loads(json.dumps(task.settings())))
    assert (rebuilt.labels, rebuilt.max_len, rebuilt.stride) == (task.labels, 64, task.stride)


# --- encoding ---------------------------------------------------------------------------------

def tokenizers(examples):
    from nlp_tutorials.text.tokenization import WordPieceTokenizer, WordTokenizer

    texts = SwagTask().texts(examples)
    words = WordTokenizer.build(texts)
    pieces = WordPieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "he",
                                 "she", "walk", "##s", "sit", ",", ".", "dog", "##gy"])
    return [words, pieces]


@pytest.mark.parametrize("max_len", [12, 40])
def test_each_pair_is_encoded_as_the_tokenizer_encodes_it_alone(max_len):
    examples = SwagTask(data_dir=SWAG).examples("train")
    for tokenizer in tokenizers(examples):
        arrays = SwagTask().encode(tokenizer, examples, max_len)
        assert arrays["input_ids"].shape == arrays["token_type_ids"].shape == (6, 4, max_len)
        assert all(a.dtype == np.int32 for a in arrays.values())
        for row, example in enumerate(examples):
            for column, ending in enumerate(example.endings):
                ids, types = tokenizer.encode_tokens(tokenizer.tokenize(example.context),
                                                     tokenizer.tokenize(ending), max_len)
                assert arrays["input_ids"][row, column].tolist() == ids
                assert arrays["token_type_ids"][row, column].tolist() == types
        np.testing.assert_array_equal(arrays["labels"], [0, 1, 2, 3, 0, 1])
        np.testing.assert_array_equal(arrays["choice_counts"], [4] * 6)


def test_longest_is_the_longest_pair_encoded_whole():
    examples = SwagTask(data_dir=SWAG).examples("dev")
    tokenizer = tokenizers(examples)[0]
    assert SwagTask().longest(tokenizer, examples) == max(
        len(tokenizer.encode(e.context, ending)[0]) for e in examples for ending in e.endings)


def test_no_examples_encode_to_empty_arrays_of_the_task_s_width():
    from nlp_tutorials.text.tokenization import WordTokenizer

    arrays = CommonsenseQaTask().encode(WordTokenizer.build(["a"]), [], 16)
    assert arrays["input_ids"].shape == (0, 5, 16) and arrays["labels"].shape == (0,)


# --- predictions and scores -------------------------------------------------------------------

def test_predictions_are_the_softmax_arg_max_and_accuracy_matches_scikit_learn():
    from scipy.special import softmax
    from sklearn.metrics import accuracy_score

    task = CommonsenseQaTask(data_dir=CSQA)
    examples = task.examples("train")
    logits = np.random.default_rng(1).normal(size=(8, 5)).astype(np.float32)
    predictions = task.predictions(logits, {"choice_counts": np.full(8, 5)}, examples)
    np.testing.assert_allclose([p.probabilities for p in predictions],
                               softmax(logits.astype(np.float64), axis=1), rtol=1e-6)
    assert [p.label for p in predictions] == logits.argmax(axis=1).tolist()
    assert task.score(examples, predictions) == {"accuracy": pytest.approx(accuracy_score(
        [e.label for e in examples], logits.argmax(axis=1)))}
    assert task.describe({"accuracy": 0.25}) == "accuracy 25.0%"


def test_evaluate_s_file_names_each_question_by_its_id_and_the_chosen_label():
    task = CommonsenseQaTask(data_dir=CSQA)
    examples = task.examples("dev")
    logits = np.eye(5, dtype=np.float32)[[4, 0, 2, 2]]
    suffix, text = task.prediction_file(examples, task.predictions(logits, {}, examples))
    assert suffix == ".tsv"
    assert text.splitlines() == ["index\tprediction"] + [
        f"{e.id}\t{label}" for e, label in zip(examples, "EACC")]
    assert text.splitlines()[1].startswith("1afa02df02c908a558b4036e80242fac\t")


def test_predict_lines_read_with_any_number_of_endings_and_bad_lines_named():
    task = SwagTask()
    lines = ["A dog walks.\tIt sits.\tIt flies.\n", "\n",
             "She sits.\tA\tB\tC\tD\tE\r\n", "only a context\tand one ending\n"]
    read = task.parse_lines(lines, "in.tsv")
    assert next(read) == ChoiceExample("1", "A dog walks.", ("It sits.", "It flies."), 0)
    assert next(read).endings == ("A", "B", "C", "D", "E")
    with pytest.raises(UserError, match=r"in\.tsv, line 4: expected a context and at least two "
                                        r"endings, tab-separated and not blank; got 2 field"):
        next(read)
    with pytest.raises(UserError, match=r"in\.tsv: no examples found \(only blank lines\)"):
        list(task.parse_lines(["\n", "  \n"], "in.tsv"))


def test_endings_of_a_short_line_are_padded_and_left_out_of_its_softmax():
    from nlp_tutorials.text.tokenization import WordTokenizer
    from scipy.special import softmax

    task = SwagTask()
    examples = list(task.parse_lines(["a dog\tsits\twalks\n", "the dog\tsits\twalks\truns\n"],
                                     "in"))
    tokenizer = WordTokenizer.build(task.texts(examples))
    arrays = task.encode(tokenizer, examples, 8)
    assert arrays["input_ids"].shape == (2, 3, 8)
    np.testing.assert_array_equal(arrays["choice_counts"], [2, 3])
    ids, _ = tokenizer.encode_tokens(["a", "dog"], [], 8)  # [CLS] a dog [SEP] [SEP]
    assert arrays["input_ids"][0, 2].tolist() == ids
    logits = np.array([[1.0, 3.0, 50.0], [0.5, 0.0, 2.0]], np.float32)
    first, second = task.predictions(logits, arrays, examples)
    np.testing.assert_allclose(first.probabilities, softmax([1.0, 3.0]), rtol=1e-6)
    assert (first.label, second.label) == (1, 2)
    assert task.format_prediction(examples[0], first) == "walks\t0.119\t0.881"
    assert task.format_prediction(examples[1], second).split("\t")[0] == "runs"


# --- a real tiny model ------------------------------------------------------------------------

def in_tiny_vocabulary(count: int, seed: int = 0) -> list[ChoiceExample]:
    """Examples written in the tiny BERT's own words (w5 .. w99): the right one of four endings
    is the one holding w9, the others hold w8 where it does."""
    rng = np.random.default_rng(seed)

    def words(n):
        return " ".join(f"w{i}" for i in rng.integers(10, 100, n))

    examples = []
    for index, label in enumerate(rng.integers(0, 4, count)):
        endings = tuple(f"{words(2)} {'w9' if choice == label else 'w8'} {words(2)}"
                        for choice in range(4))
        examples.append(ChoiceExample(str(index), words(5), endings, int(label)))
    return examples


def tiny_bert_head(task):
    """The choice head of ``task`` around the real tiny BERT, and its tokenizer."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.text.tokenization import load_tokenizer

    keras.utils.set_random_seed(0)
    backbone = BERT.from_pretrained(FIXTURES / "bert_tiny_hf", printer=lambda *_: None)
    return task.build_head(backbone, dropout=0.0), load_tokenizer(FIXTURES / "bert_tiny_hf")


def test_a_tiny_bert_scores_the_fixture_through_the_choice_head():
    from nlp_tutorials.models.task_heads import MultipleChoice

    task = CommonsenseQaTask(data_dir=CSQA)
    examples = task.examples("train")
    head, tokenizer = tiny_bert_head(task)
    assert isinstance(head, MultipleChoice)
    batch = task.shape.for_model(task.encode(tokenizer, examples, 32))
    assert sorted(batch) == ["input_ids", "labels", "token_type_ids"]
    outputs = head(batch).numpy()
    assert outputs.shape == (8, 5)
    predictions = task.predictions(outputs, {}, examples)
    np.testing.assert_allclose([p.probabilities.sum() for p in predictions], 1.0, rtol=1e-5)
    right = [np.log(p.probabilities[e.label]) for p, e in zip(predictions, examples)]
    assert float(head.step(batch, training=False)["loss"]) == pytest.approx(-np.mean(right),
                                                                            rel=1e-4)


@pytest.mark.slow
def test_a_few_steps_of_the_choice_head_lower_its_loss():
    """The tiny BERT's vocabulary is [UNK] and w5 .. w99, so it reads every fixture word as
    [UNK] and could learn nothing there: it learns from examples in its own words."""
    import keras


    task = SwagTask()
    head, tokenizer = tiny_bert_head(task)
    batch = task.shape.for_model(task.encode(tokenizer, in_tiny_vocabulary(8), 16))
    head.compile(optimizer=keras.optimizers.Adam(1e-2))
    losses = [float(head.step(batch, training=False)["loss"])]
    for _ in range(6):
        head.step(batch)
        losses.append(float(head.step(batch, training=False)["loss"]))
    assert losses[-1] < losses[0] - 0.2, losses
