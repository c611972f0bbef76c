"""Multiple choice: the right one of several endings for a context, as BERT fine-tunes SWAG
(Devlin et al., 2019, section 4.4).

Every (context, ending) pair is encoded on its own as ``[CLS] context [SEP] ending [SEP]``; the
:class:`~nlp_tutorials.models.task_heads.MultipleChoice` head gives each pair one score and a
softmax across one example's pairs picks the ending. Two data sets share the shape:

- :class:`SwagTask`, SWAG (Zellers et al., 2018): a video caption's first sentence and four
  possible next sentences, in CSV files (``train.csv``, ``val.csv``).
- :class:`CommonsenseQaTask`, CommonsenseQA (Talmor et al., 2019): a question and five
  answers, in JSON lines (``train_rand_split.jsonl``, ``dev_rand_split.jsonl``).

Both read into :class:`ChoiceExample`; neither reads its test file, which holds no answers.
"""
import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import read_utf8
from nlp_tutorials.system.json_files import json_field, json_lines
from nlp_tutorials.tasks.base import Task, example_lines
from nlp_tutorials.tasks.shapes import CHOICE, ClassPrediction, softmax
from nlp_tutorials.tasks.metrics import accuracy
from nlp_tutorials.text.tokenization import pad_ragged


@dataclass(frozen=True)
class ChoiceExample:
    """A context, its possible endings and the index of the right one (``label``; 0 for
    examples read from ``predict``'s lines, which have no answer). ``id``: CommonsenseQA's
    question id, SWAG's row index from 0, or ``predict``'s line number."""
    id: str
    context: str
    endings: tuple[str, ...]
    label: int



