"""Hostile attention pickles are refused without running anything; every pickle export writes
still loads; every file the commands write appears whole or not at all.

Each hostile payload is checked twice: ``pickle.loads`` runs it (it creates a marker file, so
the payload is live), and ``load_attention_pickle`` refuses it in one line naming the file and
what it refused, with no marker left behind.
"""
import os
import pickle
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from interrupt import TEMPORARY, Interrupted, killed_in_child, snapshot, stop_at_write, temporaries

from nlp_tutorials.analysis import visual
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.safe_pickle import ADMITTED
from support import tiny_model

ROOT = Path(__file__).resolve().parents[2]
PROTOCOLS = [0, pickle.HIGHEST_PROTOCOL]


class SystemCall:
    """Unpickles as ``os.system("touch marker")``."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.system, (f"touch '{self.marker}'",)


class EvalCall(SystemCall):
    """Unpickles as ``eval(...)`` of an expression that creates the marker."""

    def __reduce__(self):
        return eval, (f"open({self.marker!r}, 'w').close()",)


class ExecCall(SystemCall):
    """Unpickles as ``exec(...)`` of a statement that creates the marker."""

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').close()",)


class SneakyDict(dict):
    """A dict subclass whose ``__setstate__``, which unpickling calls, creates the marker."""

    def __init__(self, marker):
        super().__init__(a=1)
        self.marker = str(marker)

    def __setstate__(self, state):
        Path(state["marker"]).touch()
        self.__dict__.update(state)


class Reduces:
    """Pickles as ``callable(*args)`` followed by a BUILD of ``state``: a hand-made stream."""

    def __init__(self, callable_, args, state=None):
        self.reduction = (callable_, args) if state is None else (callable_, args, state)

    def __reduce__(self):
        return self.reduction


def bert_pickle(encoder_layers, **extra) -> dict:
    """An attention pickle's dict, as export writes it, with ``encoder_layers`` as the layers."""
    return {"model": "bert", "src": [["[CLS]", "a", "[SEP]"]],
            "attentions": {"encoder": encoder_layers}, **extra}


def refusal(path, what_pattern) -> str:
    """The one-line message for a refused pickle, as a regex."""
    return (re.escape(f"{path}: refused to load ") + what_pattern
            + re.escape(f": {ADMITTED}"))


def load_error(path) -> str:
    with pytest.raises(UserError) as info:
        visual.load_attention_pickle(path)
    message = str(info.value)
    assert "\n" not in message and message.startswith(f"{path}: ")
    return message


HOSTILE = {
    "os.system": (SystemCall, r"'posix\.system'"),
    "builtins.eval": (EvalCall, r"'(builtins|__builtin__)\.eval'"),
    "builtins.exec": (ExecCall, r"'(builtins|__builtin__)\.exec'"),
    "dict subclass": (SneakyDict,
                      r"'(.*SneakyDict|copy_reg\._reconstructor)'"),
    "object array": (lambda marker: np.array([SystemCall(marker)], dtype=object),
                     r"numpy dtype 'O8'"),
}


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_pickle_is_refused_and_never_runs(tmp_path, name, protocol):
    make, refused = HOSTILE[name]
    marker = tmp_path / "payload_ran"
    raw = pickle.dumps(bert_pickle([make(marker)]), protocol=protocol)
    pickle.loads(raw)  # the payload is live: plain pickle runs it
    assert marker.exists(), "the test payload should run under pickle.loads"
    marker.unlink()

    path = tmp_path / "hostile.pkl"
    path.write_bytes(raw)
    assert re.fullmatch(refusal(path, refused), load_error(path))
    assert not marker.exists()


