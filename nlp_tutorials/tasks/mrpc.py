"""MRPC (Dolan and Brockett, 2005): the paraphrase corpus shipped in ``data/MRPC``, and
:class:`MrpcTask`, paraphrase detection as a sentence-pair classification task.
"""
import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.base import Task, example_lines
from nlp_tutorials.tasks.glue import tsv_rows
from nlp_tutorials.tasks.metrics import accuracy, f1_score
from nlp_tutorials.tasks.shapes import SEQUENCE
from nlp_tutorials.text.packing import encode_pairs, longest_pair_length


DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "MRPC"


SPLIT_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")


@dataclass(frozen=True)
class Pair:
    """One MRPC line: label 1 if s2 paraphrases s1, else 0."""
    label: int
    id1: str
    id2: str
    s1: str
    s2: str


def load_mrpc(split: str, data_dir=None) -> list[Pair]:
    """Read the "train" or "test" pairs from ``data_dir`` (default: the repo's data/MRPC).

    The files are tab-separated with literal ``"`` inside sentences, so lines are split on tabs
    by hand: a CSV reader would treat an unclosed quote as the start of a multi-line field.
    """
    if split not in SPLIT_FILES:
        raise UserError(f"unknown MRPC split {split!r}; expected one of {', '.join(SPLIT_FILES)}")
    data_dir = Path(DEFAULT_DATA_DIR if data_dir is None else data_dir)
    path = data_dir / SPLIT_FILES[split]
    if not data_dir.is_dir():
        raise UserError(f"{data_dir}: MRPC data folder not found; expected {path} in it")
    if not path.is_file():
        raise UserError(f"{path}: MRPC file not found")
    return read_mrpc_file(path)


def read_mrpc_file(path) -> list[Pair]:
    """The pairs of one MRPC file: the corpus' own (``msr_paraphrase_train.txt``) or GLUE's
    copy (``train.tsv``, ``dev.tsv``), both a header and five tab-separated columns."""
    rows = tsv_rows(path)
    if not rows:
        raise UserError(f"{path}: file is empty; expected the MRPC header {_tabbed(HEADER)}")
    pairs = []
    for number, fields in rows:
        if number == 1:
            if tuple(fields) != HEADER:
                raise UserError(f"{path}:1: expected the header {_tabbed(HEADER)}, "
                                f"found {_tabbed(fields)[:200]}")
            continue
        if len(fields) != len(HEADER):
            raise UserError(f"{path}:{number}: expected {len(HEADER)} tab-separated columns "
                            f"({', '.join(HEADER)}), found {len(fields)}")
        if fields[0] not in ("0", "1"):
            raise UserError(f"{path}:{number}: Quality must be 0 or 1, found {fields[0][:50]!r}")
        pairs.append(Pair(int(fields[0]), *fields[1:]))
    if not pairs:
        raise UserError(f"{path}: has a header but no sentence pairs")
    return pairs


def _tabbed(fields) -> str:
    return repr("\t".join(fields))


class MrpcTask(Task):
    """Paraphrase detection: does the second sentence say what the first says?

    A sentence pair in, one of two labels out, named as the corpus' Quality column writes them
    ("0": not a paraphrase, "1": a paraphrase), so ``predict`` prints them back as the files
    hold them. Scored by accuracy and F1 of the paraphrase class, as GLUE scores it. The
    shipped files (the default) hold train (4,076 pairs) and test (1,725); dev is the last
    ``dev_size`` train pairs (GLUE holds out 408). A GLUE folder (``--data``) holds
    ``train.tsv`` and ``dev.tsv`` in the same format; GLUE's ``test.tsv`` has no labels and is
    not read. Examples are :class:`Pair`.
    """

    name = "mrpc"
    title = "MRPC"
    shape = SEQUENCE
    labels = ("0", "1")
    file_names = {"train": ("train.tsv", SPLIT_FILES["train"]), "dev": ("dev.tsv",),
                  "test": (SPLIT_FILES["test"],)}
    default_data_dir = DEFAULT_DATA_DIR
    # A higher rate than BERT's 2e-5 to 5e-5: chosen on dev for the small models here.
    recipe = {"epochs": 3, "batch_size": 32, "learning_rate": 1e-4}
    metrics = (("accuracy", "accuracy"), ("f1", "F1"))

    def read_file(self, path) -> list[Pair]:
        return read_mrpc_file(path)

    def summarize(self, pairs) -> str:
        positives = sum(p.label for p in pairs)
        return (f"{len(pairs):,} sentence pairs ({positives:,} paraphrases, "
                f"{len(pairs) - positives:,} not)")

    def texts(self, examples) -> list[str]:
        return [s for p in examples for s in (p.s1, p.s2)]

    def longest(self, tokenizer, examples) -> int:
        return longest_pair_length(tokenizer, examples)

    def augment(self, examples) -> list[Pair]:
        """The pairs, then each pair in the other order: a paraphrase either way."""
        return list(examples) + [dataclasses.replace(p, s1=p.s2, s2=p.s1) for p in examples]

    def encode(self, tokenizer, examples, max_len: int) -> dict:
        """``input_ids``, ``token_type_ids`` [n, max_len] of ``[CLS] s1 [SEP] s2 [SEP]`` and
        ``labels`` [n], int32 (see :func:`nlp_tutorials.text.packing.encode_pairs`)."""
        return encode_pairs(tokenizer, examples, max_len)

    def score(self, examples, predictions) -> dict:
        """Accuracy, and F1 of the paraphrase class (label 1)."""
        labels = np.array([p.label for p in examples])
        predicted = np.array([p.label for p in predictions])
        return {"accuracy": accuracy(labels, predicted), "f1": f1_score(labels, predicted)}

    def parse_lines(self, lines, source: str):
        """Pairs from TSV lines: ``s1<TAB>s2``, or MRPC rows (5 columns; header skipped).

        Yields a :class:`Pair` per line (label 0, both ids the line number); a malformed line
        raises UserError naming it, after the pairs before it have been yielded, and so do lines
        that hold no pair at all (blank, or a header only), once all are read.
        """
        for number, line in example_lines(
                lines, source, "no sentence pairs found (only blank lines or a header); "
                "expected one pair a line: two tab-separated sentences, or an MRPC row of 5 "
                "columns", skip=lambda line: line.startswith("Quality\t")):
            fields = line.split("\t")
            if len(fields) == len(HEADER):
                fields = fields[3:]
            if len(fields) != 2 or not all(f.strip() for f in fields):
                raise UserError(f"{source}, line {number}: expected two tab-separated sentences "
                                f"(or an MRPC row of 5 columns), got {len(fields)} field(s)")
            yield Pair(0, str(number), str(number), fields[0], fields[1])
