"""What a command writes: checked before any work, held while it runs, accounted for on Ctrl-C.

Each command names its outputs (:class:`Output`, with the flag that chose each) and the paths
it reads. :func:`writing` then, before the run does anything:

- checks each output's path: no folder on the way is a regular file, a file goes where a file
  is expected and a folder where a folder is, and the nearest folder that exists may be
  written in (:func:`check_output`);
- refuses an output that is, or lies inside, a path the command reads, compared once links and
  ``..`` are resolved, as the command would write over its own input
  (:func:`refuse_overwritten_inputs`). Only a new file may go into an input folder (an
  attention pickle beside the model it came from): it replaces nothing there;
- holds the model folders it writes (:func:`~nlp_tutorials.system.locks.held_folder`: a lock,
  and nothing of a refused run left behind).

Each refusal is one line, a UserError naming the flag and the path. Ctrl-C within it becomes
:class:`Interrupted`, whose one line says what each output holds: written (whole: every file is
renamed into place only when complete), as it was, or not written.
"""
import contextlib
import dataclasses
import os
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.locks import LOCK_NAME, entry_times, held_folder


class Interrupted(KeyboardInterrupt):
    """Ctrl-C, carrying one line that says what the interrupted command kept."""


@dataclasses.dataclass(frozen=True)
class Output:
    """A path a command writes, chosen by ``flag`` (e.g. ``--model-dir``).

    ``folder``: a folder the command fills (else one file). ``lock``: a model folder the run
    holds (see :func:`~nlp_tutorials.system.locks.held_folder`), whose ``results`` are the names
    that, once saved, make the run's files worth keeping. ``replaced``: a folder written
    elsewhere and renamed into place whole, so an input inside it would be lost.
    ``checked``: False for an output whose writer answers a bad path itself.
    """

    flag: str
    path: Path
    folder: bool = False
    lock: bool = False
    results: tuple = ()
    replaced: bool = False
    checked: bool = True


def nearest_existing(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest parent that does."""
    absolute = Path(os.path.abspath(path))
    return next(p for p in (absolute, *absolute.parents) if p.exists())


def check_output(output: Output) -> None:
    """Refuse, in one line, an output path that cannot be written (see the module's notes)."""
    path, named = Path(output.path), f"{output.flag} {output.path}"
    if path.exists():
        if output.folder and not path.is_dir():
            raise UserError(f"{named}: is a file; expected a folder")
        if not output.folder and path.is_dir():
            raise UserError(f"{named}: is a folder; expected a file")
        where = path if output.folder and not output.replaced else path.parent
    else:
        where = nearest_existing(path)
        if not where.is_dir():
            raise UserError(f"{named}: {where} is a file, not a folder; expected a path whose "
                            f"every parent is a folder")
    if not os.access(where, os.W_OK | os.X_OK):
        raise UserError(f"{named}: cannot write in {where} (permission denied); expected a "
                        f"folder you may write in")


def refuse_overwritten_inputs(outputs, inputs: dict) -> None:
    """Refuse an output that is or lies inside an input, or (``replaced``) holds one.

    ``inputs``: {flag: a path, a list of paths, or nothing}; an output and an input chosen by
    the same flag (``train --resume``'s ``--model-dir``) are one folder on purpose.
    """
    for output in outputs:
        written = Path(os.path.realpath(output.path))
        for flag, paths in inputs.items():
            for path in ([paths] if isinstance(paths, (str, os.PathLike)) else paths or []):
                if flag == output.flag or not str(path):
                    continue
                read = Path(os.path.realpath(path))
                given = f"{output.flag} {output.path}"
                if written == read:
                    kind = "folder" if output.folder else "file"
                    raise UserError(f"{given} is the same {kind} as {flag} {path}"
                                    f"{resolved(written, output, path)}; "
                                    f"the command would write over what it reads: choose "
                                    f"another {output.flag}")
                if read in written.parents and (output.folder or written.exists()):
                    raise UserError(f"{given} lies inside {flag} {path}; the command would "
                                    f"write into what it reads: choose a path outside it")
                if output.replaced and written in read.parents:
                    raise UserError(f"{flag} {path} lies inside {output.path}, which "
                                    f"{output.flag} replaces whole; choose another "
                                    f"{output.flag}")


def resolved(real: Path, output: Output, path) -> str:
    """`` (both are <real path>)`` when the two spellings differ, else nothing."""
    return "" if str(output.path) == str(path) else f" (both are {real})"


def path_state(path):
    """What :func:`writing` compares before and after: None (no such path), a file's
    modification time, or a folder's {name: modification time} (a lock file left out)."""
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir():
        return entry_times(path)
    return path.stat().st_mtime_ns


def what_is_left(output: Output, before) -> str:
    """What ``output`` holds after Ctrl-C, against its state ``before`` the run, in words."""
    after = path_state(output.path)
    if after == before:
        return f"{output.path} {'was not written' if before is None else 'is as it was'}"
    return f"{output.path} holds what was written before it, each file whole"


@contextlib.contextmanager
def writing(outputs, inputs: dict | None = None):
    """Within it, a command writes ``outputs`` (:class:`Output`) and reads ``inputs`` ({flag:
    path or paths}): both are checked first, the model folders held, and Ctrl-C raised as
    :class:`Interrupted` saying what each output holds (an Interrupted from within, which
    knows better, passes unchanged)."""
    outputs = [output for output in outputs if str(output.path)]
    for output in outputs:
        if output.checked:
            check_output(output)
    refuse_overwritten_inputs(outputs, inputs or {})
    before = {output: path_state(output.path) for output in outputs}
    try:
        with contextlib.ExitStack() as held:
            for output in outputs:
                if output.lock:
                    held.enter_context(hold(output))
            yield
    except Interrupted:
        raise
    except KeyboardInterrupt:
        kept = "; ".join(what_is_left(output, before[output]) for output in outputs)
        raise Interrupted(f"interrupted; {kept or 'nothing was written'}") from None


def hold(output: Output):
    """The model folder ``output`` held: locked from within, or (``replaced``) from the folder
    it will be renamed into, by ``.<name>.lock`` there."""
    path = Path(output.path)
    if output.replaced:
        return held_folder(path.parent, output.flag, (path.name,), f".{path.name}{LOCK_NAME}",
                           target=path)
    return held_folder(path, output.flag, output.results)
