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
