"""``--precision auto``: what it picks from the CPU's flags (a /proc/cpuinfo written here) and the
GPUs' compute capability (given here), the line that says so, and the precision a run records:
what it computes in, never "auto"."""
import json
import shutil
from pathlib import Path

import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.hardware import bfloat16_instructions
from nlp_tutorials.training import distribute
from nlp_tutorials.training.config import FinetuneConfig, TrainConfig
from nlp_tutorials.training.distribute import PRECISIONS, resolve_precision

PLAIN = "fpu sse2 avx2 fma avx512f avx512_vnni amx_tile"  # no bfloat16 arithmetic
NO_BFLOAT16 = "precision: float32 (auto: no bfloat16 instructions on this CPU or GPU)"
# A run `train` saved in float32 (dim 16, 2 layers, 2 heads), with its checkpoints.
SAVED_RUN = Path(__file__).parents[1] / "fixtures" / "legacy_0_1" / "bert_pretrain"


def cpuinfo(folder: Path, flags: str) -> Path:
    """A /proc/cpuinfo of two cores with ``flags``."""
    path = folder / "cpuinfo"
    path.write_text(f"processor\t: 0\nmodel name\t: A CPU\nflags\t\t: {flags}\n\n"
                    f"processor\t: 1\nmodel name\t: A CPU\nflags\t\t: {flags}\n")
    return path


@pytest.mark.parametrize("flags, line", [
    (PLAIN + " avx512_bf16", "precision: mixed_bfloat16 (auto: this CPU has AVX512_BF16)"),
    (PLAIN + " amx_bf16", "precision: mixed_bfloat16 (auto: this CPU has AMX)"),
    ("amx_bf16 " + PLAIN + " avx512_bf16",
     "precision: mixed_bfloat16 (auto: this CPU has AVX512_BF16 and AMX)"),
    (PLAIN, NO_BFLOAT16),
])
def test_without_a_gpu_auto_follows_the_cpu_flags(tmp_path, flags, line):
    precision = resolve_precision("auto", cpuinfo(tmp_path, flags), gpus=[])
    assert precision.name == ("float32" if line == NO_BFLOAT16 else "mixed_bfloat16")
    assert precision.line() == line


def test_a_cpu_whose_flags_cannot_be_read_computes_in_float32(tmp_path):
    precision = resolve_precision("auto", tmp_path / "missing", gpus=[])
    assert precision == ("float32", "auto: no GPU, and no /proc/cpuinfo to read this CPU's "
                                    "instructions from")
    assert bfloat16_instructions(tmp_path / "missing") is None


@pytest.mark.parametrize("gpus, expected", [
    ([(8, 0)], ("mixed_bfloat16", "auto: this GPU computes in bfloat16 (compute capability 8.0)")),
    ([(9, 0), (8, 6)], ("mixed_bfloat16", "auto: these 2 GPUs compute in bfloat16 (compute "
                                          "capability 9.0, 8.6)")),
    ([(7, 5)], ("float32", "auto: this GPU has no bfloat16 (compute capability 7.5; bfloat16 "
                           "needs 8.0 or more)")),
    ([(8, 0), (7, 0)], ("float32", "auto: not every GPU has bfloat16 (compute capability 8.0, "
                                   "7.0; bfloat16 needs 8.0 or more)")),
    ([None], ("float32", "auto: this GPU has no bfloat16 (compute capability unknown; "
                         "bfloat16 needs 8.0 or more)")),
])
def test_with_gpus_their_compute_capability_decides_whatever_the_cpu(tmp_path, gpus, expected):
    for flags in (PLAIN, PLAIN + " avx512_bf16 amx_bf16"):  # the step runs on the GPUs
        assert resolve_precision("auto", cpuinfo(tmp_path, flags), gpus) == expected


@pytest.mark.parametrize("name", ["float32", "mixed_float16", "mixed_bfloat16"])
def test_a_precision_asked_for_is_kept_and_said_plainly(tmp_path, name):
    for flags, gpus in ((PLAIN + " avx512_bf16", []), (PLAIN, []), (PLAIN, [(9, 0)])):
        precision = resolve_precision(name, cpuinfo(tmp_path, flags), gpus)
        assert precision == (name, "") and precision.line() == f"precision: {name}"


