"""SQuAD's JSON files (v1.1 and v2.0) read into questions, each field checked: a file that
breaks the format is one line naming the file and the record at fault. The task that encodes,
decodes and scores them is :mod:`nlp_tutorials.tasks.squad`.
"""
from dataclasses import dataclass
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.json_files import json_field, read_json


@dataclass(frozen=True)
class Answer:
    """A gold answer: its ``text`` and ``start``, its first character's offset in the context."""
    text: str
    start: int


@dataclass(frozen=True)
class Question:
    """One SQuAD question about one paragraph.

    ``answers`` are the gold answers (several in dev files; none for an unanswerable v2.0
    question, whose ``plausible_answers`` are the wrong answers its writers had in mind);
    ``article`` and ``paragraph`` are their indexes in the file.
    """
    id: str
    question: str
    context: str
    answers: tuple = ()
    is_impossible: bool = False
    plausible_answers: tuple = ()
    article: int = 0
    paragraph: int = 0


def _fail(path, where, expected):
    raise UserError(f"{path}: {where}: expected {expected}")


def _field(path, where, record, key, kind, expected):
    """``record[key]``, checked to be a ``kind``; UserError naming the file and ``where``."""
    return json_field(record, key, kind, f"{path}: {where}", expected)


def load_squad_json(path) -> list:
    """The ``data`` list of a SQuAD file (its articles), after checking it parses."""
    document = read_json(path, expected="a SQuAD JSON file")
    return _field(path, "top level", document, "data", list, "a list of articles")


def _answers(path, qid, context, qa, key) -> tuple:
    """The answers under ``key``, each checked to point at its own text in the context."""
    answers = []
    for answer in _field(path, f"question {qid}", qa, key, list, "a list of answers"):
        text = _field(path, f"question {qid}", answer, "text", str, "the answer's text")
        start = _field(path, f"question {qid}", answer, "answer_start", int,
                       "the answer's first character offset")
        if not text:
            _fail(path, f"question {qid}", "answers with some text, found an empty one")
        if context[start:start + len(text)] != text or start < 0:
            raise UserError(f"{path}: question {qid}: answer_start {start} does not point at "
                            f"its text {text[:60]!r} (the context there reads "
                            f"{context[max(start, 0):max(start, 0) + len(text)][:60]!r})")
        answers.append(Answer(text, start))
    return tuple(answers)


def _question(path, qa, context, article, paragraph, where) -> Question:
    """One ``qas`` entry, checked: an answerable question has answers, an impossible one none."""
    qid = _field(path, where, qa, "id", str, "the question's id, a string")
    question = _field(path, f"question {qid}", qa, "question", str, "the question's text")
    impossible = qa.get("is_impossible", False)
    if not isinstance(impossible, bool):
        _fail(path, f"question {qid}", "'is_impossible': true or false")
    answers = _answers(path, qid, context, qa, "answers")
    if impossible and answers:
        _fail(path, f"question {qid}", "no answers for an is_impossible question")
    if not impossible and not answers:
        _fail(path, f"question {qid}", "at least one answer, or 'is_impossible': true")
    plausible = _answers(path, qid, context, qa, "plausible_answers") \
        if "plausible_answers" in qa else ()
    return Question(qid, question, context, answers, impossible, plausible, article, paragraph)


def read_squad_file(path) -> list[Question]:
    """Every question of a SQuAD v1.1 or v2.0 file, in file order: ``data`` -> articles ->
    ``paragraphs`` -> ``context`` and ``qas`` -> ``id``, ``question``, ``answers`` (``text``,
    ``answer_start``), and in v2.0 ``is_impossible`` and ``plausible_answers``. A broken
    structure, an answer not at its ``answer_start`` or a repeated id is a UserError naming
    the file and the place or question id."""
    path = Path(path)
    questions, seen = [], set()
    for a, article in enumerate(load_squad_json(path)):
        where = f"data[{a}]"
        for p, paragraph in enumerate(_field(path, where, article, "paragraphs", list,
                                             "a list of paragraphs")):
            where = f"data[{a}].paragraphs[{p}]"
            context = _field(path, where, paragraph, "context", str, "the paragraph's text")
            for q, qa in enumerate(_field(path, where, paragraph, "qas", list,
                                          "a list of questions")):
                question = _question(path, qa, context, a, p, f"{where}.qas[{q}]")
                if question.id in seen:
                    _fail(path, f"question {question.id}", "each question id once")
                seen.add(question.id)
                questions.append(question)
    return questions


def squad_version(path) -> str:
    """The task a user's SQuAD file is for (``--format squad``): "squad2" when any question
    is ``is_impossible``, else "squad" (v1.1). The structure is checked as far as it is read."""
    path = Path(path)
    for a, article in enumerate(load_squad_json(path)):
        where = f"data[{a}]"
        for p, paragraph in enumerate(_field(path, where, article, "paragraphs", list,
                                             "a list of paragraphs")):
            where = f"data[{a}].paragraphs[{p}]"
            for qa in _field(path, where, paragraph, "qas", list, "a list of questions"):
                if isinstance(qa, dict) and qa.get("is_impossible") is True:
                    return "squad2"
    return "squad"
