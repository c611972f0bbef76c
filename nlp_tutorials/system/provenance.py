"""Where and when a run ran: what a results file records beside its figures.

A figure is only comparable with another measured on the same kind of machine and code, so
``finetune``'s ``results.json`` carries the command line, the date, the machine (the CPU model
as ``lscpu`` names it, the vector extensions that change TensorFlow's speed, the GPUs) and the
code's revision; ``scripts/results_tables.py`` reads them from there into the documentation's
results tables.
"""
import datetime
import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

from nlp_tutorials.system import hardware

# The CPU flags that decide which kernels oneDNN and XLA use, as /proc/cpuinfo spells them.
SPEED_FLAGS = ("avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
               "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8")
UNKNOWN = "unknown"


def run_provenance(gpus: list | None = None) -> dict:
    """The command line of this process, the UTC date and time, the machine and the revision."""
    return {"command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": machine(gpus), "revision": revision()}


def machine(gpus: list | None = None, cpuinfo: Path = hardware.CPUINFO) -> dict:
    """The CPU's model name and speed flags (read by :mod:`~nlp_tutorials.system.hardware`
    from ``cpuinfo``, what ``lscpu`` shows; off Linux the platform's processor name), the
    logical CPUs this process may use, and ``gpus`` (the names TensorFlow lists)."""
    model = hardware.cpu_model(cpuinfo) or platform.processor() or UNKNOWN
    flags = hardware.cpu_flags(cpuinfo) or set()
    usable = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
              else os.cpu_count())
    return {"cpu": model, "cpus": usable, "flags": [f for f in SPEED_FLAGS if f in flags],
            "gpus": list(gpus or []), "system": f"{platform.system()} {platform.machine()}"}


def revision(folder: Path = Path(__file__).resolve().parent) -> str:
    """The git commit of the code at ``folder``, ``-dirty`` when it has changes not committed;
    the package's version where it is not a git checkout."""
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=40"],
                              cwd=folder, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        done = None
    if done is not None and done.returncode == 0 and done.stdout.strip():
        return done.stdout.strip()
    try:
        return f"nlp_tutorials {importlib.metadata.version('nlp_tutorials')}, no git checkout"
    except importlib.metadata.PackageNotFoundError:
        return UNKNOWN
