"""The attention explorer: its numbers (quantization, packing), its bad inputs, and the page
itself in headless Chromium, compared with the pickle it was made from.

The synthetic data below is made the way a model makes it: attention = softmax(q k^T / sqrt(d)
+ mask) from random queries and keys, padding masked, so every view has consistent numbers.
"""
import base64
import configparser
import json
import pickle
import re
import zlib
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.analysis import explorer
from nlp_tutorials.analysis.attention_capture import attention_vectors
from nlp_tutorials.cli import main
from nlp_tutorials.cli.settings import ExploreSettings
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.analysis.visual import save_attention_pickle
from support import tiny_config, tiny_model

ROOT = Path(__file__).resolve().parents[2]
SIZE = 8  # head size of the synthetic data


def softmax_attention(q, k, key_lengths, causal=False):
    """softmax(q k^T / sqrt(d) + mask): [n, heads, q_step, k_step], padded keys masked."""
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    k_step = k.shape[2]
    hidden = np.arange(k_step)[None, :] >= np.asarray(key_lengths)[:, None]  # [n, k_step]
    mask = np.where(hidden[:, None, None, :], -1e4, 0.0)
    if causal:
        mask = mask + np.where(np.triu(np.ones((q.shape[2], k_step)), 1) > 0, -1e4, 0.0)
    scores = scores + mask
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return weights / weights.sum(-1, keepdims=True)


def stack(rng, layers, heads, n, q_step, k_step, key_lengths, causal=False):
    """Per layer: attention, queries and keys of one stack."""
    found = {"attentions": [], "queries": [], "keys": []}
    for _ in range(layers):
        q = rng.normal(size=(n, heads, q_step, SIZE)).astype(np.float32)
        k = rng.normal(size=(n, heads, k_step, SIZE)).astype(np.float32)
        found["attentions"].append(softmax_attention(q, k, key_lengths, causal).astype(np.float32))
        found["queries"].append(q)
        found["keys"].append(k)
    return found


def tokens(lengths, step, first="[CLS]"):
    return [[first] + [f"w{i}" for i in range(1, length)] + ["[PAD]"] * (step - length)
            for length in lengths]