@pytest.mark.parametrize("stream, refused", [
    # BUILD sent to an admitted global: setattr or a state on our stand-in.
    (b"cnumpy\ndtype\n}b.", r"a state for 'numpy\.dtype'"),
    (b"c_codecs\nencode\n(N}tb.", r"a state for '_codecs\.encode'"),
    # numpy.ndarray is a marker, never called.
    (b"cnumpy\nndarray\n(I3\ntR.", r"a call of 'numpy\.ndarray'"),
    # _codecs.encode only makes latin-1 bytes, bytes() only empty bytes.
    (b"c_codecs\nencode\n(Vx\nVrot13\ntR.", r"_codecs\.encode of 'x' to 'rot13'"),
    (b"c__builtin__\nbytes\n(I1000000000\ntR.", r"bytes\(1000000000,\)"),
])
def test_hand_made_streams_against_the_admitted_globals(tmp_path, stream, refused):
    path = tmp_path / "crafted.pkl"
    path.write_bytes(stream)
    assert re.fullmatch(refusal(path, refused), load_error(path))


def _reconstruct():
    return np.zeros(2).__reduce__()[0]


@pytest.mark.parametrize("payload, refused", [
    # A numeric dtype whose state gives it fields that hold Python objects.
    (Reduces(np.dtype, ("f4", False, True),
             (3, "<", None, ("a",), {"a": (np.dtype("f4"), 0)}, 4, 4, 63)),
     r"numpy dtype 'f4' with state .*"),
    # The empty array _reconstruct starts from, asked for a terabyte.
    (Reduces(_reconstruct(), (np.ndarray, (10 ** 12,), b"b")), r"an array started as .*"),
    (np.zeros(3, "U4"), r"numpy dtype 'U4'"),
    (np.zeros(3, [("a", "f4")]), r"numpy dtype 'V4'"),
    (np.zeros(3, "M8[s]"), r"numpy dtype 'M8'"),
    (np.zeros(2).view(np.recarray), r"'numpy\.rec\.recarray'"),  # an ndarray subclass
    (np.ma.masked_array([1.0]), r"'numpy\.ma\.core\._mareconstruct'"),
    ({1, 2}, r"(a set object|'__builtin__\.set')"),
    (b"raw bytes", r"a bytes object"),
])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_non_numeric_arrays_and_other_objects_are_refused(tmp_path, payload, refused, protocol):
    path = tmp_path / "odd.pkl"
    path.write_bytes(pickle.dumps(bert_pickle([payload]), protocol=protocol))
    assert re.fullmatch(refusal(path, refused), load_error(path))


def test_persistent_ids_are_refused(tmp_path):
    import io

    class External(pickle.Pickler):
        def persistent_id(self, obj):
            return "weights.bin" if obj == "EXTERNAL" else None

    buffer = io.BytesIO()
    External(buffer, protocol=2).dump(bert_pickle(["EXTERNAL"]))
    path = tmp_path / "persistent.pkl"
    path.write_bytes(buffer.getvalue())
    assert re.fullmatch(refusal(path, r"persistent id 'weights\.bin'"), load_error(path))


def legitimate(rng) -> dict:
    """A pickle as export writes it, with every array layout and number type numpy pickles."""
    layers = [rng.random((2, 2, 3, 3)).astype(dtype) for dtype in ("f2", "f4", "f8", ">f4")]
    layers += [np.asfortranarray(rng.random((2, 2, 3, 3))),  # Fortran order
               rng.random((2, 2, 3, 6))[..., ::2],  # not contiguous
               rng.integers(0, 2, (2, 2, 3, 3)).astype(bool),
               rng.integers(0, 2, (2, 2, 3, 3)).astype("u1"),  # weights: 0 or 1
               rng.random((2, 2, 3, 3)).tolist(),  # nested lists of floats
               [[[[np.float32(0.5)] * 3] * 3] * 2] * 2]  # lists of numpy scalars
    return {"model": "bert", "src": [["[CLS]", "a", "[PAD]"], ["[CLS]", "b", "c"]],
            "attentions": {"encoder": layers}, "extra": {"kept": (1, 2.5, None, True, "x")}}


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_every_protocol_loads_as_pickle_would(tmp_path, protocol):
    raw = pickle.dumps(legitimate(np.random.default_rng(protocol)), protocol=protocol)
    path = tmp_path / "ok.pkl"
    path.write_bytes(raw)
    got = visual.load_attention_pickle(path)
    want = visual._validate(pickle.loads(raw), path)
    assert got["src"] == want["src"]
    for ours, theirs in zip(got["attentions"]["encoder"], want["attentions"]["encoder"]):
        assert type(ours) is np.ndarray and ours.dtype == np.float32
        np.testing.assert_array_equal(ours, theirs)


