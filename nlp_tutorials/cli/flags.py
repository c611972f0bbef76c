"""Settings dataclasses -> argparse flags, in the manner of HuggingFace's HfArgumentParser.

A field declared with :func:`nlp_tutorials.system.settings.setting` becomes one flag: its name
(``--batch-size`` for ``batch_size``, unless the field spells it otherwise), its kind of value,
choices and help come from the field, and the help ends with the field's default, so the
default is written in one place. A field without that metadata is no flag.

Every flag's argparse default is "absent" (``argparse.SUPPRESS``): a flag not given leaves no
attribute, so :func:`~nlp_tutorials.system.settings.config_from_args` tells the flags a user
gave (``given``) from the dataclass defaults.
"""
import argparse
import dataclasses

from nlp_tutorials.system.settings import FLAG, flag_choices, flag_help, flag_spelling


class OneLineParser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block) so it reads like every other error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def flag_fields(settings_class, model_name: str) -> list:
    """The fields of ``settings_class`` that are flags of ``model_name``'s commands."""
    return [field for field in dataclasses.fields(settings_class)
            if FLAG in field.metadata
            and model_name in (field.metadata[FLAG].models or (model_name,))]


def add_settings_flags(parser, settings_class, model_name: str, defaults: dict, words: dict):
    """Add a flag to ``parser`` for each flag field of ``settings_class``.

    ``defaults`` replaces some fields' defaults for this model family (``model_dir``: its
    own folder); ``words`` fills the braces of help texts (``{examples}``).
    """
    groups = {}
    for field in flag_fields(settings_class, model_name):
        flag = field.metadata[FLAG]
        default = defaults.get(field.name, field.default)
        if flag.exclusive and flag.exclusive not in groups:
            groups[flag.exclusive] = parser.add_mutually_exclusive_group()
        target = groups.get(flag.exclusive, parser)
        target.add_argument(*flag_names(field), default=argparse.SUPPRESS,
                            help=help_text(flag, default, words), **value_options(field, default))


def flag_names(field) -> list:
    """``["--batch-size"]`` for a flag, ``[]`` for a positional (argparse takes its dest)."""
    flag = field.metadata[FLAG]
    if flag.positional:
        return []
    return [flag_spelling(field), *flag.aliases]


def value_options(field, default) -> dict:
    """argparse's keywords for the field's value: an on/off switch, a kind, choices, arity."""
    flag = field.metadata[FLAG]
    if flag.positional:
        return {"dest": field.name, "metavar": flag.metavar or field.name,
                "nargs": "+" if flag.many else "?", "type": argparse_type(flag.kind)}
    options = {"dest": field.name}
    if isinstance(default, bool):
        # A switch turns the default over: --jit sets True, --no-swap sets False.
        options["action"] = "store_false" if default else "store_true"
        return options
    if default is dataclasses.MISSING:
        options["required"] = True
    return {**options, "type": argparse_type(flag.kind), "choices": flag_choices(flag),
            "metavar": flag.metavar}


def argparse_type(kind):
    """``kind`` (text -> value, ValueError when refused) as argparse wants it: its refusal
    an ArgumentTypeError, which argparse prints as "argument --steps: <message>"."""
    if kind is None:
        return None

    def parse(text: str):
        try:
            return kind(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def help_text(flag, default, words: dict) -> str:
    """The flag's help with its default: "(default 16)", or "(default: <what it means>)"."""
    text = flag_help(flag).format_map(words)
    if flag.default_help is not None:
        text += f" (default: {flag.default_help.format_map(words)})"
    elif default not in (dataclasses.MISSING, None, "") and not isinstance(default, bool):
        text += f" (default {default})"
    return text.replace("%", "%%")  # argparse formats help with %
