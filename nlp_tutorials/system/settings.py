"""Settings dataclasses whose fields are also command-line flags, and their kinds of value.

A field declared with :func:`setting` is a flag: its default, help text and kind of value (a
positive integer, a probability, one of some choices) are written once, where the field is,
and the command line (:mod:`nlp_tutorials.cli.flags`) makes the flag and its help from them.
A :class:`Settings` dataclass checks its rules between fields whenever it is made, from flags
or in Python; :func:`config_from_args` builds one from parsed flags, and
:func:`read_saved_settings` checks the values of a saved run as their flags would. The
run settings (:mod:`nlp_tutorials.training.config`) and the other commands' settings
(:mod:`nlp_tutorials.cli.settings`) are declared with these. This module imports neither
TensorFlow nor argparse.
"""
import dataclasses
import math
from typing import Callable

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.json_files import read_json_object
from nlp_tutorials.system.values import is_integer, is_number, refuse, shown


# --- kinds of value: text from the command line -> a checked value ---

def value_kind(convert, expected: str, accepts):
    """A parser of flag text: ``convert(text)``, refused unless ``accepts(value)``.

    A refusal is a ValueError whose message names what was expected and what came, e.g.
    "expected a positive integer, got 0" (the command line adds the flag's name).
    """
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise ValueError(f"expected {expected}, got {text!r}") from None
        if not accepts(value):
            raise ValueError(f"expected {expected}, got {text}")
        return value

    # The same rule checks the value when a saved run is read back (read_saved_settings).
    parse.expected, parse.accepts = expected, accepts
    return parse


positive_int = value_kind(int, "a positive integer", lambda value: value >= 1)
non_negative_int = value_kind(int, "a non-negative integer", lambda value: value >= 0)
positive_float = value_kind(float, "a positive number",
                            lambda value: math.isfinite(value) and value > 0)
non_negative_float = value_kind(float, "a non-negative number",
                                lambda value: math.isfinite(value) and value >= 0)
probability = value_kind(float, "a probability in [0, 1)", lambda value: 0 <= value < 1)
# Two ranges of share: strictly between 0 and 1 (a held-out part), or from 0 up to 1 (what to
# leave out, where 0 leaves everything).
open_share = value_kind(float, "a share between 0 and 1, both excluded",
                        lambda value: 0 < value < 1)
half_open_share = value_kind(float, "a share in [0, 1)", lambda value: 0 <= value < 1)


@dataclasses.dataclass(frozen=True)
class Flag:
    """How a settings field appears on the command line (see :func:`setting`)."""

    help: str | Callable          # or a function giving it when the command line is built
    kind: object = None           # a parser such as positive_int; None: the text as it is
    # The accepted values, or a function giving them when the command line is built (a
    # registry that may grow after this field was declared, such as the tasks').
    choices: tuple | Callable = None
    spelling: str = None          # e.g. "--no-swap"; None: "--" + the field's name, dashed
    aliases: tuple = ()           # other spellings kept working, e.g. ("--data-dir",)
    metavar: str = None
    default_help: str = None      # what the default means when its value would not say it
    models: tuple = None          # the model families that have the flag; None: all
    exclusive: str = None         # flags with the same group name exclude each other
    positional: bool = False
    many: bool = False            # a positional taking one or more values


FLAG = "flag"  # the key of a field's Flag in its metadata
RULE = "rule"  # the key of a flag-less field's (kind, choices) in its metadata
CHECK = "check"  # the key of a flag-less field's own check of a saved value, check(value, path)


def setting(default=dataclasses.MISSING, help: str = "", **flag):
    """A dataclass field that is also a command-line flag.

    ``default`` is the value when the flag is absent (none: the flag is required); ``help``
    is the flag's help, to which the default is added; ``flag`` holds :class:`Flag`'s other
    fields. ``help`` and ``default_help`` may name the model family's words in braces:
    ``{examples}`` ("MRPC test pairs", "held-out dates"), ``{model_dir}``.

    Example: ``steps: int = setting(1000, "optimisation steps", kind=positive_int)`` is the
    flag ``--steps STEPS``, helped as "optimisation steps (default 1000)", refusing
    ``--steps 0`` with "expected a positive integer, got 0".
    """
    return dataclasses.field(default=default, metadata={FLAG: Flag(help, **flag)})


def checked(default, kind=None, choices: tuple = None, check: Callable = None):
    """A dataclass field that is no flag, but whose value is checked as a flag's would be when
    a saved run is read back (:func:`read_saved_settings`): ``kind`` (a parser such as
    :data:`positive_int`), ``choices``; or, for a value of several parts, by
    ``check(value, path)``, which raises a UserError."""
    return dataclasses.field(default=default, metadata={RULE: (kind, choices), CHECK: check})