def test_auto_is_the_first_choice_and_the_default_of_train_and_finetune():
    assert PRECISIONS[0] == "auto"
    assert TrainConfig().precision == FinetuneConfig().precision == "auto"
    with pytest.raises(UserError, match="--precision 'float8': expected one of auto, float32"):
        resolve_precision("float8", gpus=[])


def test_the_gpus_compute_capability_is_asked_of_tensorflow(tmp_path, monkeypatch):
    tf = pytest.importorskip("tensorflow")
    gpus = {"GPU:0": {"compute_capability": (8, 6)}, "GPU:1": {"compute_capability": (7, 0)}}
    monkeypatch.setattr(tf.config, "list_physical_devices",
                        lambda kind=None: list(gpus) if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "get_device_details", gpus.get)
    assert distribute.gpu_capabilities() == [(8, 6), (7, 0)]
    assert resolve_precision("auto", cpuinfo(tmp_path, PLAIN)).name == "float32"
    del gpus["GPU:1"]
    assert resolve_precision("auto", cpuinfo(tmp_path, PLAIN)).name == "mixed_bfloat16"


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """``machine(flags, gpus)``: this process' CPU has ``flags``, its GPUs ``gpus``' capability."""
    def make(flags: str, gpus=()):
        monkeypatch.setattr(distribute, "CPUINFO", cpuinfo(tmp_path, flags))
        monkeypatch.setattr(distribute, "gpu_capabilities", lambda: list(gpus))

    return make


@pytest.mark.parametrize("flags, gpus, expected", [
    (PLAIN + " amx_bf16", (), "precision: mixed_bfloat16 (auto: this CPU has AMX)"),
    (PLAIN, (), NO_BFLOAT16),
    (PLAIN + " avx512_bf16", [(7, 5)], "precision: float32 (auto: this GPU has no bfloat16 "
                                       "(compute capability 7.5; bfloat16 needs 8.0 or more))"),
])
def test_a_new_run_says_and_saves_the_precision_auto_stands_for(tmp_path, machine, flags, gpus,
                                                                  expected):
    pytest.importorskip("tensorflow")
    from nlp_tutorials.training.pretraining import TRAIN_CONFIG_NAME, save_run, settled_run

    machine(flags, gpus)
    printed, folder = [], tmp_path / "run"
    config, tokenizer, model_config, _ = settled_run(
        TrainConfig(model_dir=str(folder), dim=32, layers=1, heads=2), set(), False, None,
        printed.append)
    assert printed == [expected]
    save_run(config, tokenizer, model_config)
    saved = json.loads((folder / TRAIN_CONFIG_NAME).read_text())
    assert saved["precision"] == config.precision == expected.split()[1]


def test_a_float32_run_resumes_under_auto(tmp_path, machine):
    """Without --precision the saved run's precision is kept, whatever this machine would pick;
    with --precision auto, what auto stands for here is compared with the saved one."""
    pytest.importorskip("tensorflow")
    from nlp_tutorials.training.pretraining import settled_run

    folder = Path(shutil.copytree(SAVED_RUN, tmp_path / "run"))
    for flags in (PLAIN, PLAIN + " avx512_bf16"):
        machine(flags)
        printed = []
        config = settled_run(TrainConfig(model_dir=str(folder)), set(), True, None,
                             printed.append)[0]
        assert config.precision == "float32"
        assert printed == ["precision: float32 (the resumed run's)"]
    machine(PLAIN)
    printed = []
    config = settled_run(TrainConfig(model_dir=str(folder)), {"precision"}, True, None,
                         printed.append)[0]
    assert config.precision == "float32" and printed == [NO_BFLOAT16]
    machine(PLAIN + " avx512_bf16")
    with pytest.raises(UserError, match=r"other settings: --precision mixed_bfloat16 \(saved: "
                                        r"float32\)$"):
        settled_run(TrainConfig(model_dir=str(folder)), {"precision"}, True, None, print)


def test_an_auto_policy_is_resolved_when_it_is_set(tmp_path, machine):
    keras = pytest.importorskip("keras")
    try:
        machine(PLAIN + " avx512_bf16")
        distribute.set_precision("auto")
        assert keras.mixed_precision.global_policy().name == "mixed_bfloat16"
        machine(PLAIN)
        distribute.set_precision("auto")
        assert keras.mixed_precision.global_policy().name == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")
