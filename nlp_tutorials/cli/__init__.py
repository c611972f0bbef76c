"""Command-line front-ends: ``python -m nlp_tutorials.bert|gpt|transformer <command>``, and
``python -m nlp_tutorials.baseline``.

Each command's flags are the fields of its settings dataclasses (:mod:`.flags` makes them;
:mod:`nlp_tutorials.training.config` and :mod:`.settings` declare them), its run is a function
in :mod:`.runs`, and :mod:`.commands` lists the commands of each model family. Arguments are
parsed and checked before TensorFlow is imported, so ``--help`` and argument errors answer at
once; only a command's run starts TensorFlow, quietly unless ``--verbose``
(:mod:`nlp_tutorials.system.startup`). Every user error prints one line,
``<prog> <command>: error: <what and why>``, and exits with status 2. Ctrl-C in any command
prints one line, ``<prog> <command>: interrupted...`` saying what was kept (training saves a
checkpoint first), and exits with status 130.
"""
import argparse
import signal
import sys
import threading

from nlp_tutorials.cli.commands import FAMILIES, train_defaults
from nlp_tutorials.cli.flags import OneLineParser
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.outputs import Interrupted
from nlp_tutorials.system.startup import show_tensorflow_logs

__all__ = ["build_parser", "build_transformer_parser", "main", "train_defaults"]


def build_parser(model_name: str) -> OneLineParser:
    """The parser of ``python -m nlp_tutorials.<model_name>``: a sub-parser per command.

    A flag not given leaves no attribute in the parsed arguments (see :mod:`.flags`).
    """
    family = FAMILIES[model_name]
    parser = OneLineParser(prog=f"python -m nlp_tutorials.{model_name}",
                           description=family.description)
    if family.single:
        family.add_flags(parser, family.commands[0])
        return parser
    commands = parser.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    for command in family.commands:
        command_parser = commands.add_parser(command.name, help=command.help)
        family.add_flags(command_parser, command)
        if command.starts_tensorflow:
            command_parser.add_argument(
                "--verbose", action="store_true", default=argparse.SUPPRESS,
                help="show TensorFlow's own log lines (C++ and absl), which are dropped "
                     "otherwise but for errors; a TF_CPP_MIN_LOG_LEVEL you set decides instead")
    return parser


def build_transformer_parser() -> OneLineParser:
    """The parser of ``python -m nlp_tutorials.transformer``: the date-translation model."""
    return build_parser("transformer")


def main(model_name: str, argv=None) -> int:
    """Run one command of ``python -m nlp_tutorials.<model_name>``; returns the exit status.

    A UserError is printed as one line, ``<prog> <command>: error: <message>``, status 2; so is
    any error of the operating system about a file (an OSError naming it), the last resort for
    one no check foresaw. Ctrl-C is one line saying what was kept, status 130.
    """
    family = FAMILIES[model_name]
    parser = build_parser(model_name)
    args = parser.parse_args(argv)
    name = "" if family.single else args.command
    command = family.command(name)
    where = f"{parser.prog} {name}".rstrip()
    if getattr(args, "verbose", False):
        show_tensorflow_logs()
    ctrl_c_interrupts()
    try:
        status = command.start(*family.settings_from(command, args))
    except UserError as err:
        print(f"{where}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as interrupt:
        # An Interrupted says what the command kept; any other came before it wrote anything.
        told = isinstance(interrupt, Interrupted)
        print(f"{where}: {interrupt if told else 'interrupted; nothing was written'}",
              file=sys.stderr)
        return 130
    except OSError as err:
        if err.filename is None:
            raise
        print(f"{where}: error: {file_error(err)}", file=sys.stderr)
        return 2
    return 0 if status is None else status


def ctrl_c_interrupts() -> None:
    """Make Ctrl-C (SIGINT) raise KeyboardInterrupt, as Python's default does.

    A shell starts background jobs (``cmd &``) with SIGINT ignored, and Python keeps that; a
    run signalled there (``kill -INT``) would otherwise go on. Signals are handled in the main
    thread only.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def file_error(err: OSError) -> str:
    """``<file>: <the system's reason>`` (``<file> -> <other file>`` for a rename or link)."""
    files = err.filename if err.filename2 is None else f"{err.filename} -> {err.filename2}"
    return f"{files}: {err.strerror or type(err).__name__}"