class ChoiceTask(Task):
    """What SWAG and CommonsenseQA share: encoding, predictions, accuracy and ``predict``'s
    lines. ``labels`` name the endings in order (SWAG "0".."3", CommonsenseQA "A".."E"), so
    an example's ``label`` indexes them and files hold ``len(labels)`` endings an example.

    ``predict`` takes any number of endings (two or more) a line: the head scores each pair
    alone, so it is not bound to the count it was fine-tuned on.
    """

    shape = CHOICE
    item = "question"  # what one example is called in a summary ("9,741 questions, ...")
    answer_prefix = ""  # put before a label in a summary's answer counts: SWAG's "ending0"

    def summarize(self, examples) -> str:
        """``9,741 questions, 5 choices each (A 1,909, B 1,973, ...)``: the right answers by
        label."""
        counts = np.bincount([e.label for e in examples], minlength=self.num_labels)
        answers = ", ".join(f"{self.answer_prefix}{name} {count:,}"
                            for name, count in zip(self.labels, counts))
        return f"{len(examples):,} {self.item}s, {self.num_labels} choices each ({answers})"

    def texts(self, examples) -> list[str]:
        return [text for e in examples for text in (e.context, *e.endings)]

    def longest(self, tokenizer, examples) -> int:
        """Tokens in the longest ``[CLS] context [SEP] ending [SEP]`` of ``examples``."""
        return max(len(tokenizer.tokenize(e.context)) + len(tokenizer.tokenize(ending)) + 3
                   for e in examples for ending in e.endings)

    def encode(self, tokenizer, examples, max_len: int) -> dict:
        """numpy int32 arrays with a row per example and, inside it, one per ending.

        ``input_ids``, ``token_type_ids`` [n, choices, max_len]: ``[CLS] context [SEP] ending
        [SEP]``, exactly as ``tokenizer.encode_tokens`` lays out one tokenized pair (segment 0
        then 1, longest-first truncation, ``[PAD]`` after), but built for all pairs at once by
        ``tokenizer.pack`` (SWAG's train file is 294,184 pairs). ``labels`` [n]: the right
        ending's index.
        ``choice_counts`` [n]: each example's number of endings. ``choices`` is the largest
        count: an example with fewer endings (``predict`` lines may differ) fills its row with
        empty endings, ``[CLS] context [SEP] [SEP]``, which :meth:`predictions` leaves out.
        """
        counts = np.array([len(e.endings) for e in examples], np.int32)  # [n]
        choices = int(counts.max(initial=0)) or self.num_labels
        contexts, endings = [], []
        for example in examples:
            context = tokenizer.convert_tokens_to_ids(tokenizer.tokenize(example.context))
            for ending in example.endings + ("",) * (choices - len(example.endings)):
                contexts.append(context)
                endings.append(tokenizer.convert_tokens_to_ids(tokenizer.tokenize(ending)))
        ids, types = tokenizer.pack(*pad_ragged(contexts), *pad_ragged(endings), max_len)
        shape = (len(examples), choices, max_len)
        return {"input_ids": ids.reshape(shape), "token_type_ids": types.reshape(shape),
                "labels": np.array([e.label for e in examples], np.int32),
                "choice_counts": counts}

    def predictions(self, outputs, encoded: dict, examples) -> list[ClassPrediction]:
        """A :class:`~nlp_tutorials.tasks.base.ClassPrediction` per example: the softmax of
        its endings' scores (``outputs`` [n, choices]) over its own endings only
        (``encoded["choice_counts"]``), and the arg-max."""
        outputs = np.asarray(outputs)
        counts = encoded.get("choice_counts", np.full(len(outputs), outputs.shape[-1]))
        found = []
        for scores, count in zip(outputs, counts):
            probabilities = softmax(scores[:count])  # [count]
            found.append(ClassPrediction(int(np.argmax(probabilities)), probabilities))
        return found

    def score(self, examples, predictions) -> dict:
        """The fraction of examples whose right ending was chosen."""
        return {"accuracy": accuracy([e.label for e in examples],
                                     [p.label for p in predictions])}

    def parse_lines(self, lines, source: str):
        """Examples from ``context<TAB>ending1<TAB>ending2...`` lines (two endings or more, as
        many as each line likes); blank lines are skipped. Yields a :class:`ChoiceExample` per
        line (label 0, id the line number)."""
        for number, line in example_lines(
                lines, source, "no examples found (only blank lines); expected one a line: "
                "context<TAB>ending1<TAB>ending2..."):
            fields = line.split("\t")
            if len(fields) < 3 or not all(field.strip() for field in fields):
                raise UserError(f"{source}, line {number}: expected a context and at least two "
                                f"endings, tab-separated and not blank; got {len(fields)} "
                                f"field(s)")
            yield ChoiceExample(str(number), fields[0], tuple(fields[1:]), 0)

    def format_prediction(self, example, prediction) -> str:
        """``chosen ending<TAB>p1<TAB>p2...``: the chosen ending's text, then the probability
        of every ending in the order given (three decimals)."""
        return "\t".join([example.endings[prediction.label],
                          *(f"{p:.3f}" for p in prediction.probabilities)])


SWAG_COLUMNS = ("sent1", "sent2", "ending0", "ending1", "ending2", "ending3", "label")


class SwagTask(ChoiceTask):
    """SWAG: which of four sentences comes next after a video caption's sentence?

    The CSV files of the SWAG repository, read with Python's ``csv`` module (fields holding
    commas are quoted): a header naming ``video-id``, ``fold-ind``, ``startphrase``, ``sent1``,
    ``sent2``, ``gold-source``, ``ending0``..``ending3``, ``label`` (the released files start
    with an unnamed index column; columns are found by name). The context is ``sent1``; each
    ending is ``sent2 + " " + ending_i``, the next sentence's first words and one way to finish
    it, as the BERT and HuggingFace SWAG recipes build the second segment. ``test.csv`` has
    no labels and is not read.
    """

    name = "swag"
    title = "SWAG"
    labels = ("0", "1", "2", "3")
    item = "context"
    answer_prefix = "ending"
    file_names = {"train": ("train.csv",), "dev": ("val.csv",)}
    recipe = {"epochs": 3, "batch_size": 16, "learning_rate": 2e-5}  # BERT paper, 4.4

    def read_file(self, path) -> list[ChoiceExample]:
        path = Path(path)
        records = csv_records(path)
        _, header = next(records, (1, []))
        columns = self.columns(path, header)
        examples = []
        for line, row in records:
            if len(row) != len(header):
                raise UserError(f"{path}:{line}: expected {len(header)} comma-separated fields "
                                f"as the header names, found {len(row)}")
            examples.append(self.swag_example(f"{path}:{line}", columns, row, len(examples)))
        return examples

    def columns(self, path: Path, header: list[str]) -> dict:
        """{column name: index} of the columns read, from the header; one missing is a
        UserError."""
        missing = [name for name in SWAG_COLUMNS if name not in header]
        if missing:
            why = " (SWAG's test.csv has no labels to score)" if missing == ["label"] else ""
            raise UserError(f"{path}:1: expected a header with the SWAG columns "
                            f"{', '.join(SWAG_COLUMNS)}; missing {', '.join(missing)}{why}")
        return {name: header.index(name) for name in SWAG_COLUMNS}

    def swag_example(self, where: str, columns: dict, row: list[str], index: int):
        """The :class:`ChoiceExample` of one CSV row; ``where`` (``file:line``) names it in
        errors."""
        label = row[columns["label"]]
        if label not in self.labels:
            raise UserError(f"{where}: label {label[:50]!r} is not one of the endings "
                            f"{', '.join(self.labels)}")
        start = row[columns["sent2"]]
        endings = tuple(f"{start} {row[columns[f'ending{i}']]}" for i in range(4))
        return ChoiceExample(str(index), row[columns["sent1"]], endings, self.labels.index(label))


