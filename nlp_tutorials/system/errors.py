"""The one exception type users see.

Everything that is the user's fault (a bad flag, a missing or malformed file, a checkpoint that
does not match) raises :class:`UserError` with a single-line message naming the file, argument or
value at fault and what was expected. The command-line front-end prints it as ``error: ...`` and
exits with status 2, so no traceback from deep inside TensorFlow or pandas ever reaches the user.
"""


class UserError(ValueError):
    """A problem with the user's input, described in one line."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


def first_line(error: Exception) -> str:
    """The first line of an exception's message (TensorFlow's can run to a page), or its type's
    name when it has none: what a one-line UserError quotes as the reason."""
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__