def test_numpy_1_module_names_load(tmp_path):
    """Pickles written under numpy 1 name numpy.core, which numpy 2 renamed numpy._core."""
    data = legitimate(np.random.default_rng(0))
    raw = pickle.dumps(data, protocol=0).replace(b"numpy._core.", b"numpy.core.")
    assert b"numpy.core.multiarray" in raw
    path = tmp_path / "numpy1.pkl"
    path.write_bytes(raw)
    loaded = visual.load_attention_pickle(path)
    np.testing.assert_allclose(loaded["attentions"]["encoder"][2],
                               data["attentions"]["encoder"][2].astype(np.float32))


def export_bytes(tmp_path) -> bytes:
    path = visual.save_attention_pickle(
        tmp_path / "export.pkl", "bert", [["[CLS]", "a"]] * 2,
        {"encoder": [np.full((2, 1, 2, 2), 0.5, np.float32)]})
    return path.read_bytes()


@pytest.mark.parametrize("damage", [
    lambda raw: raw[: len(raw) // 2],  # truncated
    lambda raw: raw[:40],
    lambda raw: b"",
    lambda raw: bytes(range(256)) * 4,  # garbage
    lambda raw: b"\x80\x05\x95" + b"\xff" * 8,  # a frame longer than the file
])
def test_damaged_files_are_one_line_errors(tmp_path, damage):
    path = tmp_path / "damaged.pkl"
    path.write_bytes(damage(export_bytes(tmp_path)))
    assert "not an attention pickle" in load_error(path)


@pytest.mark.parametrize("stream, reason", [
    # A bytearray of 2 ** 40 bytes, which pickle would allocate before finding the file ends.
    (b"\x80\x05\x96" + (2**40).to_bytes(8, "little") + b"ab.", "but only 3 remain"),
    # A memo entry numbered 2 ** 31, which pickle would make room for (16 GB of memo).
    (b"\x80\x04N\x72" + (2**31).to_bytes(4, "little") + b".", "memo index 2147483648 beyond"),
], ids=["bytearray", "memo"])
def test_sizes_a_pickle_claims_are_checked_before_it_is_built(tmp_path, stream, reason):
    path = tmp_path / "claims.pkl"
    path.write_bytes(stream)
    assert "not an attention pickle" in load_error(path) and reason in load_error(path)


def test_a_named_pipe_is_refused_before_it_is_opened(tmp_path):
    os.mkfifo(tmp_path / "pipe.pkl")  # with no writer, opening it to read would wait for ever
    assert load_error(tmp_path / "pipe.pkl") == f"{tmp_path / 'pipe.pkl'}: a named pipe; " \
                                                "expected a file"


@pytest.mark.parametrize("model", [[], {}, ["bert"], 7])
def test_a_model_name_that_is_not_text_is_one_line(tmp_path, model):
    path = tmp_path / "model.pkl"
    path.write_bytes(pickle.dumps({"model": model, "src": [], "attentions": {}}))
    assert "'model' is" in load_error(path) and "expected one of bert, gpt, transformer" in \
        load_error(path)


@pytest.mark.slow
def test_plot_command_refuses_a_hostile_pickle_in_one_line(tmp_path):
    marker = tmp_path / "payload_ran"
    path = tmp_path / "hostile.pkl"
    path.write_bytes(pickle.dumps(bert_pickle([SystemCall(marker)])))
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "nlp_tutorials.bert", "plot", "--input", str(path),
         "--output-dir", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"python -m nlp_tutorials.bert plot: error: {path}: refused to load 'posix.system': "
        f"{ADMITTED}"]
    assert not marker.exists() and not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- whole files or none
#
# Each writer is stopped once in each file it writes: that file must keep its old bytes, the
# files written before it hold new ones, the later ones are untouched, and nothing half-written
# takes a target's name. Writers without TensorFlow are killed (SIGKILL) in a forked child; the
# others are interrupted in this process (a forked child must not use TensorFlow's threads),
# and the .keras save is also killed for real in a subprocess (slow).


