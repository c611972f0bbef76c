"""What this machine's CPU can do in hardware: bfloat16 arithmetic, read from its flags.

The one place the CPU's flags are read: ``train``'s and ``finetune``'s ``--precision auto``
(:func:`nlp_tutorials.training.distribute.resolve_precision`, which also asks TensorFlow about
GPUs) and ``export-model --precision bfloat16``'s note
(:func:`nlp_tutorials.serving.savedmodel.export_model`) both ask here. Plain text, no TensorFlow: Linux lists each core's flags in ``/proc/cpuinfo``.
"""
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# /proc/cpuinfo's names for the instructions that multiply bfloat16 in hardware, and the names
# users know them by.
BFLOAT16_FLAGS = {"avx512_bf16": "AVX512_BF16", "amx_bf16": "AMX"}


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str] | None:
    """Every flag ``cpuinfo`` lists on its ``flags`` lines; None where it cannot be read (not
    Linux)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None
    flags = set()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags.update(line.partition(":")[2].split())
    return flags


def bfloat16_instructions(cpuinfo: Path = CPUINFO) -> list[str] | None:
    """The bfloat16 instructions this CPU has, by their usual names ("AVX512_BF16", "AMX"),
    in that order; [] for none; None where ``cpuinfo`` cannot say (not Linux)."""
    flags = cpu_flags(cpuinfo)
    if flags is None:
        return None
    return [name for flag, name in BFLOAT16_FLAGS.items() if flag in flags]


def has_bfloat16_instructions(cpuinfo: Path = CPUINFO) -> bool | None:
    """Whether this CPU multiplies bfloat16 in hardware; None where ``cpuinfo`` cannot say
    (not Linux)."""
    found = bfloat16_instructions(cpuinfo)
    return None if found is None else bool(found)
