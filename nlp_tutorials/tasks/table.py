"""A user's own data: sentences (or sentence pairs) and their labels or scores in a table, as
:class:`CustomTask` ("custom").

The files are what people write from a spreadsheet, pandas or a script: CSV or TSV with a
header, read with Python's :mod:`csv` module (so a field in double quotes may hold commas, tabs,
newlines and ``""`` for a quote, unlike GLUE's files), or JSON lines (one object a line). The
columns that hold the text and the answer are named: ``--text-columns review`` or
``--text-columns question,answer``, and ``--label-column stars``. Labels are any strings; the
task learns them from train, sorted, and keeps them with the model, so ``predict`` prints them
back. With ``--regression`` the label column holds numbers, learnt with one output and scored
by the Pearson and Spearman correlations.
"""
import csv
import io
import json
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import read_utf8
from nlp_tutorials.system.json_files import json_lines
from nlp_tutorials.tasks.glue import SentenceTask, TextExample

# The file formats, by the suffix that names each.
FORMATS = {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl",
           ".jsonlines": "jsonl"}


def file_format_of(path, file_format: str | None) -> str:
    """``file_format`` when given, else the format ``path``'s suffix names."""
    if file_format is not None:
        return file_format
    if Path(path).suffix.lower() not in FORMATS:
        raise UserError(f"{path}: cannot tell the format from the suffix "
                        f"{Path(path).suffix or '(none)'!r}; expected a .csv, .tsv or .jsonl "
                        f"file, or the format named (csv, tsv or jsonl)")
    return FORMATS[Path(path).suffix.lower()]



def table_records(path, delimiter: str, wanted) -> list[tuple[int, dict]]:
    """(line number, {column: value}) of each row of a CSV or TSV file with a header, the line
    being the one the row starts on (a quoted field may span lines). Every ``wanted`` column
    must be in the header, every row as long as the header."""
    reader = csv.reader(io.StringIO(read_utf8(path), newline=""), delimiter=delimiter)
    header, records, next_line = None, [], 1
    try:
        for row in reader:
            number, next_line = next_line, reader.line_num + 1
            if not row:  # a blank line
                continue
            if header is None:
                header = row
                missing = [name for name in wanted if name not in header]
                if missing:
                    raise UserError(f"{path}: no column {missing[0]!r}; the columns are "
                                    f"{', '.join(header)[:200]}")
                continue
            if len(row) != len(header):
                raise UserError(f"{path}:{number}: expected {len(header)} columns as the header "
                                f"names, found {len(row)}")
            records.append((number, dict(zip(header, row))))
    except csv.Error as err:
        raise UserError(f"{path}:{reader.line_num}: not readable as CSV ({err})") from None
    return records


def json_records(path, wanted) -> list[tuple[int, dict]]:
    """(line number, object) of each non-blank line of a JSON-lines file; each must be an
    object holding every ``wanted`` field."""
    records = []
    for number, record in json_lines(path):
        if not isinstance(record, dict):
            raise UserError(f"{path}:{number}: expected a JSON object a line, found "
                            f"{type(record).__name__}")
        missing = [name for name in wanted if name not in record]
        if missing:
            raise UserError(f"{path}:{number}: no field {missing[0]!r}; the fields there are "
                            f"{', '.join(record)[:200]}")
        records.append((number, record))
    return records


class CustomTask(SentenceTask):
    """Your own sentence (or sentence-pair) classification or regression.

    Args:
        text_columns: the one or two columns holding the text (a list, or "a,b").
        label_column: the column holding the label (or the score, with ``regression``).
        regression: scores (numbers) instead of labels: one output, squared error, scored by
            the Pearson and Spearman correlations; else labels, scored by accuracy.
        file_format: "csv", "tsv" or "jsonl"; None: each file's suffix tells (.csv, .tsv,
            .jsonl, .json).
        options: the :class:`~nlp_tutorials.tasks.base.Task`'s (``paths``: ``--train``,
            ``--dev``, ``--test``; or ``data_dir`` holding ``train.csv``, ``dev.csv`` ...).

    Example::

        task = CustomTask(text_columns=["review"], label_column="stars",
                          paths={"train": "train.csv", "dev": "dev.csv"})
        train = task.examples("train")  # TextExample(text, None, "4", None), ...
    """

    name = "custom"
    title = "own data"
    labels = ()
    file_names = {split: tuple(f"{split}{suffix}" for suffix in (".csv", ".tsv", ".jsonl"))
                  for split in ("train", "dev", "test")}

    def __init__(self, text_columns=("text",), label_column: str = "label",
                 regression: bool = False, file_format: str | None = None, **options):
        super().__init__(**options)
        if isinstance(text_columns, str):
            text_columns = text_columns.split(",")
        self.text_columns = [name.strip() for name in text_columns]
        if not 1 <= len(self.text_columns) <= 2 or not all(self.text_columns):
            raise UserError(f"--text-columns {','.join(self.text_columns)!r}: expected one or "
                            f"two column names, separated by a comma")
        if file_format not in (None, "csv", "tsv", "jsonl"):
            raise UserError(f"file format {file_format!r}: expected csv, tsv or jsonl")
        self.label_column = label_column
        self.regression = bool(regression)
        self.file_format = file_format
        self.pair = len(self.text_columns) == 2
        if self.regression:
            self.labels = ("score",)
            self.metrics = (("pearson", "Pearson"), ("spearman", "Spearman"))

    def settings(self) -> dict:
        """The base's, and the columns, ``regression`` and the file format, so that
        ``predict`` and ``evaluate`` read as fine-tuning did."""
        return {**super().settings(), "text_columns": list(self.text_columns),
                "label_column": self.label_column, "regression": self.regression,
                "file_format": self.file_format}

    @property
    def known_labels(self) -> str:
        return "the labels in train are"

    def read_file(self, path) -> list[TextExample]:
        """Every row of a CSV, TSV or JSON-lines file, in file order."""
        wanted = [*self.text_columns, self.label_column]
        file_format = file_format_of(path, self.file_format)
        if file_format == "jsonl":
            records = json_records(path, wanted)
        else:
            records = table_records(path, "," if file_format == "csv" else "\t", wanted)
        examples = []
        for number, record in records:
            texts = [self.text_field(path, number, record, name) for name in self.text_columns]
            label = self.read_label(path, number, self.label_field(record))
            examples.append(TextExample(texts[0], texts[1] if self.pair else None, label))
        return examples

    def text_field(self, path, number: int, record: dict, name: str) -> str:
        """The text in column ``name``: a JSON value must be a string."""
        value = record[name]
        if not isinstance(value, str):
            raise UserError(f"{path}:{number}: field {name!r} holds {json.dumps(value)[:50]}; "
                            f"expected text (a JSON string)")
        return value

    def label_field(self, record: dict) -> str:
        """The label column's value as text: JSON numbers and booleans as JSON writes them
        (1, 2.5, true), so a label 1 and a label "1" are the same label."""
        value = record[self.label_column]
        return value if isinstance(value, str) else json.dumps(value)