def stopped_write(tmp_path, monkeypatch, write_into, names, nth, kill=True) -> Path:
    """Run ``write_into(folder)``, which writes ``names`` in that order, over old copies of
    them; stop it in file ``nth``; check what is left. Returns the folder."""
    folder = tmp_path / "target"
    folder.mkdir()
    for name in names:
        (folder / name).write_bytes(f"old {name}".encode())
    old = snapshot(folder)
    if kill:
        killed_in_child(lambda: write_into(folder), nth)
    else:
        monkeypatch.setattr(os, "fsync", stop_at_write(nth, kill=False))
        with pytest.raises(Interrupted) as stopped:
            write_into(folder)
        monkeypatch.undo()
        assert TEMPORARY.fullmatch(Path(stopped.value.args[0]).name)
    after = snapshot(folder)
    assert sorted(after) == sorted(names)
    for name in names[:nth - 1]:
        assert after[name] != old[name] and after[name], f"{name} should have been rewritten"
    for name in names[nth - 1:]:
        assert after[name] == old[name], f"{name} should have kept its old bytes"
    # A kill leaves the one temporary it was writing; an exception leaves none.
    assert len(temporaries(folder)) == (1 if kill else 0)
    return folder


@pytest.mark.parametrize("write", ["bytes", "text", "save"])
def test_atomic_writers_killed_half_way_keep_the_old_file(tmp_path, monkeypatch, write):
    from nlp_tutorials.system import files

    data = b"new contents " * 1000
    calls = {"bytes": lambda f: files.write_bytes_atomic(f / "a.bin", data),
             "text": lambda f: files.write_text_atomic(f / "a.bin", data.decode()),
             "save": lambda f: files.save_atomic(f / "a.bin", lambda tmp: tmp.write_bytes(data))}
    folder = stopped_write(tmp_path, monkeypatch, calls[write], ["a.bin"], 1)
    (leftover,) = temporaries(folder)
    assert 0 < (folder / leftover).stat().st_size < len(data)  # it really stopped half-way


def test_attention_pickle_killed_half_way(tmp_path, monkeypatch):
    def export(folder):
        visual.save_attention_pickle(folder / "bert.pkl", "bert", [["[CLS]", "a"]],
                                     {"encoder": [np.full((1, 1, 2, 2), 0.5)]})

    folder = stopped_write(tmp_path, monkeypatch, export, ["bert.pkl"], 1)
    export(folder)  # and the next write goes through
    assert visual.load_attention_pickle(folder / "bert.pkl")["src"] == [["[CLS]", "a"]]


def test_png_killed_half_way(tmp_path, monkeypatch):
    data = visual.load_attention_pickle(visual.save_attention_pickle(
        tmp_path / "a.pkl", "bert", [["[CLS]", "a"]], {"encoder": [np.full((1, 1, 2, 2), 0.5)]}))
    stopped_write(tmp_path, monkeypatch, lambda f: visual.plot_lines(data, 0, 0, 0, f, "bert"),
                  ["bert_encoder_lines_case0_layer0_head0.png"], 1)


@pytest.mark.parametrize("writer", ["ModelConfig.save", "BertConfig.to_json_file"])
def test_model_config_killed_half_way(tmp_path, monkeypatch, writer):
    from nlp_tutorials.models.config import BertConfig, ModelConfig

    write = {"ModelConfig.save": lambda f: ModelConfig(hidden_size=64).save(f),
             "BertConfig.to_json_file":
                 lambda f: BertConfig(hidden_size=64).to_json_file(f / "config.json")}[writer]
    stopped_write(tmp_path, monkeypatch, write, ["config.json"], 1)


@pytest.mark.parametrize("nth", [1, 2])
def test_tokenizer_killed_half_way_in_either_file(tmp_path, monkeypatch, nth):
    from nlp_tutorials.text.tokenization import WordTokenizer

    tokenizer = WordTokenizer.build(["the cat sat", "a dog ran"])
    stopped_write(tmp_path, monkeypatch, tokenizer.save,
                  ["vocab.txt", "tokenizer_config.json"], nth)


