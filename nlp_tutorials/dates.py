"""The date-translation task: ``98-02-26`` -> ``26/Feb/1998``, generated on the fly.

Every day from 1950-01-01 to 2049-12-31 is one example (two-digit years 50-99 are 1950-1999,
00-49 are 2000-2049). A fixed seed sets aside :data:`HELD_OUT` of them that training never
sees; exact match on those measures whether the model learnt the rule rather than the dates.

Text is split into characters. The source is the 8 characters ``YY-MM-DD``; the target is
``[BOS]`` + the 11 characters ``DD/Mon/YYYY`` + ``[EOS]``. No padding is ever needed.
:class:`DateTrainConfig` holds one training run's settings and the model size they imply.
This module needs only numpy, so the command line can check a date and read the defaults
before TensorFlow loads.
"""
import dataclasses
import datetime
import re

import numpy as np

from nlp_tutorials.config import ModelConfig
from nlp_tutorials.errors import UserError

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


@dataclasses.dataclass
class DateTrainConfig:
    """One training run on the date task (defaults reach >= 99% held-out exact match)."""

    model_dir: str = "visual/models/transformer"
    steps: int = 600
    batch_size: int = 64
    learning_rate: float = 2e-3
    dim: int = 64
    layers: int = 2
    heads: int = 4
    dropout: float = 0.0
    seed: int = 1
    log_every: int = 100

    def model_config(self) -> ModelConfig:
        return ModelConfig(model_type="transformer", vocab_size=len(VOCAB),
                           hidden_size=self.dim, num_hidden_layers=self.layers,
                           num_attention_heads=self.heads, intermediate_size=4 * self.dim,
                           hidden_act="relu", hidden_dropout_prob=self.dropout,
                           attention_probs_dropout_prob=self.dropout,
                           max_position_embeddings=TARGET_LEN,
                           pad_token_id=IDS[PAD])
