"""Starting TensorFlow for a command: its settings, and a first screen without alarms.

TensorFlow reads some settings from the environment only as it loads, so :func:`start_tensorflow`
makes them before the first import; a variable the user set keeps the user's value:

- ``TF_ENABLE_ONEDNN_OPTS=1``: oneDNN kernels halve the default BERT step on a 2-core AVX2 CPU
  (1.28 s -> 0.61 s, measured 2026-11-30; see benchmarks/RESULTS.md).
- ``TF_CPP_MIN_LOG_LEVEL=2``: TensorFlow's C++ log keeps its errors and drops INFO and WARNING
  lines; absl's Python log (TensorFlow's and Keras' ``WARNING:absl:`` lines) likewise keeps its
  errors. A command's ``--verbose`` (:func:`show_tensorflow_logs`) asks for every line instead,
  as ``TF_CPP_MIN_LOG_LEVEL=0`` does.

TensorFlow 2.21 writes its first log lines while its libraries load, before it reads
``TF_CPP_MIN_LOG_LEVEL``: on a machine without a GPU, ``import tensorflow`` and the first look
at the devices print, whatever the level::

    WARNING: All log messages before absl::InitializeLog() is called are written to STDERR
    I0000 00:00:1796141491.440452    4914 port.cc:153] oneDNN custom operations are on. ...
    I0000 00:00:1796141491.448817    4914 cudart_stub.cc:31] Could not find cuda drivers ...
    E0000 00:00:1796141498.681609    4914 cuda_platform.cc:52] failed call to cuInit: ...

(the first three twice). So :func:`start_tensorflow` imports TensorFlow and lists its devices
with standard error filtered (:func:`filtered_stderr`): those early lines are dropped as the
log level says TensorFlow would drop later ones. With the level left to this module, the CUDA
driver probe's failure is dropped too on a machine with no NVIDIA device (no ``/dev/nvidia*``,
no WSL GPU ``/dev/dxg``) and no ``CUDA_VISIBLE_DEVICES``: there it says only that there is no
GPU. Every other line, a fatal one included, passes in order. ``TF_CPP_MIN_LOG_LEVEL=0`` shows
everything.
"""
import contextlib
import glob
import os
import subprocess
import sys

DEFAULT_LOG_LEVEL = "2"
# absl's log line: severity letter, MMDD, time, thread id, file:line]
_ABSL_LINE = r"[{letters}]\d{{4}} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "
_ABSL_PREAMBLE = r"WARNING: All log messages before absl::InitializeLog\(\) is called"
_NO_GPU_PROBE = _ABSL_LINE.format(letters="E") + r"failed call to cuInit: "
# Reads lines on standard input, writes those not matching argv[1] to standard output.
_FILTER = ("import re, sys\n"
           "drop = re.compile(sys.argv[1])\n"
           "for line in sys.stdin.buffer:\n"
           "    if not drop.match(line.decode('utf-8', 'replace')):\n"
           "        sys.stdout.buffer.write(line)\n"
           "        sys.stdout.buffer.flush()\n")


def start_tensorflow() -> None:
    """Make TensorFlow's settings, then import it and list its devices, quietly (see above).

    Call it before anything imports TensorFlow; once TensorFlow is loaded it does nothing.
    """
    if "tensorflow" in sys.modules:
        return
    user_level = os.environ.get("TF_CPP_MIN_LOG_LEVEL")
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", DEFAULT_LOG_LEVEL)
    if user_level is None:
        quiet_python_logs()
    with filtered_stderr(startup_noise(user_level, has_nvidia_device())):
        import tensorflow as tf

        tf.config.list_physical_devices()  # the CUDA probe; devices are not set up yet


def show_tensorflow_logs() -> None:
    """``--verbose``: TensorFlow's every log line, C++ and Python, as ``TF_CPP_MIN_LOG_LEVEL=0``
    shows them; a level the user set stays theirs. Call it before :func:`start_tensorflow`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")


def quiet_python_logs() -> None:
    """absl's Python log keeps its errors only, as the C++ log at :data:`DEFAULT_LOG_LEVEL`."""
    from absl import logging

    logging.set_verbosity(logging.ERROR)


def has_nvidia_device() -> bool:
    """Whether this machine may have an NVIDIA GPU: a device file, or CUDA_VISIBLE_DEVICES set."""
    return (bool(glob.glob("/dev/nvidia*")) or os.path.exists("/dev/dxg")
            or "CUDA_VISIBLE_DEVICES" in os.environ)


def startup_noise(user_level: str | None, nvidia_device: bool) -> str | None:
    """The pattern of TensorFlow's start-up lines to drop, or None to keep them all.

    ``user_level``: the TF_CPP_MIN_LOG_LEVEL the user set, or None (then the level is
    :data:`DEFAULT_LOG_LEVEL` and, without an NVIDIA device, the CUDA probe's failure goes too).
    """
    letters = dropped_severities(user_level)
    patterns = [_ABSL_PREAMBLE, _ABSL_LINE.format(letters=letters)] if letters else []
    if user_level is None and not nvidia_device:
        patterns.append(_NO_GPU_PROBE)
    return "|".join(f"(?:{p})" for p in patterns) or None


def dropped_severities(user_level: str | None) -> str:
    """The severities a ``TF_CPP_MIN_LOG_LEVEL`` of ``user_level`` drops, as letters of "IWE"
    (INFO, WARNING, ERROR: 1, 2, 3); None is :data:`DEFAULT_LOG_LEVEL`, a value not a number
    drops nothing."""
    level = DEFAULT_LOG_LEVEL if user_level is None else user_level.strip()
    return "IWE"[:min(int(level), 3)] if level.isdigit() else ""


@contextlib.contextmanager
def filtered_stderr(pattern: str | None):
    """Within it, lines written to standard error that match ``pattern`` (from their start) are
    dropped, whether Python or a C++ library writes them; the others pass, in order.

    File descriptor 2 becomes a pipe read by a small Python process of its own, which writes the
    kept lines to the real standard error: if this process dies inside (a fatal TensorFlow
    error), the filter still passes on the last lines. It runs in a session of its own, so a
    Ctrl-C reaches only this process. ``pattern`` None, or no way to start the filter, leaves
    standard error alone.
    """
    if pattern is None or not sys.executable:
        yield
        return
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:
        yield
        return
    read_end, write_end = os.pipe()
    try:
        child = subprocess.Popen([sys.executable, "-I", "-c", _FILTER, pattern], stdin=read_end,
                                 stdout=saved, stderr=saved, start_new_session=True)
    except OSError:
        for fd in (read_end, write_end, saved):
            os.close(fd)
        yield
        return
    os.close(read_end)
    os.dup2(write_end, 2)
    os.close(write_end)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)  # closes the pipe's last write end: the filter reads to the end
        os.close(saved)
        child.wait()