class Settings:
    """What every settings dataclass shares: its rules are checked as soon as it is made."""

    def __post_init__(self):
        self.check()

    def check(self, given: frozenset = frozenset()) -> None:
        """Refuse settings that cannot work together, in the words of the command's flags.

        ``given`` names the fields set on the command line (empty when made in Python).
        """

    def check_inputs(self) -> None:
        """Refuse settings naming a folder, file or environment variable that is not usable.

        Run by :func:`config_from_args` before the command starts (and so before TensorFlow
        loads); not on every construction, so a config may name a folder still to be made.
        """


def config_from_args(config_class, args, **values) -> tuple:
    """A run's config from parsed command-line ``args``: (config, names of the fields given).

    Each field of ``config_class`` whose flag was given (an attribute of ``args`` that is not
    None: the parsers leave an absent flag out) takes the flag's value; ``values`` set fields
    that come from elsewhere (``model_type``, a default ``model_dir``); the rest keep the class
    defaults. The config's ``check()`` then refuses settings that cannot work together, and
    ``check_inputs()`` folders and files that are not there. ``given``, the fields set by
    flags, lets ``train --resume`` check them against the saved run.
    """
    given = {field.name for field in dataclasses.fields(config_class)
             if getattr(args, field.name, None) is not None}
    config = config_class(**{**values, **{name: getattr(args, name) for name in given}})
    config.check(frozenset(given))
    config.check_inputs()
    return config, given


# How a saved setting of each type is recognised, and how an error names the type.
SAVED_TYPES = {bool: (lambda value: isinstance(value, bool), "true or false"),
               int: (is_integer, "an integer"), float: (is_number, "a finite number"),
               str: (lambda value: isinstance(value, str), "text")}


def read_saved_settings(config_class, path) -> dict:
    """The settings a run saved in ``path`` (``train_config.json``), once each field
    ``config_class`` declares has passed the checks its flag's value would
    (:func:`check_saved_value`) and the fields together its ``check()``.

    A file edited by hand or from elsewhere is refused in one line naming the file and field,
    rather than failing far into the run. Keys the class does not declare are returned as they
    are (the caller takes only the fields it wants).
    """
    saved = read_json_object(path)
    fields = {field.name: field for field in dataclasses.fields(config_class)}
    for name, value in saved.items():
        if name in fields:
            check_saved_value(fields[name], value, path)
    try:
        config_class(**{name: value for name, value in saved.items() if name in fields})
    except UserError as error:
        raise UserError(f"{path}: {error}") from None
    return saved


def check_saved_value(field, value, path) -> None:
    """One saved setting: of its field's type (an integer is never a boolean; a float may be
    written as an integer; numbers are finite), then, unless it is the field's default (0 may
    mean "not given"), of its flag's kind and choices; or by the field's own check."""
    if field.metadata.get(CHECK):
        field.metadata[CHECK](value, path)
        return
    kind, choices = field_rule(field)
    accepted_type, type_name = SAVED_TYPES[field.type]
    expected = ("one of " + ", ".join(map(shown, choices)) if choices
                else kind.expected if kind else type_name)
    if not accepted_type(value):
        raise refuse(path, field.name, value, expected)
    if value != field.default and ((kind and not kind.accepts(value))
                                   or (choices and value not in choices)):
        raise refuse(path, field.name, value, expected)


def field_rule(field) -> tuple:
    """(kind, choices) of a settings field: its flag's, or those :func:`checked` gave it."""
    if FLAG in field.metadata:
        return field.metadata[FLAG].kind, flag_choices(field.metadata[FLAG])
    return field.metadata.get(RULE, (None, None))


def flag_spelling(field) -> str:
    """How the command line spells the flag of settings ``field``: ``"--batch-size"``, or the
    spelling its Flag declares (``"--no-swap"``)."""
    flag = field.metadata.get(FLAG)
    return flag.spelling if flag and flag.spelling else "--" + field.name.replace("_", "-")


def field_named(settings, name: str):
    """The field ``name`` of a settings dataclass or instance."""
    return next(field for field in dataclasses.fields(settings) if field.name == name)


def flag_of(settings, name: str) -> str:
    """The flag of field ``name`` of a settings dataclass or instance, for messages."""
    return flag_spelling(field_named(settings, name))


def default_of(settings, name: str):
    """The class default of field ``name`` of a settings dataclass or instance."""
    return field_named(settings, name).default


def flag_help(flag: Flag) -> str:
    """The help text of ``flag`` now."""
    return flag.help() if callable(flag.help) else flag.help


def flag_choices(flag: Flag) -> tuple | None:
    """The values ``flag`` accepts now (None: any of its kind)."""
    return tuple(flag.choices()) if callable(flag.choices) else flag.choices
