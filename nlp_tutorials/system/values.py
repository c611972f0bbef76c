"""Checking what a file says, one field at a time, before anything uses it.

A number read from a file the user hands over (``corpus.json``, ``config.json``,
``train_config.json``, ``task.json``, ``head_importance.json``, an attention pickle) may be of
the wrong type (``"32"`` for 32, ``true`` for 1), out of range (a dropout of 1.5) or not finite
(JSON readers accept ``NaN`` and ``Infinity``). Used unchecked it fails far away, inside Keras
or TensorFlow, blaming something else. The readers check each field with these functions, so
the error is one line naming the file, the field, what it holds and what was expected::

    corpus.json: max_len is "32"; expected an integer of at least 8
    config.json: hidden_dropout_prob is 1.5; expected a finite number in [0, 1)
    head_importance.json: 'importance' holds NaN at [layer 1, head 0]; expected finite ...

Booleans are never numbers here (Python counts ``True`` as 1; a file that says ``true`` where
a count belongs is wrong). This module imports numpy only.
"""
import json
import math
import numbers

import numpy as np

from nlp_tutorials.system.errors import UserError

SHOWN_CHARACTERS = 60  # a value quoted in an error is cut to this length


def shown(value) -> str:
    """``value`` as the file spells it (JSON: ``"32"``, ``true``, ``NaN``), cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARACTERS else text[:SHOWN_CHARACTERS - 3] + "..."


def refuse(source, field: str, value, expected: str) -> UserError:
    """The error for ``field`` of ``source`` holding ``value``: one line, to raise."""
    return UserError(f"{source}: {field} is {shown(value)}; expected {expected}")


def is_integer(value) -> bool:
    """An integer (Python's or numpy's), never a boolean."""
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_number(value) -> bool:
    """A finite real number (an integer is one too), never a boolean."""
    return (isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
            and math.isfinite(value))


def integer_range(minimum=None, maximum=None) -> str:
    """How an error says "an integer from ``minimum`` to ``maximum``" (either may be open)."""
    if minimum is not None and maximum is not None:
        return f"an integer from {minimum} to {maximum}"
    if minimum is not None:
        return {0: "a non-negative integer", 1: "a positive integer"}.get(
            minimum, f"an integer of at least {minimum}")
    return "an integer" if maximum is None else f"an integer of at most {maximum}"


def number_range(low=None, high=None, low_open=False, high_open=False) -> str:
    """How an error says "a finite number between ``low`` and ``high``"; an open end excludes
    its bound: ``number_range(0, 1, high_open=True)`` is "a finite number in [0, 1)"."""
    if low is not None and high is not None:
        opening, closing = "(" if low_open else "[", ")" if high_open else "]"
        return f"a finite number in {opening}{low}, {high}{closing}"
    if low is not None:
        return f"a finite number {'>' if low_open else '>='} {low}"
    if high is not None:
        return f"a finite number {'<' if high_open else '<='} {high}"
    return "a finite number"


def check_integer(value, field: str, source, minimum=None, maximum=None) -> int:
    """``value`` if it is an integer from ``minimum`` to ``maximum`` (None: no bound)."""
    if not is_integer(value) or (minimum is not None and value < minimum) or (
            maximum is not None and value > maximum):
        raise refuse(source, field, value, integer_range(minimum, maximum))
    return value


def check_number(value, field: str, source, low=None, high=None, *, low_open=False,
                 high_open=False) -> float:
    """``value`` if it is a finite number between ``low`` and ``high`` (None: no bound); an
    open end excludes the bound itself."""
    inside = is_number(value) and (
        low is None or (value > low if low_open else value >= low)) and (
        high is None or (value < high if high_open else value <= high))
    if not inside:
        raise refuse(source, field, value, number_range(low, high, low_open, high_open))
    return value


def check_text(value, field: str, source, choices=None) -> str:
    """``value`` if it is a string (one of ``choices``, when given)."""
    if not isinstance(value, str) or (choices is not None and value not in choices):
        expected = "text" if choices is None else "one of " + ", ".join(map(shown, choices))
        raise refuse(source, field, value, expected)
    return value


def required(values: dict, name: str, source, expected: str):
    """``values[name]``; a one-line error naming ``source`` when the field is missing."""
    if name not in values:
        raise UserError(f"{source}: no {name}; expected {expected}")
    return values[name]


def integer_field(values: dict, name: str, source, minimum=None, maximum=None) -> int:
    """The integer field ``name`` of a file's JSON object, present and in range."""
    return check_integer(required(values, name, source, integer_range(minimum, maximum)),
                         name, source, minimum, maximum)


def text_field(values: dict, name: str, source, choices=None) -> str:
    """The text field ``name`` of a file's JSON object, present (and one of ``choices``)."""
    expected = "text" if choices is None else "one of " + ", ".join(map(shown, choices))
    return check_text(required(values, name, source, expected), name, source, choices)


# --- arrays of numbers ---

# What an array holds, by numpy's kind letter, when it is not real numbers.
NOT_NUMBERS = {"b": "booleans", "c": "complex numbers", "U": "text", "S": "bytes",
               "O": "nulls, ragged lists or objects", "V": "records", "M": "dates",
               "m": "durations"}


def number_array(values, field: str, source, expected: str, dtype=np.float64,
                 kinds: str = "iuf") -> np.ndarray:
    """``values`` (nested lists or an array) as an array of ``dtype``, if they are real
    numbers: of numpy's ``kinds`` (integers and floats; add "b" to take booleans as 0 and 1).
    Complex numbers, text and ragged lists are refused, naming ``field``."""
    try:
        array = np.asarray(values)
    except (TypeError, ValueError, MemoryError, RecursionError):
        array = np.empty(0, object)  # nested lists numpy cannot make an array of
    if array.dtype.kind not in kinds:
        raise UserError(f"{source}: {field} is not a numeric array (it holds "
                        f"{NOT_NUMBERS[array.dtype.kind]}); expected {expected}")
    return array.astype(dtype)


def at(index, axes=None) -> str:
    """A numpy index as an error shows it: ``[1, 0]``, or with the axes' names ``[layer 1,
    head 0]``."""
    names = axes or [""] * len(index)
    return "[" + ", ".join(f"{name} {int(i)}".strip() for name, i in zip(names, index)) + "]"


def check_finite(array: np.ndarray, field: str, source, expected: str,
                 axes=None) -> np.ndarray:
    """``array`` if every value is finite; else an error naming the first NaN or infinity
    and where it is (by ``axes``, the names of the array's axes, when given)."""
    bad = ~np.isfinite(array)
    if bad.any():
        index = tuple(np.argwhere(bad)[0])
        value = array[index]
        name = "NaN" if np.isnan(value) else ("inf" if value > 0 else "-inf")
        raise UserError(f"{source}: {field} holds {name} at {at(index, axes)}; expected "
                        f"{expected}")
    return array


def check_between(array: np.ndarray, field: str, source, low, high, expected: str,
                  axes=None) -> np.ndarray:
    """``array`` if every value is in [``low``, ``high``] (None: no bound); else an error
    naming the first value outside and where it is (as :func:`check_finite`)."""
    outside = np.zeros(array.shape, bool)
    if low is not None:
        outside |= array < low
    if high is not None:
        outside |= array > high
    if outside.any():
        index = tuple(np.argwhere(outside)[0])
        raise UserError(f"{source}: {field} holds {array[index]:.6g} at {at(index, axes)}; "
                        f"expected {expected}")
    return array
