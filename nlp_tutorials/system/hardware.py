"""What this machine's CPU is and can do in hardware (bfloat16 and int8 arithmetic), read from
its flags.

The one place the CPU is read: ``train``'s and ``finetune``'s ``--precision auto``
(:func:`nlp_tutorials.training.distribute.resolve_precision`, which also asks TensorFlow about
GPUs), ``export-model --precision bfloat16``'s note
(:func:`nlp_tutorials.serving.savedmodel.export_model`), ``--quantize int8``'s note on 8-bit
weights (:func:`nlp_tutorials.serving.onnx_export.export_onnx`) and the machine a results
file records (:func:`nlp_tutorials.system.provenance.machine`) all ask here. Plain text, no
TensorFlow: Linux describes each core in ``/proc/cpuinfo``.
"""
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
# /proc/cpuinfo's names for the instructions that multiply bfloat16 in hardware, and the names
# users know them by.
BFLOAT16_FLAGS = {"avx512_bf16": "AVX512_BF16", "amx_bf16": "AMX"}


def cpuinfo_values(field: str, cpuinfo: Path = CPUINFO) -> list[str] | None:
    """The values of every ``field`` line in ``cpuinfo`` (one a core), in order; None where it
    cannot be read (not Linux)."""
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None
    lines = (line.partition(":") for line in text.splitlines())
    return [value.strip() for name, _, value in lines if name.strip() == field]


def cpu_model(cpuinfo: Path = CPUINFO) -> str | None:
    """The first core's ``model name``, as ``lscpu`` shows it; None where ``cpuinfo`` cannot
    be read or names no model."""
    names = cpuinfo_values("model name", cpuinfo)
    return names[0] if names else None


def cpu_flags(cpuinfo: Path = CPUINFO) -> set[str] | None:
    """Every flag ``cpuinfo`` lists on its ``flags`` lines; None where it cannot be read (not
    Linux)."""
    lines = cpuinfo_values("flags", cpuinfo)
    return None if lines is None else {flag for line in lines for flag in line.split()}


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


# /proc/cpuinfo's names for the instructions that multiply int8 (unsigned by signed) and sum
# the products in 32 bits: AVX512_VNNI and the 256-bit AVX_VNNI.
VNNI_FLAGS = ("avx512_vnni", "avx_vnni")


def has_vnni(cpuinfo: Path = CPUINFO) -> bool | None:
    """Whether this CPU sums int8 products in 32 bits in one instruction (VNNI); without it,
    x86 sums pairs of them in 16 bits, which can saturate. None where ``cpuinfo`` cannot say."""
    flags = cpu_flags(cpuinfo)
    return None if flags is None else any(flag in flags for flag in VNNI_FLAGS)
