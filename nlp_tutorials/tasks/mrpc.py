"""MRPC (Dolan and Brockett, 2005): reading the paraphrase corpus shipped in ``data/MRPC``.
"""
from dataclasses import dataclass
from pathlib import Path


from nlp_tutorials.system.errors import UserError


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
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read ({err.strerror})") from None
    # Bytes are split before decoding so a bad byte can be reported with its line number.
    lines = raw.removeprefix(b"\xef\xbb\xbf").split(b"\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise UserError(f"{path}: file is empty; expected the MRPC header {_tabbed(HEADER)}")
    pairs = []
    for number, line in enumerate(lines, start=1):
        try:
            fields = line.removesuffix(b"\r").decode("utf-8").split("\t")
        except UnicodeDecodeError as err:
            raise UserError(f"{path}:{number}: not valid UTF-8 "
                            f"(byte {line[err.start]:#04x} at column {err.start + 1})") from None
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