def bert_data(layers=2, heads=3, step=10, lengths=(7, 10, 5), model="bert"):
    rng = np.random.default_rng(0)
    found = stack(rng, layers, heads, len(lengths), step, step, lengths, causal=model == "gpt")
    segments = [[0] * (length // 2) + [1] * (step - length // 2) for length in lengths]
    return {"model_name": model, "src_tokens": tokens(lengths, step), "segments": segments,
            **{kind: {"encoder": layers_} for kind, layers_ in found.items()}}


def transformer_data():
    rng = np.random.default_rng(1)
    src_len, tgt_len, src_step, tgt_step = [5, 7], [4, 6], 7, 6
    stacks = {"encoder": stack(rng, 2, 2, 2, src_step, src_step, src_len),
              "decoder": stack(rng, 2, 2, 2, tgt_step, tgt_step, tgt_len, causal=True),
              "encoder_decoder": stack(rng, 2, 2, 2, tgt_step, src_step, src_len)}
    return {"model_name": "transformer", "src_tokens": tokens(src_len, src_step, "<GO>"),
            "tgt_tokens": tokens(tgt_len, tgt_step, "<GO>"),
            **{kind: {entry: found[kind] for entry, found in stacks.items()}
               for kind in ("attentions", "queries", "keys")}}


def pickled(tmp_path, data, name="attention.pkl"):
    return save_attention_pickle(tmp_path / name, **data)


def one_line_error(match, call, *args, **kwargs):
    with pytest.raises(UserError, match=match) as info:
        call(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def page_json(path):
    """The JSON the page carries, read back from the HTML file."""
    html = Path(path).read_text(encoding="utf-8")
    found = re.search(r'<script id="explorer-data" type="application/json">(.*?)</script>',
                      html, re.S)
    return json.loads(found.group(1).replace("<\\/", "</"))


# ---------- numbers ----------

def test_weights_quantize_within_the_stated_error():
    weights = np.random.default_rng(2).dirichlet(np.ones(30), size=50)  # rows sum to 1
    stored = explorer.quantize_weights(weights)
    assert stored.dtype == np.uint8
    assert np.max(np.abs(stored / 255 - weights)) <= explorer.WEIGHT_ERROR + 1e-12
    assert explorer.quantize_weights(np.array([0.0, 1.0, 1.0000001])).tolist() == [0, 255, 255]


def test_vectors_quantize_per_head_within_half_a_step():
    vectors = np.random.default_rng(3).normal(size=(4, 6, SIZE)) * np.array([1, 10, 0.01, 0])[
        :, None, None]  # heads of very different scales, one all zero
    stored, scale = explorer.quantize_vectors(vectors)
    assert stored.dtype == np.int8 and scale.shape == (4,)
    for head in range(4):
        error = np.abs(stored[head] * scale[head] - vectors[head]).max()
        assert error <= explorer.vector_error(scale[head]) + 1e-12
    assert np.abs(stored[:3]).max() == 127  # each non-zero head uses the full byte range


def decode_entry(example, entry, layers, heads, q_len, k_len):
    """Inflate one packed entry in Python, as the page does in JavaScript."""
    packed = example["entries"][entry]
    raw = zlib.decompress(base64.b64decode(packed["bytes"]))
    n_weights = layers * heads * q_len * k_len
    weights = np.frombuffer(raw[:n_weights], np.uint8).reshape(layers, heads, q_len, k_len)
    size = packed["size"]
    rest = np.frombuffer(raw[n_weights:], np.int8)
    queries = rest[:layers * heads * q_len * size].reshape(layers, heads, q_len, size)
    keys = rest[layers * heads * q_len * size:].reshape(layers, heads, k_len, size)
    return weights, queries * np.array(packed["query_scales"])[:, :, None, None], \
        keys * np.array(packed["key_scales"])[:, :, None, None]


def test_page_carries_unpadded_numbers_within_the_error(tmp_path):
    data = bert_data()
    path = explorer.write_explorer(tmp_path / "page.html", explorer_input(data))
    page = page_json(path)
    assert (page["layers"], page["heads"], page["has_vectors"]) == (2, 3, True)
    for case, length in enumerate((7, 10, 5)):
        example = page["examples"][case]
        assert example["src"] == data["src_tokens"][case][:length]
        assert example["segments"] == data["segments"][case][:length]
        weights, queries, keys = decode_entry(example, "encoder", 2, 3, length, length)
        for layer in range(2):
            real = data["attentions"]["encoder"][layer][case][:, :length, :length]
            assert np.abs(weights[layer] / 255 - real).max() <= explorer.WEIGHT_ERROR + 1e-7
            for stored, exact in ((queries, data["queries"]), (keys, data["keys"])):
                exact = exact["encoder"][layer][case][:, :length]
                step = np.abs(exact).max(axis=(1, 2)) / 127
                assert np.all(np.abs(stored[layer] - exact).max(axis=(1, 2)) <= step / 2 + 1e-6)


def explorer_input(data):
    """save_attention_pickle's keyword arguments as the contents of a loaded pickle."""
    from nlp_tutorials.analysis.visual import attention_data

    return attention_data(**data)


def test_template_files_are_package_data():
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    patterns = setup["options.package_data"]["nlp_tutorials.analysis.explorer"].split(",")
    for name in explorer.TEMPLATE_FILES:
        assert any(Path(name).match(pattern.strip()) for pattern in patterns), name
        assert (ROOT / "nlp_tutorials" / "analysis" / "explorer" / name).is_file()


def test_page_has_no_outside_references(tmp_path):
    path = explorer.write_explorer(tmp_path / "page.html", explorer_input(bert_data()))
    html = path.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html)
    assert "{{" not in html and "/*{{" not in html  # every placeholder filled


def test_a_token_cannot_end_the_script_early(tmp_path):
    data = bert_data()
    data["src_tokens"][0][1] = "</script><b>"
    path = explorer.write_explorer(tmp_path / "page.html", explorer_input(data))
    assert path.read_text(encoding="utf-8").count("</script>") == 2
    assert page_json(path)["examples"][0]["src"][1] == "</script><b>"


# ---------- bad input: one line, nothing written ----------

def run_explore(model, *args):
    return main(model, ["explore", *map(str, args)])


def test_out_of_range_start_view_writes_nothing(tmp_path, capsys):
    source = pickled(tmp_path, bert_data())
    output = tmp_path / "page.html"
    for flag, value, valid in (("--example", 3, "0..2"), ("--layer", 2, "0..1"),
                               ("--head", 3, "0..2")):
        assert run_explore("bert", "--input", source, "--output", output, flag, value) == 2
        error = capsys.readouterr().err
        assert f"{flag} {value} is out of range" in error and f"(valid: {valid})" in error
        assert error.count("\n") == 1
    assert not output.exists()


def test_pickle_that_does_not_fit(tmp_path, capsys):
    foreign = tmp_path / "foreign.pkl"
    foreign.write_bytes(pickle.dumps({"model": "bert", "src": [["a"]], "attentions": {}}))
    output = tmp_path / "page.html"
    assert run_explore("bert", "--input", foreign, "--output", output) == 2
    assert "'attentions' holds []" in capsys.readouterr().err
    gpt = pickled(tmp_path, bert_data(model="gpt"), "gpt.pkl")
    assert run_explore("bert", "--input", gpt, "--output", output) == 2
    assert "holds gpt attention; expected bert" in capsys.readouterr().err
    assert not output.exists()


def test_model_folder_that_does_not_fit(tmp_path, capsys):
    output = tmp_path / "page.html"
    assert run_explore("transformer", "--model-dir", tmp_path / "nothing", "--output",
                       output) == 2
    assert "no trained model" in capsys.readouterr().err
    assert not output.exists()


def test_both_sources_refused(tmp_path, capsys):
    assert run_explore("bert", "--input", "a.pkl", "--model-dir", "m") == 2
    assert "expected one source of attention, not both" in capsys.readouterr().err


def test_unwritable_output_leaves_nothing(tmp_path, capsys):
    source = pickled(tmp_path, bert_data())
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    assert run_explore("bert", "--input", source, "--output", blocker / "page.html") == 2
    assert "cannot write the explorer page" in capsys.readouterr().err
    folder = tmp_path / "folder.html"
    folder.mkdir()
    assert run_explore("bert", "--input", source, "--output", folder) == 2
    assert "cannot write the explorer page" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "attention.pkl",
                                                         "folder.html"]
    assert list(folder.iterdir()) == []


def test_importance_of_another_shape_is_refused(tmp_path, capsys):
    source = pickled(tmp_path, bert_data())
    (tmp_path / explorer.IMPORTANCE_FILE).write_text(json.dumps({"importance": [[1, 2]]}))
    output = tmp_path / "page.html"
    assert run_explore("bert", "--input", source, "--output", output) == 2
    error = capsys.readouterr().err
    assert "head_importance.json: 'importance' holds shape [1, 2]; expected [2, 3]" in error
    assert not output.exists()


def test_importance_beside_the_pickle_reaches_the_page(tmp_path):
    source = pickled(tmp_path, bert_data())
    importance = np.random.default_rng(4).random((2, 3))
    (tmp_path / explorer.IMPORTANCE_FILE).write_text(
        json.dumps({"importance": importance.tolist()}))
    output = tmp_path / "page.html"
    assert run_explore("bert", "--input", source, "--output", output, "--n", 2) == 0
    page = page_json(output)
    assert np.allclose(page["importance"], importance) and len(page["examples"]) == 2


def test_pickle_checks_queries_and_keys(tmp_path):
    data = bert_data()
    data["keys"]["encoder"][1] = data["keys"]["encoder"][1][:, :, :4]
    one_line_error(r"keys\['encoder'\] layer 1 has shape \(3, 3, 4, 8\); expected \[3, 3, 10, "
                   r"head_size\]", pickled, tmp_path, data)
    data = bert_data()
    del data["queries"]
    one_line_error("queries and keys go together", pickled, tmp_path, data)
    data = bert_data()
    data["segments"] = data["segments"][:2]
    one_line_error("'segments' must be", pickled, tmp_path, data)


# ---------- models return the vectors that make their attention ----------

@pytest.mark.parametrize("model_type", ["bert", "gpt", "transformer"])
def test_attention_vectors_make_the_attention(model_type):
    model = tiny_model(model_type, vocab_size=30, hidden_size=16, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=16)
    ids = np.array([[2, 5, 6, 7, 0, 0], [2, 3, 4, 5, 6, 7]], np.int32)
    inputs = ({"src_ids": ids, "tgt_ids": ids} if model_type == "transformer"
              else {"input_ids": ids, "token_type_ids": np.zeros_like(ids)})
    found = attention_vectors(model, inputs)
    called = model(inputs)["attentions"]
    lengths = (ids != 0).sum(1)
    for entry, layers in found["attentions"].items():
        causal = entry == "decoder" or model_type == "gpt"
        for layer, probs in enumerate(layers):
            q, k = (np.asarray(found[kind][entry][layer]) for kind in ("queries", "keys"))
            expected = softmax_attention(q, k, lengths, causal)
            assert np.abs(np.asarray(probs) - expected).max() < 1e-5
            assert np.abs(np.asarray(called[entry][layer]) - expected).max() < 1e-5


def test_export_saves_vectors_and_segments_without_padding_columns(tmp_path):
    from nlp_tutorials.tasks.mrpc import MrpcTask
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.text.tokenization import WordTokenizer
    from nlp_tutorials.analysis.visual import export_attention, load_attention_pickle

    pairs = load_mrpc("test")[:3]
    tokenizer = WordTokenizer.build([text for pair in pairs for text in (pair.text, pair.pair)])
    model = tiny_model("bert", vocab_size=tokenizer.vocab_size, hidden_size=16,
                       num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       max_position_embeddings=128)
    data = load_attention_pickle(export_attention(model, tokenizer, 3, tmp_path / "a.pkl"))
    encoded = MrpcTask().encode(tokenizer, pairs, 128)
    longest = int((encoded["input_ids"] != 0).sum(1).max())
    assert len(data["src"][0]) == longest < 128
    assert data["segments"] == encoded["token_type_ids"][:, :longest].tolist()
    q, k = data["queries"]["encoder"][0], data["keys"]["encoder"][0]
    expected = softmax_attention(q, k, (encoded["input_ids"] != 0).sum(1))
    assert np.abs(data["attentions"]["encoder"][0] - expected).max() < 1e-5


# ---------- explore from model folders ----------

def tiny_bert_config(tokenizer):
    return tiny_config(vocab_size=tokenizer.vocab_size, hidden_size=16, num_attention_heads=2,
                       intermediate_size=32, max_position_embeddings=128)


def mrpc_tokenizer():
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.text.tokenization import WordTokenizer

    return WordTokenizer.build([text for pair in load_mrpc("test")[:3]
                                for text in (pair.text, pair.pair)])


def set_weights_of_our_own(model, seed: int):
    """Overwrite every kernel and embedding table of ``model`` with normal values (sd 0.5,
    against the initializer's 0.02) drawn from ``seed``; biases and LayerNorms stay as built.

    A fresh model's attention is nearly uniform; with these weights it is sharp in every
    layer, so a page that shows a freshly initialised model rather than the saved one cannot
    match. (Biases of that size would make every position alike after one layer.)"""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        if weight.path.endswith(("kernel", "embeddings")):
            weight.assign(rng.normal(0, 0.5, weight.shape).astype(np.float32))
    return model


def check_entry_against(example, entry, expected, fresh, case, q_len, k_len):
    """The page's ``entry`` weights of one example against the saved model's attention
    (``expected``, per layer [n, heads, q, k]); ``fresh``, a new model's, must differ."""
    layers, heads = len(expected), np.asarray(expected[0]).shape[1]
    weights, _, _ = decode_entry(example, entry, layers, heads, q_len, k_len)
    for layer in range(layers):
        exact = np.asarray(expected[layer])[case][:, :q_len, :k_len]
        assert np.abs(weights[layer] / 255 - exact).max() <= explorer.WEIGHT_ERROR + 1e-6
        other = np.asarray(fresh[layer])[case][:, :q_len, :k_len]
        assert np.abs(other - exact).max() > 0.1  # the check can tell the two models apart


@pytest.mark.slow
def test_explore_a_fine_tuned_folder_shows_its_backbone(tmp_path):
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.tasks.mrpc import MrpcTask
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.finetuned.folders import save_head
    from nlp_tutorials.models.task_heads import SequenceClassifier

    tokenizer = mrpc_tokenizer()
    classifier = SequenceClassifier(BERT(tiny_bert_config(tokenizer)))
    set_weights_of_our_own(classifier.backbone, seed=4)
    save_head(classifier, tmp_path)
    tokenizer.save(tmp_path)
    page = page_json(explorer.explore(ExploreSettings(
        model_type="bert", output=str(tmp_path / "page.html"), model_dir=str(tmp_path), n=3)))
    encoded = MrpcTask().encode(tokenizer, load_mrpc("test")[:3], 128)
    inputs = {"input_ids": encoded["input_ids"], "token_type_ids": encoded["token_type_ids"]}
    attentions = classifier.backbone(inputs)["attentions"]["encoder"]
    fresh = BERT(tiny_bert_config(tokenizer))(inputs)["attentions"]["encoder"]
    for case, example in enumerate(page["examples"]):
        length = int((inputs["input_ids"][case] != 0).sum())
        assert example["src"] == tokenizer.convert_ids_to_tokens(
            inputs["input_ids"][case][:length])
        assert example["segments"] == inputs["token_type_ids"][case][:length].tolist()
        check_entry_against(example, "encoder", attentions, fresh, case, length, length)


def test_explore_a_pretraining_folder(tmp_path):
    import tensorflow as tf

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.tasks.mrpc import load_mrpc
    from nlp_tutorials.tasks.mrpc import MrpcTask
    from nlp_tutorials.training.checkpoints import training_checkpoint

    tokenizer = mrpc_tokenizer()
    config = tiny_bert_config(tokenizer)
    config.save(tmp_path)
    tokenizer.save(tmp_path)
    model = set_weights_of_our_own(BERT(config), seed=6)
    tf.train.CheckpointManager(training_checkpoint(model), str(tmp_path / "checkpoints"),
                               max_to_keep=1).save()
    assert run_explore("bert", "--model-dir", tmp_path, "--n", 2, "--output",
                       tmp_path / "page.html", "--view", "neuron", "--layer", 1) == 0
    page = page_json(tmp_path / "page.html")
    assert len(page["examples"]) == 2 and page["has_vectors"] and page["importance"] is None
    assert page["initial"] == {"example": 0, "layer": 1, "head": 0, "view": "neuron"}
    # The page shows the checkpoint's model on the first two MRPC test pairs.
    encoded = MrpcTask().encode(tokenizer, load_mrpc("test")[:2], 128)
    inputs = {"input_ids": encoded["input_ids"], "token_type_ids": encoded["token_type_ids"]}
    expected = model(inputs)["attentions"]["encoder"]
    fresh = BERT(config)(inputs)["attentions"]["encoder"]
    for case, example in enumerate(page["examples"]):
        length = int((inputs["input_ids"][case] != 0).sum())
        assert example["src"] == tokenizer.convert_ids_to_tokens(
            inputs["input_ids"][case][:length])
        check_entry_against(example, "encoder", expected, fresh, case, length, length)


def test_explore_the_date_transformer(tmp_path):
    from nlp_tutorials.tasks import dates
    from nlp_tutorials.training.config import DateTrainConfig
    from nlp_tutorials.training.seq2seq import save
    from nlp_tutorials.transformer import Transformer

    config = DateTrainConfig(model_dir=str(tmp_path), dim=16, layers=1, heads=2)
    model = set_weights_of_our_own(Transformer(config.model_config()), seed=7)
    save(model, config)
    page = page_json(explorer.explore(ExploreSettings(
        model_type="transformer", output=str(tmp_path / "page.html"), model_dir=str(tmp_path),
        n=2)))
    assert page["entries"] == ["encoder", "decoder", "encoder_decoder"]
    assert page["causal"] == {"encoder": False, "decoder": True, "encoder_decoder": False}
    source = dates.encode_sources(dates.split()[1][:1])[0]
    example = page["examples"][0]
    assert example["src"] == [dates.VOCAB[i] for i in source if i != 0]
    weights, queries, keys = decode_entry(example, "encoder_decoder", 1, 2, len(example["tgt"]),
                                          len(example["src"]))
    # Cross-attention rows are softmaxes over the real source tokens: each sums to 1.
    assert np.abs(weights.sum(-1) / 255 - 1).max() <= len(example["src"]) * explorer.WEIGHT_ERROR
    assert queries.shape[-1] == keys.shape[-1] == 8
    # The first two held-out dates, a token a character: YY-MM-DD read, [BOS] DD/Mon/YYYY fed
    # to the decoder; the weights are the saved model's attention on them.
    days = dates.split()[1][:2]
    assert len(page["examples"]) == len(days)
    for day, example in zip(days, page["examples"]):
        assert example["src"] == list(day.strftime("%y-%m-%d"))
        month = dates.MONTHS[day.month - 1]
        assert example["tgt"] == ["[BOS]", *f"{day.day:02d}/{month}/{day.year}"]
    inputs = {side: np.array([[dates.IDS[token] for token in example[tokens]]
                              for example in page["examples"]], np.int32)
              for side, tokens in (("src_ids", "src"), ("tgt_ids", "tgt"))}
    expected = model(inputs)["attentions"]
    fresh = Transformer(config.model_config())(inputs)["attentions"]
    src_len, tgt_len = inputs["src_ids"].shape[1], inputs["tgt_ids"].shape[1]
    for case, example in enumerate(page["examples"]):
        for entry, q_len, k_len in (("encoder", src_len, src_len), ("decoder", tgt_len, tgt_len),
                                    ("encoder_decoder", tgt_len, src_len)):
            check_entry_against(example, entry, expected[entry], fresh[entry], case, q_len, k_len)
