"""GLUE's tasks: each reads its files exactly (quoting off, columns by header name, CoLA's
header-less columns, MNLI's two dev files), counts what the real files hold, refuses bad lines
in one line, encodes as the tokenizer does alone, scores as scikit-learn and scipy do, and
reads and writes predict's lines; STS-B as a regression end to end through its head."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.shapes import ClassPrediction
from nlp_tutorials.tasks.glue import (
    GLUE_TASKS,
    ColaTask,
    MnliTask,
    QnliTask,
    QqpTask,
    RteTask,
    ScorePrediction,
    Sst2Task,
    StsbTask,
    TextExample,
    WnliTask,
)

FIXTURES = Path(__file__).parents[1] / "fixtures" / "glue"
REAL = Path(__file__).parents[3] / "shared" / "data" / "glue"
FOLDERS = {"cola": "CoLA", "sst2": "SST-2", "stsb": "STS-B", "qqp": "QQP", "mnli": "MNLI",
           "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def lines_of(path) -> int:
    """Lines in a file, whether or not it ends with a newline."""
    text = Path(path).read_text(encoding="utf-8")
    return len(text.splitlines())


def fixture_task(task_class, **options):
    return task_class(data_dir=FIXTURES / FOLDERS[task_class.name], **options)


def test_every_glue_task_is_named_as_the_command_line_names_it():
    assert [t.name for t in GLUE_TASKS] == ["cola", "sst2", "stsb", "qqp", "mnli", "qnli",
                                            "rte", "wnli"]
    assert all(t.shape.name == "sequence" for t in GLUE_TASKS)
    assert StsbTask().num_labels == 1 and MnliTask().num_labels == 3


@pytest.mark.parametrize("task_class", GLUE_TASKS, ids=lambda t: t.name)
def test_each_task_reads_every_line_of_its_files_as_one_example(task_class):
    task = fixture_task(task_class)
    header = 0 if task_class is ColaTask else 1
    for split, name in (("train", "train.tsv"), ("dev", task.file_names["dev"][0])):
        examples = task.examples(split)
        assert len(examples) == lines_of(task.path(split)) - header
        assert task.path(split).name == name
        assert all(isinstance(e, TextExample) and (e.pair is None) != task.pair
                   for e in examples)


def test_a_stray_quote_keeps_its_line_a_row_of_its_own():
    path = FIXTURES / "STS-B" / "train.tsv"
    with open(path, encoding="utf-8", newline="") as file:
        quoted = list(csv.reader(file, delimiter="\t"))  # default quoting: lines run together
    assert len(quoted) < lines_of(path)
    pairs = StsbTask(data_dir=path.parent).examples("train")
    assert len(pairs) == lines_of(path) - 1 == 10
    assert pairs[4] == TextExample('"Then the captain was gone.', "Then the captain came back.",
                                   0.8, "2001")
    assert pairs[5] == TextExample("The problem is simpler than that.",
                                   "The problem is simple.", 3.8, "2002")
    assert pairs[8].text == '"Would you like to pay for others health care?"'  # quotes kept
    question = QnliTask(data_dir=FIXTURES / "QNLI").examples("dev")[1]
    assert question == TextExample('What did "the committee decide?',
                                   "The meeting was held in May.", "not_entailment", "1")


def test_columns_are_found_by_name_and_cola_by_position():
    assert ColaTask(data_dir=FIXTURES / "CoLA").examples("train")[7] == TextExample(
        "They drank the pub.", None, "0")
    assert Sst2Task(data_dir=FIXTURES / "SST-2").examples("dev")[1] == TextExample(
        "unflinchingly bleak and desperate ", None, "0")
    assert QqpTask(data_dir=FIXTURES / "QQP").examples("train")[2] == TextExample(
        'What does "idempotent" mean?', "What is an idempotent function?", "1", "2")
    mnli = MnliTask(data_dir=FIXTURES / "MNLI")
    assert mnli.examples("train")[1] == TextExample(
        "The office opens at nine on weekdays.", "The office is closed every weekday.",
        "contradiction", "1")
    assert mnli.examples("dev")[2].label == "neutral"  # gold_label after five label columns
    assert [e.label for e in WnliTask(data_dir=FIXTURES / "WNLI").examples("dev")] == [
        "0", "1", "0"]
    assert RteTask(data_dir=FIXTURES / "RTE").examples("train")[0].label == "not_entailment"


def test_mnli_reads_matched_dev_as_dev_and_mismatched_dev_as_test():
    printed = []
    task = MnliTask(data_dir=FIXTURES / "MNLI", printer=printed.append)
    assert [e.text for e in task.examples("test")] == [
        "Thank you for your gift to the library.", "I never learnt to swim as a child."]
    assert len(task.examples("dev")) == 3
    assert printed == [
        "dev_mismatched.tsv: 2 sentence pairs (contradiction: 1, entailment: 1, neutral: 0)",
        "dev_matched.tsv: 3 sentence pairs (contradiction: 1, entailment: 1, neutral: 1)"]
    assert Sst2Task(data_dir=FIXTURES / "SST-2").examples("test") == []  # test.tsv: no labels


def test_reading_reports_what_it_found():
    printed = []
    for task_class in (ColaTask, StsbTask, RteTask):
        fixture_task(task_class, printer=printed.append).examples("train")
    assert printed == ["train.tsv: 10 sentences (0: 3, 1: 7)",
                       "train.tsv: 10 sentence pairs, scores 0.00 to 5.00",
                       "train.tsv: 4 sentence pairs (entailment: 3, not_entailment: 1)"]


# Rows of GLUE's files (train, dev), as the shared data folder's SOURCE.md counts them.
REAL_COUNTS = {"cola": (8551, 1043), "sst2": (67349, 872), "stsb": (5749, 1500),
               "rte": (2490, 277), "wnli": (635, 71)}


@pytest.mark.parametrize("name", REAL_COUNTS)
def test_the_real_files_read_to_their_published_counts(name):
    folder = REAL / FOLDERS[name]
    if not folder.is_dir():
        pytest.skip(f"GLUE's {FOLDERS[name]} files are not here ({folder})")
    task = next(t for t in GLUE_TASKS if t.name == name)(data_dir=folder)
    assert (len(task.examples("train")), len(task.examples("dev"))) == REAL_COUNTS[name]
    summaries = {"cola": "8,551 sentences (0: 2,528, 1: 6,023)",
                 "sst2": "67,349 sentences (0: 29,780, 1: 37,569)",
                 "stsb": "5,749 sentence pairs, scores 0.00 to 5.00",
                 "rte": "2,490 sentence pairs (entailment: 1,249, not_entailment: 1,241)",
                 "wnli": "635 sentence pairs (0: 323, 1: 312)"}
    assert task.summarize(task.examples("train")) == summaries[name]


STSB_HEADER = ("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
               "sentence2\tscore\n")


@pytest.mark.parametrize("task_class, text, error", [
    (RteTask, "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tentailment\n1\tc\td\tmaybe\n",
     "dev.tsv:3: unknown label 'maybe'; RTE's labels are entailment, not_entailment"),
    (Sst2Task, "index\tsentence\n0\tgood\n",
     "dev.tsv:1: no column 'label' in the header (GLUE's test.tsv files have none); expected "
     "SST-2's columns sentence, label, found index, sentence"),
    (RteTask, "index\tsentence1\tlabel\n",
     "dev.tsv:1: no column 'sentence2' in the header; expected RTE's columns index, sentence1, "
     "sentence2, label, found index, sentence1, label"),
    (QqpTask, "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n0\t1\t2\tWhy?\t1\n",
     "dev.tsv:2: expected 6 tab-separated columns, found 5"),
    (StsbTask, STSB_HEADER + "\t".join(["0", "g", "f", "y", "1", "none", "none", "a", "b",
                                        "n/a"]) + "\n",
     "dev.tsv:2: score 'n/a' is not a number; expected a score such as 3.8"),
    # A float64 that float32 would turn into infinity.
    (StsbTask, STSB_HEADER + "\t".join(["0", "g", "f", "y", "1", "none", "none", "a", "b",
                                        "1e300"]) + "\n",
     "dev.tsv:2: score '1e300' is too large; expected a score from -1e+30 to 1e+30"),
    (ColaTask, "gj04\t1\t\tFine.\ngj04\t2\t*\tNot fine.\n",
     "dev.tsv:2: unknown label '2'; CoLA's labels are 0, 1"),
    (ColaTask, "index\tsentence\n0\tA test sentence.\n",
     "dev.tsv:1: expected 4 tab-separated columns, found 2"),
])
def test_a_bad_line_is_one_error_naming_the_file_and_line(tmp_path, task_class, text, error):
    (tmp_path / "dev.tsv").write_text(text, encoding="utf-8")
    task = task_class(paths={"train": FIXTURES / FOLDERS[task_class.name] / "train.tsv",
                             "dev": tmp_path / "dev.tsv"})
    with pytest.raises(UserError) as info:
        task.examples("dev")
    assert str(info.value) == f"{tmp_path / 'dev.tsv'}{error[len('dev.tsv'):]}"


def test_a_byte_that_is_not_utf8_is_named_with_its_line(tmp_path):
    (tmp_path / "train.tsv").write_bytes(b"sentence\tlabel\nfine\t1\nbad \xff\t0\n")
    with pytest.raises(UserError, match=r"train.tsv:3: not valid UTF-8 \(byte 0xff"):
        Sst2Task(data_dir=tmp_path).examples("train")


@pytest.fixture(scope="module")
def wordpiece():
    from nlp_tutorials.text.tokenization import load_tokenizer

    return load_tokenizer(Path(__file__).parents[1] / "fixtures" / "bert_tiny_hf")


@pytest.mark.parametrize("task_class", [ColaTask, StsbTask, MnliTask], ids=lambda t: t.name)
def test_encoding_is_each_example_encoded_alone(task_class, wordpiece):
    from nlp_tutorials.text.tokenization import WordTokenizer

    task = fixture_task(task_class)
    examples = task.examples("train")
    for tokenizer in (WordTokenizer.build(task.texts(examples)), wordpiece):
        arrays = task.encode(tokenizer, examples, 24)
        assert arrays["input_ids"].shape == arrays["token_type_ids"].shape == (len(examples), 24)
        assert arrays["input_ids"].dtype == np.int32
        for row, example in enumerate(examples):
            ids, types = tokenizer.encode(example.text, example.pair, max_len=24)
            assert arrays["input_ids"][row].tolist() == ids
            assert arrays["token_type_ids"][row].tolist() == types
        assert task.longest(tokenizer, examples) == max(
            len(tokenizer.encode(e.text, e.pair)[0]) for e in examples)
    if task.regression:
        assert arrays["labels"].dtype == np.float32
        np.testing.assert_array_equal(arrays["labels"], np.float32([e.label for e in examples]))
    else:
        assert arrays["labels"].dtype == np.int32
        np.testing.assert_array_equal(arrays["labels"],
                                      [task.labels.index(e.label) for e in examples])


def test_classification_scores_match_scikit_learn():
    from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

    rng = np.random.default_rng(0)
    for task_class in (ColaTask, QqpTask, MnliTask):
        task = fixture_task(task_class)
        examples = task.examples("train") * 5
        logits = rng.normal(size=(len(examples), task.num_labels)).astype(np.float32)
        predictions = task.predictions(logits, {}, examples)
        predicted = logits.argmax(axis=1)
        assert [p.label for p in predictions] == predicted.tolist()
        gold = [task.labels.index(e.label) for e in examples]
        want = {"accuracy": accuracy_score(gold, predicted)}
        if task_class is ColaTask:
            want["mcc"] = matthews_corrcoef(gold, predicted)
        if task_class is QqpTask:
            want["f1"] = f1_score(gold, predicted)
        assert task.score(examples, predictions) == pytest.approx(want)
        assert list(task.score(examples, predictions))[0] == task.metrics[0][0]


def test_sts_b_predicts_a_score_and_is_scored_as_scipy_scores_it():
    from scipy.stats import pearsonr, spearmanr

    task = fixture_task(StsbTask)
    examples = task.examples("train")
    outputs = np.random.default_rng(2).uniform(0, 5, size=(len(examples), 1)).astype(np.float32)
    predictions = task.predictions(outputs, {}, examples)
    assert predictions == [ScorePrediction(float(s)) for s in outputs[:, 0]]
    gold, predicted = [e.label for e in examples], outputs[:, 0]
    assert task.score(examples, predictions) == pytest.approx(
        {"pearson": pearsonr(gold, predicted)[0], "spearman": spearmanr(gold, predicted)[0]})
    assert task.describe({"pearson": 0.8812, "spearman": 0.87}) == "Pearson 88.1 Spearman 87.0"
    assert task.format_prediction(examples[0], ScorePrediction(3.81666)) == (
        "3.817\tA plane is taking off.\tAn air plane is taking off.")
    suffix, text = task.prediction_file(examples[:2], [ScorePrediction(4.5), ScorePrediction(1)])
    assert (suffix, text) == (".tsv", "index\tprediction\n0\t4.500\n1\t1.000\n")


def test_classification_prediction_file_uses_the_file_s_index_or_the_position():
    rte = fixture_task(RteTask)
    chosen = [ClassPrediction(1, np.float32([0.2, 0.8])), ClassPrediction(0, np.float32([1, 0]))]
    assert rte.prediction_file(rte.examples("dev")[1:3], chosen)[1] == (
        "index\tprediction\n1\tnot_entailment\n2\tentailment\n")
    sst2 = fixture_task(Sst2Task)
    assert sst2.prediction_file(sst2.examples("dev")[:2], chosen)[1] == (
        "index\tprediction\n0\t1\n1\t0\n")
    assert sst2.format_prediction(TextExample("so good", None, "0"), chosen[0]) == (
        "1\t0.800\tso good")


def test_predict_reads_a_sentence_or_a_pair_a_line():
    sentences = Sst2Task().parse_lines(["a fine film\n", "\n", "dull\r\n", "one\ttwo\n"],
                                       "reviews.txt")
    assert next(sentences) == TextExample("a fine film", None, "0", "1")
    assert next(sentences) == TextExample("dull", None, "0", "3")
    with pytest.raises(UserError) as info:
        next(sentences)
    assert str(info.value) == ("reviews.txt, line 4: expected one sentence (no tab) a line, got "
                               "2 tab-separated fields")
    pairs = StsbTask().parse_lines(["A man runs.\tA man is running.\n", "only one\n"], "<stdin>")
    assert next(pairs) == TextExample("A man runs.", "A man is running.", 0.0, "1")
    with pytest.raises(UserError, match=r"^<stdin>, line 2: expected two tab-separated "
                                        r"sentences a line, got 1 tab-separated fields$"):
        next(pairs)
    with pytest.raises(UserError, match=r"^p.tsv, line 1: expected two tab-separated sentences "
                                        r"a line, got an empty sentence$"):
        list(RteTask().parse_lines(["A premise.\t\n"], "p.tsv"))
    with pytest.raises(UserError, match=r"^p.tsv: no sentence pairs found \(only blank lines\); "
                                        r"expected two tab-separated sentences a line$"):
        list(QnliTask().parse_lines(["\n", "  \n"], "p.tsv"))


@pytest.mark.parametrize("task_class", GLUE_TASKS, ids=lambda t: t.name)
def test_settings_round_trip_through_json(task_class):
    task = task_class(max_len=64)
    rebuilt = task_class(**json.loads(json.dumps(task.settings())))
    assert rebuilt.settings() == task.settings()
    assert rebuilt.labels == task_class.labels and rebuilt.max_len == 64


def test_sts_b_trains_a_one_output_head_on_squared_error(tiny_bert):
    """The regression head: one output per pair, and its loss the mean squared error of the
    outputs against the gold scores."""
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import WordTokenizer

    task = fixture_task(StsbTask)
    examples = task.examples("train")
    vocab_size = tiny_bert.config.vocab_size
    tokenizer = WordTokenizer.build(task.texts(examples))
    arrays = task.encode(tokenizer, examples, 24)
    arrays["input_ids"] = arrays["input_ids"] % vocab_size  # within the tiny model's vocabulary
    head = task.build_head(tiny_bert)
    assert isinstance(head, SequenceClassifier) and head.num_labels == 1
    outputs = head({k: arrays[k] for k in ("input_ids", "token_type_ids")}).numpy()
    assert outputs.shape == (len(examples), 1)
    loss, _ = head.loss_and_metrics(arrays)
    gold = np.array([e.label for e in examples])
    assert float(loss) == pytest.approx(np.mean((outputs[:, 0] - gold) ** 2), rel=1e-5)
    assert [p.score for p in task.predictions(outputs, arrays, examples)] == pytest.approx(
        outputs[:, 0].tolist())
