"""Objects that never change once built: tasks are values.

What varies per run (a task's ``max_len``, its data folder, ``stride``) goes to the
constructor; :meth:`Frozen.replace` builds a changed copy, as :func:`dataclasses.replace` does
for a frozen dataclass. A class keeping its arguments in ``__init__`` as usual becomes frozen
by deriving from :class:`Frozen`: every attribute assignment after the constructor has
returned is refused, so one run's settings can never leak into the next's through a shared
object (:class:`~nlp_tutorials.tasks.base.Task` derives from it).
"""


class BuiltOnce(type):
    """Marks an object built once its outermost constructor returns (subclass constructors
    included), keeping the constructor's arguments for :meth:`Frozen.replace`."""

    def __call__(cls, *args, **kwargs):
        built = super().__call__(*args, **kwargs)
        object.__setattr__(built, "_arguments", (args, kwargs))  # from here on, fixed
        return built


class Frozen(metaclass=BuiltOnce):
    """Attributes set in the constructor only; :meth:`replace` for a changed copy.

    Example::

        task = get_task("mrpc", max_len=64)
        task.max_len = 32            # AttributeError: MrpcTask.max_len: a task never changes ...
        shorter = task.replace(max_len=32)   # a copy; task keeps 64
    """

    def __setattr__(self, name, value):
        self._refuse_once_built(name)
        super().__setattr__(name, value)

    def __delattr__(self, name):
        self._refuse_once_built(name)
        super().__delattr__(name)

    def _refuse_once_built(self, name: str) -> None:
        if "_arguments" in self.__dict__:
            raise AttributeError(f"{type(self).__name__}.{name}: a task never changes once "
                                 f"built; build it with what varies, or copy it with "
                                 f"task.replace(...)")

    def replace(self, **changes):
        """A copy built with ``changes`` to the constructor's arguments (``max_len=64``)."""
        args, kwargs = self._arguments
        return type(self)(*args, **{**kwargs, **changes})
