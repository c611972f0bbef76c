"""The date-translation task: ``98-02-26`` -> ``26/Feb/1998``, generated on the fly.

Every day from 1950-01-01 to 2049-12-31 is one example (two-digit years 50-99 are 1950-1999,
00-49 are 2000-2049). A fixed seed sets aside :data:`HELD_OUT` of them that training never
sees; exact match on those measures whether the model learnt the rule rather than the dates.

Text is split into characters. The source is the 8 characters ``YY-MM-DD``; the target is
``[BOS]`` + the 11 characters ``DD/Mon/YYYY`` + ``[EOS]``. No padding is ever needed.
A training run's settings are :class:`nlp_tutorials.config.DateTrainConfig`.
This module needs only numpy, so the command line can check a date before TensorFlow loads.
"""
import datetime
import re

import numpy as np

from nlp_tutorials.system.errors import UserError

PAD, BOS, EOS = "[PAD]", "[BOS]", "[EOS]"
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
# [PAD] is 0, as the models' padding masks expect; source and target share the vocabulary.
VOCAB = (PAD, BOS, EOS) + tuple(sorted(set("0123456789-/" + "".join(MONTHS))))
IDS = {token: i for i, token in enumerate(VOCAB)}
FIRST, LAST = datetime.date(1950, 1, 1), datetime.date(2049, 12, 31)
HELD_OUT = 2000
SPLIT_SEED = 0  # fixed, so every run holds out the same dates whatever its --seed
TARGET_LEN = 13  # [BOS] DD/Mon/YYYY [EOS]

_SOURCE_RE = re.compile(r"(\d\d)-(\d\d)-(\d\d)")


def source_text(day: datetime.date) -> str:
    return f"{day.year % 100:02d}-{day.month:02d}-{day.day:02d}"


def target_text(day: datetime.date) -> str:
    return f"{day.day:02d}/{MONTHS[day.month - 1]}/{day.year}"


def parse_source(text: str) -> datetime.date:
    """The date ``YY-MM-DD`` names, or a UserError saying what was expected."""
    match = _SOURCE_RE.fullmatch(text.strip())
    expected = "expected a date as YY-MM-DD, e.g. 98-02-26 (years 50-99 are 1950-1999, 00-49 " \
               "are 2000-2049)"
    if not match:
        raise UserError(f"{text!r}: {expected}")
    yy, month, day = (int(part) for part in match.groups())
    try:
        return datetime.date(1900 + yy if yy >= 50 else 2000 + yy, month, day)
    except ValueError as err:
        raise UserError(f"{text!r}: no such date ({err}); {expected}") from None


def all_dates() -> list:
    """Every date of the task, in calendar order."""
    return [FIRST + datetime.timedelta(days=n) for n in range((LAST - FIRST).days + 1)]


def split() -> tuple:
    """(train dates, held-out dates): a fixed random :data:`HELD_OUT` dates are held out."""
    dates = all_dates()
    order = np.random.default_rng(SPLIT_SEED).permutation(len(dates))
    return [dates[i] for i in order[HELD_OUT:]], [dates[i] for i in order[:HELD_OUT]]


def encode_sources(dates) -> np.ndarray:
    """Source ids [n, 8]."""
    return np.array([[IDS[c] for c in source_text(d)] for d in dates], np.int32)


def encode_targets(dates) -> np.ndarray:
    """Target ids [n, 13]: [BOS], the characters of DD/Mon/YYYY, [EOS]."""
    return np.array([[IDS[BOS]] + [IDS[c] for c in target_text(d)] + [IDS[EOS]]
                     for d in dates], np.int32)


def decode_target(ids) -> str:
    """The text of generated ids: characters up to the first [EOS]; [PAD] and [BOS] dropped."""
    chars = []
    for i in ids:
        token = VOCAB[int(i)]
        if token == EOS:
            break
        if token not in (PAD, BOS):
            chars.append(token)
    return "".join(chars)


def exact_match(predictions, references) -> float:
    """Fraction of predictions equal to their reference, character for character."""
    predictions, references = list(predictions), list(references)
    if len(predictions) != len(references) or not references:
        raise ValueError(f"expected as many predictions as references (at least one), got "
                         f"{len(predictions)} and {len(references)}")
    return sum(p == r for p, r in zip(predictions, references)) / len(references)