def csv_records(path: Path):
    """(line number, fields) of each record of a CSV file, blank lines skipped; the number is
    the record's first line (a quoted field may hold line breaks). Broken quoting (a quote
    never closed, text after a closing quote) is a UserError naming the line: read leniently,
    it would swallow the lines after it into one field."""
    rows = csv.reader(io.StringIO(read_utf8(path), newline=""), strict=True)
    start = 1
    try:
        for row in rows:
            if row:  # the csv module gives [] for a blank line
                yield start, row
            start = rows.line_num + 1
    except csv.Error as err:
        raise UserError(f"{path}:{start}: not valid CSV ({err})") from None


class CommonsenseQaTask(ChoiceTask):
    """CommonsenseQA: which of five answers does common sense give to a question?

    JSON lines, one question a line: ``{"answerKey": "A", "id": ..., "question":
    {"question_concept": ..., "choices": [{"label": "A", "text": ...}, ...], "stem": ...}}``.
    The context is the stem, the endings the choices' texts, the label the index of
    ``answerKey``; the choices must be labelled A to E in order. The question's ``id`` is
    kept (``evaluate``'s predictions file names it). ``test_rand_split_no_answers.jsonl`` has
    no ``answerKey`` and is not read.
    """

    name = "commonsenseqa"
    title = "CommonsenseQA"
    labels = ("A", "B", "C", "D", "E")
    file_names = {"train": ("train_rand_split.jsonl",), "dev": ("dev_rand_split.jsonl",)}
    recipe = {"epochs": 3, "batch_size": 16, "learning_rate": 2e-5}  # SWAG's, BERT paper 4.4

    def read_file(self, path) -> list[ChoiceExample]:
        path = Path(path)
        return [self.question(f"{path}:{number}", record)
                for number, record in json_lines(path)]

    def question(self, where: str, record) -> ChoiceExample:
        """The example of one JSON line's value; ``where`` (``file:line``) names it in
        errors."""
        answer = json_field(record, "answerKey", str, where)
        question = json_field(record, "question", dict, where)
        stem = json_field(question, "stem", str, where, name="question.stem")
        choices = json_field(question, "choices", list, where, name="question.choices")
        if len(choices) != self.num_labels:
            raise UserError(f"{where}: expected {self.num_labels} choices "
                            f"({', '.join(self.labels)}), found {len(choices)}")
        names = [json_field(c, "label", str, where, name="question.choices[].label")
                 for c in choices]
        texts = tuple(json_field(c, "text", str, where, name="question.choices[].text")
                      for c in choices)
        if tuple(names) != self.labels:
            raise UserError(f"{where}: expected choices labelled {', '.join(self.labels)} in "
                            f"order, found {', '.join(names)}")
        if answer not in self.labels:
            raise UserError(f"{where}: answerKey {answer[:50]!r} is not one of the choices "
                            f"{', '.join(self.labels)}")
        question_id = json_field(record, "id", str, where)
        return ChoiceExample(question_id, stem, texts, self.labels.index(answer))