def test_training_run_files_stopped_in_train_config(tmp_path, monkeypatch):
    """``train`` writes vocab.txt, tokenizer_config.json, config.json, train_config.json."""
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining import save_run, settle_run

    def prepare(folder):
        settled = settle_run(TrainConfig(model_dir=str(folder), dim=32, layers=1, heads=2),
                             set(), resume=False)
        save_run(*settled[:3])

    stopped_write(tmp_path, monkeypatch, prepare,
                  ["vocab.txt", "tokenizer_config.json", "config.json", "train_config.json"],
                  4, kill=False)


def test_finetune_results_killed_half_way(tmp_path, monkeypatch):
    from nlp_tutorials.training.config import FinetuneConfig
    from nlp_tutorials.training.finetuning import save_results

    runs = [{"seed": 1, "dev": None, "test": {"accuracy": 0.7, "f1": 0.8}}]
    stopped_write(tmp_path, monkeypatch,
                  lambda f: save_results(f, FinetuneConfig(), runs, {"accuracy": (0.7, 0.0)}),
                  ["results.json"], 1, kill=False)


def tiny_bert():
    """16 wide and one layer: only its files matter here."""
    return tiny_model("bert", hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                      intermediate_size=32, max_position_embeddings=16)


def test_keras_head_stopped_half_way(tmp_path, monkeypatch):
    from nlp_tutorials.finetuned.folders import load_finetuned, save_head
    from nlp_tutorials.models.task_heads import SequenceClassifier
    from nlp_tutorials.text.tokenization import WordTokenizer

    head = SequenceClassifier(tiny_bert())
    stopped_write(tmp_path, monkeypatch, lambda f: save_head(head, f), ["model.keras"], 1,
                  kill=False)
    folder = tmp_path / "target"
    save_head(head, folder)  # the next save goes through and loads
    WordTokenizer.build(["a b"]).save(folder)
    assert type(load_finetuned(folder)[0]) is SequenceClassifier


@pytest.mark.parametrize("nth", [1, 2])
def test_save_pretrained_stopped_in_either_file(tmp_path, monkeypatch, nth):
    bert = tiny_bert()
    stopped_write(tmp_path, monkeypatch, bert.save_pretrained,
                  ["model.safetensors", "config.json"], nth, kill=False)


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_date_transformer_files_stopped_in_each_file(tmp_path, monkeypatch, nth):
    from nlp_tutorials.training import seq2seq
    from nlp_tutorials.training.config import DateTrainConfig
    from nlp_tutorials.transformer import Transformer

    def save_all(folder):
        config = DateTrainConfig(model_dir=str(folder), dim=16, layers=1, heads=2)
        seq2seq.save(Transformer(config.model_config()), config)
        seq2seq.save_run(config, 0.5, 1.0)

    stopped_write(tmp_path, monkeypatch, save_all,
                  ["config.json", "model.weights.h5", "train_config.json"], nth, kill=False)


KILLED_KERAS_SAVE = """
import hashlib, os, sys
sys.path.insert(0, sys.argv[2])
from interrupt import stop_at_write
from support import tiny_model
from nlp_tutorials.finetuned.folders import save_head
from nlp_tutorials.models.task_heads import SequenceClassifier

head = SequenceClassifier(tiny_model("bert", hidden_size=16, num_hidden_layers=1,
                                     num_attention_heads=2, intermediate_size=32,
                                     max_position_embeddings=16))
path = save_head(head, sys.argv[1])
print(hashlib.sha256(path.read_bytes()).hexdigest(), flush=True)
os.fsync = stop_at_write(1, kill=True)
save_head(head, sys.argv[1])
"""


@pytest.mark.slow
def test_keras_save_killed_for_real_keeps_the_previous_model(tmp_path):
    import hashlib

    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-c", KILLED_KERAS_SAVE, str(tmp_path), str(ROOT / "tests")],
        capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == -9, result.stderr[-2000:]
    first_save = result.stdout.split()[-1]
    assert hashlib.sha256((tmp_path / "model.keras").read_bytes()).hexdigest() == first_save
    assert len(temporaries(tmp_path)) == 1


# ----------------------------------------------------------------------------- other readers


