"""MRPC (Dolan and Brockett, 2005): the paraphrase corpus shipped in ``data/MRPC``, and
:class:`MrpcTask`, paraphrase detection as a GLUE sentence-pair task.
"""
import dataclasses
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.base import example_lines
from nlp_tutorials.tasks.glue import GlueTask, TextExample

DEFAULT_DATA_DIR = Path(__file__).resolve().parents[2] / "data" / "MRPC"


SPLIT_FILES = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}


HEADER = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")


class MrpcTask(GlueTask):
    """Paraphrase detection: does the second sentence say what the first says?

    A sentence pair in, one of two labels out, named as the corpus' Quality column writes them
    ("0": not a paraphrase, "1": a paraphrase), so ``predict`` prints them back as the files
    hold them. Scored by accuracy and F1 of the paraphrase class, as GLUE scores it. The
    shipped files (the default) hold train (4,076 pairs) and test (1,725); dev is the last
    ``dev_size`` train pairs (GLUE holds out 408). A GLUE folder (``--data``) holds
    ``train.tsv`` and ``dev.tsv`` in the same five columns (:data:`HEADER`); GLUE's
    ``test.tsv`` has no labels and is not read. Examples are
    :class:`~nlp_tutorials.tasks.glue.TextExample`, as every GLUE task's.
    """

    name = "mrpc"
    title = "MRPC"
    labels = ("0", "1")
    pair = True
    columns = {"label": "Quality", "text": "#1 String", "pair": "#2 String"}
    file_names = {"train": ("train.tsv", SPLIT_FILES["train"]), "dev": ("dev.tsv",),
                  "test": (SPLIT_FILES["test"],)}
    default_data_dir = DEFAULT_DATA_DIR
    # A higher rate than BERT's 2e-5 to 5e-5: chosen on dev for the small models here.
    recipe = {"epochs": 3, "batch_size": 32, "learning_rate": 1e-4}
    metrics = (("accuracy", "accuracy"), ("f1", "F1"))
    overlap_baseline = True

    def summarize(self, pairs) -> str:
        positives = sum(p.label == "1" for p in pairs)
        return (f"{len(pairs):,} sentence pairs ({positives:,} paraphrases, "
                f"{len(pairs) - positives:,} not)")

    def augment(self, examples) -> list[TextExample]:
        """The pairs, then each pair in the other order: a paraphrase either way."""
        return list(examples) + [dataclasses.replace(e, text=e.pair, pair=e.text)
                                 for e in examples]

    def parse_lines(self, lines, source: str):
        """Pairs from TSV lines: ``s1<TAB>s2``, or MRPC rows (5 columns; header skipped).

        Yields a :class:`TextExample` per line (label "0", id the line number); a malformed
        line raises UserError naming it, after the pairs before it have been yielded, and so
        do lines that hold no pair at all (blank, or a header only), once all are read.
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
            yield TextExample(fields[0], fields[1], self.labels[0], str(number))


def load_mrpc(split: str, data_dir=None) -> list[TextExample]:
    """The "train" or "test" pairs of the corpus' own files in ``data_dir`` (default: the
    repo's data/MRPC), read as :class:`MrpcTask` reads them."""
    if split not in SPLIT_FILES:
        raise UserError(f"unknown MRPC split {split!r}; expected one of {', '.join(SPLIT_FILES)}")
    data_dir = Path(DEFAULT_DATA_DIR if data_dir is None else data_dir)
    path = data_dir / SPLIT_FILES[split]
    if not data_dir.is_dir():
        raise UserError(f"{data_dir}: MRPC data folder not found; expected {path} in it")
    if not path.is_file():
        raise UserError(f"{path}: MRPC file not found")
    return MrpcTask(paths={split: path}).read(split)
