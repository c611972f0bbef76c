"""What a results file records beside its figures: command, date, machine, revision."""
import datetime
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nlp_tutorials.system import provenance

REPO = Path(__file__).resolve().parents[2]


def test_machine_reads_the_first_processors_model_and_the_speed_flags(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nmodel name\t: AMD EPYC 7B13\n"
                       "flags\t\t: fpu avx avx2 fma avx512_vnni\n"
                       "\nprocessor\t: 1\nmodel name\t: other\nflags\t\t: fpu\n")
    found = provenance.machine(cpuinfo=cpuinfo)
    assert found["cpu"] == "AMD EPYC 7B13"
    assert found["flags"] == ["avx", "avx2", "fma", "avx512_vnni"]  # SPEED_FLAGS' order
    absent = provenance.machine(cpuinfo=tmp_path / "absent")
    assert absent["flags"] == [] and absent["cpu"]


@pytest.mark.skipif(shutil.which("lscpu") is None
                    or provenance.machine()["cpu"] == provenance.UNKNOWN,
                    reason="needs lscpu and a /proc/cpuinfo that names the model (x86)")
def test_machine_names_the_cpu_as_lscpu_does():
    shown = subprocess.run(["lscpu"], capture_output=True, text=True,
                           env={**os.environ, "LC_ALL": "C"}).stdout
    model = next(line.split(":", 1)[1].strip() for line in shown.splitlines()
                 if line.startswith("Model name"))
    flags = next(line.split(":", 1)[1].split() for line in shown.splitlines()
                 if line.startswith("Flags"))
    found = provenance.machine(["/physical_device:GPU:0"])
    assert found["cpu"] == model
    assert found["flags"] == [flag for flag in provenance.SPEED_FLAGS if flag in flags]
    assert found["gpus"] == ["/physical_device:GPU:0"]


@pytest.mark.skipif(shutil.which("git") is None or not (REPO / ".git").exists(),
                    reason="needs a git checkout")
def test_revision_is_the_checkouts_commit():
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    assert provenance.revision(REPO).removesuffix("-dirty") == head


def test_revision_outside_a_checkout_names_the_version(tmp_path):
    assert "no git checkout" in provenance.revision(tmp_path) or (
        provenance.revision(tmp_path) == provenance.UNKNOWN)


def test_finetune_results_carry_the_run_provenance(tmp_path):
    from nlp_tutorials.training.config import FinetuneConfig
    from nlp_tutorials.training.finetuning import save_results

    before = datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)
    runs = [{"seed": 1, "epoch": 2, "dev": None, "test": {"accuracy": 0.5}}]
    path = save_results(tmp_path, FinetuneConfig(seeds=1), runs,
                        {"test_mean_std": {"accuracy": (0.5, 0.0)}})
    saved = json.loads(path.read_text())
    assert saved["command"] == shlex.join(sys.orig_argv)
    assert before <= datetime.datetime.fromisoformat(saved["date"]) <= datetime.datetime.now(
        datetime.timezone.utc)
    assert {**saved["machine"], "gpus": []} == provenance.machine()
    assert saved["revision"] == provenance.revision()
    assert saved["runs"] == runs and saved["test_mean_std"] == {"accuracy": [0.5, 0.0]}
    assert saved["config"]["seeds"] == 1
