"""TensorFlow's start for a command: the lines dropped from standard error, and those kept."""
import os
import re
import sys

from nlp_tutorials.system.startup import filtered_stderr, startup_noise

# TensorFlow 2.21's start on a machine without a GPU, as it writes it.
PREAMBLE = "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR"
ONEDNN = ("I0000 00:00:1796141491.440452    4914 port.cc:153] oneDNN custom operations are on. "
          "You may see slightly different numerical results")
NO_DRIVER = ("I0000 00:00:1796141491.448817    4914 cudart_stub.cc:31] Could not find cuda "
             "drivers on your machine, GPU will not be used.")
CUINIT = ("E0000 00:00:1796141498.681609    4914 cuda_platform.cc:52] failed call to cuInit: "
          "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)")
WARNING = "W0000 00:00:1796141498.681609    4914 some_file.cc:12] something to know"
ERROR = "E1130 09:32:22.280168 13509 some_kernel.cc:88] a real error"
FATAL = "F0000 00:00:1796141498.681609    4914 some_file.cc:99] Check failed: x"
ALL = [PREAMBLE, ONEDNN, NO_DRIVER, CUINIT, WARNING, ERROR, FATAL, "Traceback (most recent"]


def kept(pattern):
    return [line for line in ALL if pattern is None or not re.match(pattern, line)]


def test_the_default_level_drops_the_start_chatter_but_no_real_error():
    assert kept(startup_noise(None, nvidia_device=False)) == [ERROR, FATAL, ALL[-1]]
    # Where an NVIDIA device exists, a failing CUDA probe is a real error.
    assert kept(startup_noise(None, nvidia_device=True)) == [CUINIT, ERROR, FATAL, ALL[-1]]


def test_a_level_the_user_set_is_applied_as_given():
    assert kept(startup_noise("0", nvidia_device=False)) == ALL
    assert kept(startup_noise("1", nvidia_device=False)) == [CUINIT, WARNING, ERROR, FATAL,
                                                             ALL[-1]]
    assert kept(startup_noise("2", nvidia_device=False)) == [CUINIT, ERROR, FATAL, ALL[-1]]
    assert kept(startup_noise("3", nvidia_device=True)) == [FATAL, ALL[-1]]
    assert kept(startup_noise("loud", nvidia_device=False)) == ALL


def test_filtered_stderr_drops_matching_lines_from_python_and_from_file_descriptor_2(capfd):
    with filtered_stderr(startup_noise(None, nvidia_device=False)):
        os.write(2, f"{PREAMBLE}\n{ONEDNN}\n".encode())
        print(ERROR, file=sys.stderr)
        os.write(2, f"{CUINIT}\nlast line without an end".encode())
    print("after", file=sys.stderr)
    assert capfd.readouterr().err == f"{ERROR}\nlast line without an endafter\n"


def test_filtered_stderr_without_a_pattern_leaves_stderr_alone(capfd):
    with filtered_stderr(None):
        os.write(2, f"{ONEDNN}\n".encode())
    assert capfd.readouterr().err == f"{ONEDNN}\n"


def test_absl_s_python_log_keeps_its_errors_only_when_quiet():
    from absl import logging

    from nlp_tutorials.system.startup import quiet_python_logs

    before = logging.get_verbosity()
    try:
        logging.set_verbosity(logging.INFO)
        quiet_python_logs()
        assert logging.get_verbosity() == logging.ERROR
    finally:
        logging.set_verbosity(before)
