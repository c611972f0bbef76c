"""What the attention explorer shows beside a task model's example (Task.shown_answer), and the
raw-text inputs an exported model takes (Task.text_inputs), for the shapes that define their own:
a tag under each word's first token, a SQuAD answer's tokens in the shown window, a score."""
from pathlib import Path

from nlp_tutorials.tasks.conll import ConllTask
from nlp_tutorials.tasks.glue import ColaTask, ScorePrediction, StsbTask
from nlp_tutorials.tasks.squad import SpanPrediction, SquadTask
from nlp_tutorials.text.tokenization import WordTokenizer

FIXTURES = Path(__file__).parents[1] / "fixtures"


def first_row(arrays: dict, index: int = 0) -> dict:
    return {name: value[index] for name, value in arrays.items()}


def test_tags_sit_under_each_words_first_token():
    task = ConllTask(data_dir=FIXTURES / "conll")
    sentence = task.examples("train")[0]
    tokenizer = WordTokenizer.build([" ".join(s.words) for s in task.examples("train")])
    arrays = task.encode(tokenizer, [sentence], 64)
    shown = task.shown_answer(sentence, list(sentence.tags), first_row(arrays))["tags"]
    # A word tokenizer gives each word one token, after [CLS]: the tags follow one a token.
    assert shown[0] == "" and shown[1:len(sentence.words) + 1] == list(sentence.tags)
    assert set(shown[len(sentence.words) + 1:]) == {""}  # [SEP] and padding


def test_a_squad_answer_marks_the_tokens_that_spell_it():
    task = SquadTask(paths={"dev": FIXTURES / "squad" / "dev-v1.1-slice.json"})
    question = task.examples("dev")[0]
    gold = question.answers[0]
    tokenizer = WordTokenizer.build(task.texts([question]))
    arrays = task.encode(tokenizer, [question], 384)
    end = gold.start + len(gold.text)
    answer = SpanPrediction(gold.text, gold.start, end, 1.0, 0.0, gold.text)
    shown = task.shown_answer(question, answer, first_row(arrays))
    first, last = shown["tokens"]
    assert shown["answer"] == gold.text
    # The marked tokens start and end where the answer does in the context.
    assert arrays["token_char_start"][0, first] == gold.start
    assert arrays["token_char_end"][0, last] == end
    tokens = tokenizer.convert_ids_to_tokens(arrays["input_ids"][0, first:last + 1])
    assert tokens == tokenizer.tokenize(gold.text)


def test_no_answer_marks_no_tokens():
    task = SquadTask(paths={"dev": FIXTURES / "squad" / "dev-v1.1-slice.json"})
    question = task.examples("dev")[0]
    tokenizer = WordTokenizer.build(task.texts([question]))
    arrays = task.encode(tokenizer, [question], 384)
    shown = task.shown_answer(question, SpanPrediction("", -1, -1, 0.0, 1.0, "x"),
                              first_row(arrays))
    assert shown == {"answer": ""}


def test_a_regression_shows_its_score_and_single_sentences_export_one_input():
    assert StsbTask().shown_answer(None, ScorePrediction(3.14159)) == {"score": 3.1416}
    assert StsbTask().text_inputs() == ("sentence1", "sentence2")
    assert ColaTask().text_inputs() == ("sentence",)
