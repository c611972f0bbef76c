"""An unpickler that builds data and nothing else, for attention pickles shared between people.

``pickle.load`` calls whatever the file names (``os.system``, ``eval``, any class's
``__setstate__``), so a hostile pickle runs its own code. :func:`load_data` builds only what
:func:`nlp_tutorials.analysis.visual.save_attention_pickle` writes: dicts, lists, tuples, strings,
numbers, booleans, None and numpy arrays of booleans, integers, floats or complex numbers.
Anything else stops the load with :class:`Refused` before it is built.

Pickle's opcodes build containers and numbers by themselves; everything else is a global the
file names, which this reader maps to a short table of checking stand-ins (:data:`GLOBALS`):

- ``numpy.dtype(spec)`` gives a :class:`_DtypeSpec`, not a real dtype: numpy's
  ``dtype.__setstate__`` accepts any state (it will turn a float32 into a dtype that claims to
  hold Python objects), so the file never gets a real dtype to send a state to. Only the state
  numpy writes for a plain numeric dtype is accepted.
- arrays (``_reconstruct`` for protocols 0-4, ``_frombuffer`` for protocol 5) are built as
  :class:`_CheckedArray`, whose ``__setstate__`` accepts bytes and a numeric dtype only, so
  object arrays (whose elements would be unpickled objects) cannot be made.
- ``numpy.ndarray`` is only a marker ``_reconstruct`` accepts; ``_codecs.encode`` and
  ``bytes`` (how protocols 0-2 spell bytes) only turn text into latin-1 bytes and make empty
  bytes; numpy scalars come back as Python numbers.

Pickle's opcodes alone also make sets and bytes; :func:`load_data` refuses those once the
stream is read, and any stand-in left over. What it returns may still be any shape of data: the
caller checks the layout.
This module never imports TensorFlow.
"""
import io
import pickle
import pickletools
import re

import numpy as np

# What an attention pickle may hold, said in every refusal.
ADMITTED = "attention pickles hold only dicts, lists, strings, numbers and numeric numpy arrays"
NUMERIC_KINDS = "biufc"  # bool, signed and unsigned integers, floats, complex
# numpy pickles a numeric dtype as its kind and size in bytes: "f4", "b1", "c16", "u8".
DTYPE_SPEC = re.compile(r"[biufc][0-9]{1,2}")


class Refused(Exception):
    """The pickle asks for something this reader does not build; ``what`` names it."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def _short(value) -> str:
    """``repr(value)``, cut to 60 characters so a refusal stays one readable line."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def load_data(handle):
    """Unpickle the data in the binary file ``handle``.

    Raises :class:`Refused` for anything :data:`GLOBALS` does not admit or any other type
    left in the result (pickle's opcodes alone also make sets and bytes), and pickle's own
    exceptions (``UnpicklingError``, ``EOFError``, ``ValueError``...) for a damaged file.

    Every size the stream claims is checked before anything is built (:func:`_check_sizes`).
    """
    stream = io.BytesIO(handle.read())
    _check_sizes(stream)
    stream.seek(0)
    data = _DataUnpickler(stream).load()
    _check_types(data)
    return data


PUT_OPCODES = ("PUT", "BINPUT", "LONG_BINPUT")


def _check_sizes(stream) -> None:
    """Raise ValueError for a length (of text, bytes, a number) that runs past the end of the
    stream, or a memo index beyond the opcodes read so far.

    Pickle itself allocates what a length claims before reading it, and grows its memo to the
    index a PUT names: one damaged byte could ask for terabytes. A pickler numbers its memo
    entries 0, 1, 2, ..., one per opcode at most; ``pickletools.genops`` reads each argument
    from the stream as it is, so a length past the end shows as a short read.
    """
    for count, (opcode, argument, _) in enumerate(pickletools.genops(stream)):
        if opcode.name in PUT_OPCODES and int(argument) > count:
            raise ValueError(f"memo index {argument} beyond the {count} opcodes read")


# The types an attention pickle's data may hold once loaded (arrays as _CheckedArray).
DATA_TYPES = (dict, list, tuple, str, int, float, complex, bool, type(None))


def _check_types(root) -> None:
    """Refuse anything in ``root`` that is not :data:`DATA_TYPES` or an array, at any depth.

    Iterative, and each container visited once: a pickle can nest lists deeper than Python's
    recursion limit and share or cycle them.
    """
    seen, stack = set(), [root]
    while stack:
        value = stack.pop()
        if type(value) is _CheckedArray:
            continue
        if type(value) not in DATA_TYPES:
            raise Refused(f"a {type(value).__name__} object")
        if isinstance(value, (dict, list, tuple)) and id(value) not in seen:
            seen.add(id(value))
            stack.extend(value if not isinstance(value, dict) else
                          [item for pair in value.items() for item in pair])


