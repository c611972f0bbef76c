"""JSON files read as data, every one through :func:`parse_json`.

Python's ``json`` module parses anything it is given, but not everything it parses is safe to
use: arrays nested thousands deep end in a ``RecursionError``, an integer of thousands of digits
in a ``ValueError`` (or in minutes of arithmetic where the limit is lifted), and an escaped lone
surrogate (``"\\ud800"``) comes back as a string that no encoder takes, so it fails much later,
inside a tokenizer. Here each of these is refused at once, in one line naming the file and the
line::

    train.jsonl:3: not valid JSON (Expecting ',' delimiter at column 17)
    config.json:1: nested deeper than 64 levels
    squad.json:12: a lone surrogate \\ud800 in a string, which no Unicode text holds

A JSON-lines file is split on ``\\n`` alone (``\\r\\n`` too), as the format says: a line may hold
U+2028 or U+0085, which Python's ``str.splitlines`` would take for line ends.
"""
import json
import re

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import read_utf8

# Deeper than any file this project reads (SQuAD's answers sit 6 levels down).
MAX_JSON_DEPTH = 64
# Longer than any count, offset or id a file may hold (int64 has 19 digits).
MAX_INTEGER_DIGITS = 32

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_SURROGATE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


class _Refused(ValueError):
    """A value a hook of ``json.loads`` refused; the message says why."""


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > MAX_INTEGER_DIGITS:
        raise _Refused(f"an integer of {len(digits.lstrip('-'))} digits, longer than any count "
                       f"or id (at most {MAX_INTEGER_DIGITS})")
    return int(digits)


def parse_json(text: str, where: str, first_line: int = 1):
    """The value of the JSON ``text``; a UserError naming ``where`` (a file) and the line
    (counted from ``first_line``) for text that is not JSON or is nested too deep, holds an
    integer too long or an escaped lone surrogate."""
    try:
        value = json.loads(text, parse_int=_integer)
    except json.JSONDecodeError as err:
        raise UserError(f"{where}:{first_line + err.lineno - 1}: not valid JSON ({err.msg} at "
                        f"column {err.colno})") from None
    except RecursionError:
        _check_depth(text, where, first_line)
        raise UserError(f"{where}: nested deeper than {MAX_JSON_DEPTH} levels") from None
    except _Refused as err:
        structure = _STRING.sub('""', text)  # JSON strings hold no line ends: lines are kept
        found = re.search(rf"\d{{{MAX_INTEGER_DIGITS + 1},}}", structure)
        line = first_line + structure.count("\n", 0, found.start() if found else 0)
        raise UserError(f"{where}:{line}: {err}") from None
    _check_depth(text, where, first_line)
    _check_surrogates(text, where, first_line)
    return value


def _check_depth(text: str, where: str, first_line: int) -> None:
    """Refuse JSON nested deeper than :data:`MAX_JSON_DEPTH`, naming the line where it gets
    too deep. Once the text has parsed its strings are well formed, so blanking them leaves
    only the structure's brackets."""
    structure = _STRING.sub('""', text) if '"' in text else text
    codes = np.frombuffer(structure.encode("utf-8", "surrogatepass"), np.uint8)
    opened = (codes == ord("[")) | (codes == ord("{"))
    closed = (codes == ord("]")) | (codes == ord("}"))
    depth = np.cumsum(opened.astype(np.int64) - closed)
    if depth.size and depth.max() > MAX_JSON_DEPTH:
        deepest = int(np.argmax(depth > MAX_JSON_DEPTH))
        line = first_line + codes[:deepest].tobytes().count(b"\n")
        raise UserError(f"{where}:{line}: nested deeper than {MAX_JSON_DEPTH} levels")


def _check_surrogates(text: str, where: str, first_line: int) -> None:
    """Refuse an escaped surrogate that is not half of a pair (a high one followed by a low
    one), which Python's ``json`` accepts: no UTF-8 text can hold it."""
    paired_low = -1  # where the low half of the last pair starts
    for match in _SURROGATE.finditer(text):
        start = match.start()
        before = start
        while before and text[before - 1] == "\\":
            before -= 1
        if (start - before) % 2 or start == paired_low:
            continue  # an escaped backslash followed by "u...", or a pair's second half
        high = match.group()[3].lower() in "89ab"
        if high and _LOW_SURROGATE.match(text, match.end()):
            paired_low = match.end()
            continue
        line = first_line + text.count("\n", 0, start)
        raise UserError(f"{where}:{line}: a lone surrogate {match.group()} in a string, "
                        f"which no Unicode text holds")


def read_json(path, expected: str = ""):
    """The JSON value in the file ``path`` (UTF-8, a byte-order mark dropped), checked as
    :func:`parse_json` checks it; ``expected`` (e.g. "a SQuAD JSON file") ends its errors."""
    try:
        return parse_json(read_utf8(path), str(path))
    except UserError as err:
        if not expected:
            raise
        raise UserError(f"{err}; expected {expected}") from None


def read_json_object(path) -> dict:
    """The JSON object in ``path``; a UserError naming the file if it is unreadable or not one."""
    values = read_json(path)
    if not isinstance(values, dict):
        raise UserError(f"{path}: expected a JSON object, found {json_kind(values)}")
    return values


def json_lines(path):
    """(line number, value) of each line of a JSON-lines file that is not blank; a line that
    is not JSON is a UserError naming the file, the line and the column."""
    for number, line in enumerate(read_utf8(path).split("\n"), start=1):
        if line.strip():
            yield number, parse_json(line.removesuffix("\r"), str(path), number)


JSON_KINDS = {dict: "an object", list: "an array", str: "a string", bool: "true or false",
              int: "an integer", float: "a number", type(None): "null"}


def json_kind(value) -> str:
    """What a JSON value is, as an error says it: "an array", "a string", "true", ..."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return JSON_KINDS.get(type(value), type(value).__name__)


REQUIRED = object()  # json_field's default: the field must be there


def json_field(record, key: str, kind, where: str, expected: str = "", name: str = "",
               default=REQUIRED):
    """``record[key]``, checked before use: ``record`` must be a JSON object and ``key`` hold a
    ``kind`` (a type or a tuple of types; true and false are never numbers here). Else a
    UserError naming ``where`` (the file, and the line or record), the field (``name``, by
    default the key), what it holds and what was ``expected`` (by default the kind)::

        train.jsonl:3: question.stem is null; expected a string

    A field that is missing returns ``default`` when one is given.
    """
    kinds = kind if isinstance(kind, tuple) else (kind,)
    expected = expected or " or ".join(JSON_KINDS.get(k, k.__name__) for k in kinds)
    name = name or key
    if not isinstance(record, dict):
        raise UserError(f"{where}: expected an object holding {name}, found {json_kind(record)}")
    if key not in record:
        if default is REQUIRED:
            raise UserError(f"{where}: no {name}; expected {expected}")
        return default
    value = record[key]
    if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
        raise UserError(f"{where}: {name} is {json_kind(value)}; expected {expected}")
    return value