@pytest.mark.parametrize("text", ['{"cluster": ' + "9" * 5000 + "}", "[" * 100_000])
def test_tf_config_too_long_or_too_deep_is_one_line(text):
    from nlp_tutorials.training.distribute import parse_tf_config

    with pytest.raises(UserError, match=r"^TF_CONFIG:1: (an integer of 5000 digits|nested "
                                        r"deeper than 64 levels)") as info:
        parse_tf_config(text)
    assert "\n" not in str(info.value)


def lambda_model(marker):
    """A Keras model whose Lambda layer creates ``marker`` whenever it is called."""
    import keras

    # A lambda (not a def): Keras stores a lambda's bytecode, a named function by name only.
    # The path is a constant in the bytecode (Keras 3.15 cannot reload a lambda's defaults).
    payload = eval(f"lambda x: (open({str(marker)!r}, 'w').close(), x)[1]")
    inputs = keras.Input((2,))
    return keras.Model(inputs, keras.layers.Lambda(payload)(inputs))


def test_keras_lambda_layer_is_refused_by_safe_mode(tmp_path):
    import keras

    from nlp_tutorials.finetuned.folders import load_finetuned

    marker = tmp_path / "payload_ran"
    lambda_model(marker).save(tmp_path / "model.keras")
    marker.unlink()
    keras.models.load_model(tmp_path / "model.keras", safe_mode=False)  # the payload is live
    assert marker.exists()
    marker.unlink()

    with pytest.raises(UserError) as info:
        load_finetuned(tmp_path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'model.keras'}: not a model `finetune` wrote "
                              "(ValueError: ")
    assert "Lambda" in message and "\n" not in message
    assert not marker.exists()


def test_keras_file_of_another_model_or_of_garbage_is_one_line(tmp_path):
    import keras

    from nlp_tutorials.finetuned.folders import load_finetuned

    inputs = keras.Input((2,))
    keras.Model(inputs, keras.layers.Dense(1)(inputs)).save(tmp_path / "model.keras")
    with pytest.raises(UserError, match=r"model\.keras: holds a Functional; expected the "
                                        r"SequenceClassifier"):
        load_finetuned(tmp_path)
    whole = (tmp_path / "model.keras").read_bytes()
    for damaged in (b"PK\x03\x04" + bytes(100), whole[:len(whole) // 2]):
        (tmp_path / "model.keras").write_bytes(damaged)
        with pytest.raises(UserError, match=r"model\.keras: damaged or not a \.keras file "
                                            r"\(not a whole zip archive\)") as info:
            load_finetuned(tmp_path)
        assert "\n" not in str(info.value)


def test_damaged_date_transformer_weights_are_one_line(tmp_path):
    from nlp_tutorials.training import seq2seq
    from nlp_tutorials.training.config import DateTrainConfig
    from nlp_tutorials.transformer import Transformer

    config = DateTrainConfig(model_dir=str(tmp_path), dim=16, layers=1, heads=2)
    seq2seq.save(Transformer(config.model_config()), config)
    weights = tmp_path / seq2seq.WEIGHTS_NAME
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(UserError, match=r"model\.weights\.h5: cannot be read whole"):
        seq2seq.load(tmp_path)


@pytest.mark.parametrize("damage", ["truncated data", "zeroed data", "garbage index"])
def test_damaged_google_checkpoint_is_one_line(tmp_path, damage):
    import shutil

    from nlp_tutorials.models.pretrained import read_checkpoint

    folder = tmp_path / "google"
    shutil.copytree(ROOT / "tests" / "fixtures" / "bert_tiny_google", folder)
    data = folder / "bert_model.ckpt.data-00000-of-00001"
    size = data.stat().st_size
    {"truncated data": lambda: data.write_bytes(data.read_bytes()[: size // 2]),
     "zeroed data": lambda: data.write_bytes(bytes(size)),
     "garbage index": lambda: (folder / "bert_model.ckpt.index").write_bytes(b"x" * 64)}[damage]()
    with pytest.raises(UserError, match="bert_model.ckpt: not a readable TF checkpoint") as info:
        read_checkpoint(folder)
    assert "\n" not in str(info.value)