class _DataUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that resolves globals from :data:`GLOBALS` only, never importing."""

    def find_class(self, module, name):
        admitted = GLOBALS.get((module, name))
        if admitted is None:
            raise Refused(_short(f"{module}.{name}"))
        return admitted

    def persistent_load(self, pid):
        raise Refused(f"persistent id {_short(pid)}")


class _Global:
    """What the stream gets for an admitted name: callable, closed to BUILD and to setattr.

    Handing the stream our own functions or classes would let a BUILD opcode set attributes
    on them (``__defaults__``, methods) for every later load in the process.
    """

    __slots__ = ("_name", "_build")

    def __init__(self, name: str, build):
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_build", build)

    def __call__(self, *args):
        if self._build is None:
            raise Refused(f"a call of {self._name!r}")
        return self._build(*args)

    def __setattr__(self, key, value):
        raise Refused(f"a change to {self._name!r}")

    def __setstate__(self, state):
        raise Refused(f"a state for {self._name!r}")

    def __repr__(self):
        return self._name


class _DtypeSpec:
    """Stands in for a numeric ``numpy.dtype`` in the stream: its spec and byte order only."""

    __slots__ = ("spec", "order")

    def __init__(self, spec: str):
        self.spec, self.order = spec, "="

    def __setstate__(self, state):
        # numpy writes (3, byte order, None, None, None, -1, -1, 0) for a plain numeric dtype;
        # the rest (subarray, names, fields, flags) would describe a structured or object one.
        if not (isinstance(state, tuple) and len(state) == 8 and state[0] == 3
                and state[1] in ("<", ">", "|", "=") and state[2:5] == (None, None, None)):
            raise Refused(f"numpy dtype {self.spec!r} with state {_short(state)}")
        self.order = state[1]

    def __repr__(self):
        return f"numpy.dtype({self.spec!r})"

    def dtype(self) -> np.dtype:
        dtype = np.dtype(self.spec)
        return dtype if self.order in "|=" else dtype.newbyteorder(self.order)


def _dtype(spec, align=False, copy=True):
    """``numpy.dtype(spec, align, copy)`` as numpy pickles it, for numeric specs only."""
    if not isinstance(spec, str) or not DTYPE_SPEC.fullmatch(spec):
        raise Refused(f"numpy dtype {_short(spec)}")
    try:
        kind = np.dtype(spec).kind
    except TypeError:
        kind = None
    if kind is None or kind not in NUMERIC_KINDS:
        raise Refused(f"numpy dtype {spec!r}")
    return _DtypeSpec(spec)


def _real_dtype(dtype) -> np.dtype:
    """The numpy dtype a :class:`_DtypeSpec` from the stream stands for."""
    if not isinstance(dtype, _DtypeSpec):
        raise Refused(f"an array whose dtype is {_short(dtype)}")
    return dtype.dtype()


class _CheckedArray(np.ndarray):
    """An array the stream is building: its state must be bytes and a numeric dtype."""

    def __setstate__(self, state):
        if not (isinstance(state, tuple) and len(state) == 5):
            raise Refused(f"an array state numpy does not write ({_short(state)})")
        version, shape, dtype, fortran, data = state
        if not isinstance(data, (bytes, bytearray)):
            raise Refused(f"array data of type {type(data).__name__}")
        super().__setstate__((version, shape, _real_dtype(dtype), fortran, data))


def _reconstruct(subtype, shape, typecode):
    """``numpy._core.multiarray._reconstruct``: the empty array a BUILD state then fills."""
    if subtype is not GLOBALS[("numpy", "ndarray")]:
        raise Refused(f"an array of type {_short(subtype)}")
    if shape != (0,) or typecode != b"b":  # numpy always writes these: the state sets the rest
        raise Refused(f"an array started as {_short((shape, typecode))}")
    return np.ndarray.__new__(_CheckedArray, (0,), np.int8)


def _frombuffer(data, dtype, shape, order):
    """``numpy._core.numeric._frombuffer``: protocol 5's contiguous arrays."""
    if not isinstance(data, (bytes, bytearray)) or order not in ("C", "F"):
        raise Refused(f"an array from {type(data).__name__} in order {_short(order)}")
    if not (isinstance(shape, tuple) and all(type(n) is int and n >= 0 for n in shape)):
        raise Refused(f"an array of shape {_short(shape)}")
    flat = np.frombuffer(data, dtype=_real_dtype(dtype))
    return flat.reshape(shape, order=order).view(_CheckedArray)


def _scalar(dtype, data):
    """``numpy._core.multiarray.scalar``: a numpy number, returned as a Python number."""
    dtype = _real_dtype(dtype)
    if not isinstance(data, bytes) or len(data) != dtype.itemsize:
        raise Refused(f"a numpy scalar from {_short(data)}")
    return np.frombuffer(data, dtype=dtype)[0].item()


def _latin1_bytes(text, encoding):
    """``_codecs.encode(text, "latin1")``: how protocols 0-2 write bytes; nothing else."""
    if not isinstance(text, str) or encoding != "latin1":
        raise Refused(f"_codecs.encode of {_short(text)} to {_short(encoding)}")
    return text.encode("latin-1")


def _empty_bytes(*args):
    """``bytes()``: how protocols 0-2 write empty bytes (an empty array's data); nothing else."""
    if args:
        raise Refused(f"bytes{_short(args)}")
    return b""


def _admit(builds: dict) -> dict:
    """{(module, name): _Global} from {"module.name" spellings: stand-in}."""
    table = {}
    for spellings, build in builds.items():
        for spelling in spellings:
            module, name = spelling.rsplit(".", 1)
            table[(module, name)] = _Global(spelling, build)
    return table


# Every global an attention pickle may name, under numpy 2's module names and numpy 1's.
GLOBALS = _admit({
    ("numpy._core.multiarray._reconstruct", "numpy.core.multiarray._reconstruct"): _reconstruct,
    ("numpy._core.numeric._frombuffer", "numpy.core.numeric._frombuffer"): _frombuffer,
    ("numpy._core.multiarray.scalar", "numpy.core.multiarray.scalar"): _scalar,
    ("numpy.dtype",): _dtype,
    ("numpy.ndarray",): None,  # only a marker: _reconstruct's first argument
    ("_codecs.encode",): _latin1_bytes,
    ("builtins.bytes", "__builtin__.bytes"): _empty_bytes,
})
