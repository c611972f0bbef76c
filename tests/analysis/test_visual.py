"""Attention pickles and plots, on synthetic softmax attention (no TensorFlow)."""
import pickle
import subprocess
import sys

import matplotlib.image
import matplotlib.pyplot as plt
import numpy as np
import pytest

from nlp_tutorials.analysis import visual
from nlp_tutorials.system.errors import UserError

PNG_MAGIC = b"\x89PNG"


def tokens(lengths, step, first="[CLS]"):
    """[n][step] tokens: ``first``, then words, then "[PAD]" up to step."""
    return [[first] + [f"w{i}" for i in range(1, length)] + ["[PAD]"] * (step - length)
            for length in lengths]


def attention(rng, n_layers, heads, key_lengths, q_step, k_step, causal=False):
    """Per layer [n, heads, q_step, k_step] softmax weights with padded keys zeroed."""
    valid = np.arange(k_step)[None, :] < np.asarray(key_lengths)[:, None]  # [n, k_step]
    layers = []
    for _ in range(n_layers):
        weights = np.exp(rng.normal(size=(len(key_lengths), heads, q_step, k_step)))
        weights *= valid[:, None, None, :]
        if causal:
            weights *= np.tril(np.ones((q_step, k_step)))
        layers.append(weights / weights.sum(-1, keepdims=True))  # float64: save must cast
    return layers


def bert_data(n_layers=2, heads=2, n=4, step=8, model="bert"):
    rng = np.random.default_rng(0)
    lengths = rng.integers(3, step + 1, size=n)
    lengths[0] = step - 3  # case 0 always has padding to trim
    return dict(model_name=model, src_tokens=tokens(lengths, step),
                attentions={"encoder": attention(rng, n_layers, heads, lengths, step, step,
                                                 causal=model == "gpt")})


def transformer_data(n=3, src_step=7, tgt_step=6):
    rng = np.random.default_rng(1)
    src_len, tgt_len = [5, 7, 3], [4, 6, 2]
    return dict(
        model_name="transformer", src_tokens=tokens(src_len, src_step, "<GO>"),
        tgt_tokens=tokens(tgt_len, tgt_step, "<GO>"),
        attentions={"encoder": attention(rng, 2, 2, src_len, src_step, src_step),
                    "decoder": attention(rng, 2, 2, tgt_len, tgt_step, tgt_step, causal=True),
                    "encoder_decoder": attention(rng, 2, 2, src_len, tgt_step, src_step)})


def saved(tmp_path, name="bert.pkl", **data):
    return visual.load_attention_pickle(visual.save_attention_pickle(tmp_path / name, **data))


def one_line_error(match, call, *args, **kwargs):
    with pytest.raises(UserError, match=match) as info:
        call(*args, **kwargs)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_round_trip_keeps_structure_and_casts_to_float32(tmp_path):
    data = transformer_data()
    loaded = saved(tmp_path, **data)
    assert loaded["model"] == "transformer"
    assert loaded["src"] == data["src_tokens"] and loaded["tgt"] == data["tgt_tokens"]
    assert set(loaded["attentions"]) == {"encoder", "decoder", "encoder_decoder"}
    for entry, layers in data["attentions"].items():
        assert len(loaded["attentions"][entry]) == len(layers)
        for got, want in zip(loaded["attentions"][entry], layers):
            assert got.dtype == np.float32 and got.shape == want.shape
            np.testing.assert_allclose(got, want, rtol=1e-6)
    assert loaded["attentions"]["encoder_decoder"][0].shape == (3, 2, 6, 7)  # [n, heads, tgt, src]


def test_gpt_round_trip_keeps_causal_triangle(tmp_path):
    loaded = saved(tmp_path, **bert_data(model="gpt"))
    weights = loaded["attentions"]["encoder"][0]
    assert not np.triu(weights, k=1).any()


@pytest.mark.parametrize("breakage, match", [
    (lambda d: d["attentions"]["encoder"].__setitem__(1, np.zeros((4, 3, 8, 8))),
     "layer 1 has shape"),
    (lambda d: d["src_tokens"].pop(),
     r"layer 0 has shape \(4, 2, 8, 8\); expected .* \[3, 2, 8, 8\]"),
    (lambda d: d["src_tokens"][2].append("[PAD]"), "lengths"),
    (lambda d: d["attentions"]["encoder"].__setitem__(0, np.zeros((4, 8, 8))), "expected 4-D"),
    (lambda d: d.__setitem__("model_name", "lstm"), "expected one of"),
])
def test_save_rejects_inconsistent_input(tmp_path, breakage, match):
    data = bert_data()
    breakage(data)
    path = tmp_path / "bad.pkl"
    assert str(path) in one_line_error(match, visual.save_attention_pickle, path, **data)
    assert not path.exists()


def test_missing_pickle_names_the_export_command(tmp_path):
    path = tmp_path / "gpt_attention_matrix.pkl"
    message = one_line_error("no attention pickle", visual.load_attention_pickle, path, "gpt")
    assert message == f"{path}: no attention pickle; run `python -m nlp_tutorials.gpt export` first"
    one_line_error(r"nlp_tutorials\.bert export", visual.load_attention_pickle, path)


def raw_bert():
    data = bert_data()
    return {"model": "bert", "src": data["src_tokens"], "attentions": data["attentions"]}


def with_changes(change):
    data = raw_bert()
    change(data)
    return pickle.dumps(data)


@pytest.mark.parametrize("content, match", [
    (b"model,src\nbert,hello\n", "not an attention pickle"),
    (b"", "not an attention pickle"),
    (pickle.dumps([1, 2, 3]), "expected a dict"),
    (with_changes(lambda d: d.pop("attentions")), "'attentions'"),
    (with_changes(lambda d: d["attentions"].__setitem__("decoder", [])), "exactly encoder"),
    (with_changes(lambda d: d["attentions"]["encoder"].__setitem__(1, np.zeros((4, 3, 8, 8)))),
     r"layer 1 has shape \(4, 3, 8, 8\)"),
    (with_changes(lambda d: d["attentions"]["encoder"].__setitem__(0, np.zeros((4, 2, 8)))),
     "expected 4-D"),
    (with_changes(lambda d: d["attentions"]["encoder"].__setitem__(0, "oops")), "not a numeric"),
    (with_changes(lambda d: d.__setitem__("src", [t[:6] for t in d["src"]])), r"shape .* expected"),
    (with_changes(lambda d: d["src"][1].pop()), "lengths"),
    (with_changes(lambda d: d.__setitem__("src", [[1, 2]] * 4)), "token-string lists"),
])
def test_load_rejects_bad_files_naming_the_file(tmp_path, content, match):
    path = tmp_path / "bert_attention_matrix.pkl"
    path.write_bytes(content)
    assert str(path) in one_line_error(match, visual.load_attention_pickle, path)


def test_transformer_pickle_needs_targets(tmp_path):
    data = transformer_data()
    raw = {"model": "transformer", "src": data["src_tokens"], "attentions": data["attentions"]}
    path = tmp_path / "transformer.pkl"
    path.write_bytes(pickle.dumps(raw))
    one_line_error("'tgt' must be", visual.load_attention_pickle, path)


def test_case_out_of_range_names_valid_range(tmp_path):
    data = saved(tmp_path, **bert_data(n=32))
    message = one_line_error("out of range", visual.plot_heatmaps, data, 40, tmp_path, "bert")
    assert message == "--case 40 is out of range: the pickle holds 32 examples (valid: 0..31)"
    one_line_error(r"--case -1 .*valid: 0\.\.31", visual.plot_heatmaps, data, -1, tmp_path, "bert")
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize("layer, head, match", [
    (2, 0, r"--layer 2 is out of range: the encoder attention has 2 layers \(valid: 0\.\.1\)"),
    (0, 5, r"--head 5 is out of range: the encoder attention has 3 heads \(valid: 0\.\.2\)"),
])
def test_line_view_layer_and_head_out_of_range(tmp_path, layer, head, match):
    data = saved(tmp_path, **bert_data(heads=3))
    one_line_error(match, visual.plot_lines, data, 0, layer, head, tmp_path, "bert")


def test_line_view_unknown_entry(tmp_path):
    data = saved(tmp_path, **bert_data())
    one_line_error("it has: encoder", visual.plot_lines, data, 0, 0, 0, tmp_path, "bert", "decoder")


def png_size(path):
    assert path.read_bytes()[:4] == PNG_MAGIC
    return matplotlib.image.imread(path).shape[:2]  # (height, width) in pixels


@pytest.mark.slow
def test_heatmap_pixels_grow_with_layers_and_heads(tmp_path):
    small = visual.plot_heatmaps(saved(tmp_path, **bert_data(2, 2)), 0, tmp_path / "small", "bert")
    big = visual.plot_heatmaps(saved(tmp_path, **bert_data(4, 4)), 0, tmp_path / "big", "bert")
    assert [p.name for p in small] == [p.name for p in big] == ["bert_encoder_case0.png"]
    (small_h, small_w), (big_h, big_w) = png_size(small[0]), png_size(big[0])
    assert big_h > small_h and big_w > small_w


def test_heatmaps_trim_padding_without_label_shift(tmp_path, monkeypatch):
    data = saved(tmp_path, **bert_data(heads=3))
    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (figures.append(fig), close(fig)))
    visual.plot_heatmaps(data, 0, tmp_path, "bert")

    (fig,) = figures
    kept = [i for i, t in enumerate(data["src"][0]) if t != "[PAD]"]
    panels = [ax for ax in fig.axes if ax.images and ax.get_title()]
    assert [ax.get_title() for ax in panels][-1] == "layer 1 head 2"
    ax = panels[-1]
    expected = data["attentions"]["encoder"][1][0, 2][np.ix_(kept, kept)]
    np.testing.assert_array_equal(ax.images[0].get_array(), expected)
    words = [data["src"][0][i] for i in kept]
    assert [t.get_text() for t in ax.get_yticklabels()] == words  # query i labelled token i
    assert [t.get_text() for t in ax.get_xticklabels()] == words  # key j labelled token j


def test_transformer_writes_three_heatmaps_and_line_views(tmp_path):
    visual.save_attention_pickle(tmp_path / "t.pkl", **transformer_data())
    paths = visual.plot_all(tmp_path / "t.pkl", tmp_path / "out", case=1)
    names = sorted(p.name for p in paths)
    assert names == sorted([
        "transformer_encoder_case1.png", "transformer_decoder_case1.png",
        "transformer_encoder_decoder_case1.png",
        "transformer_encoder_lines_case1_layer1_head0.png",
        "transformer_decoder_lines_case1_layer1_head0.png",
        "transformer_encoder_decoder_lines_case1_layer1_head0.png",
    ])
    for path in paths:
        png_size(path)
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temp left


def test_plot_all_line_view_for_chosen_layer_and_head(tmp_path):
    visual.save_attention_pickle(tmp_path / "gpt.pkl", **bert_data(model="gpt"))
    paths = visual.plot_all(tmp_path / "gpt.pkl", tmp_path, case=2, layer=0, head=1)
    assert [p.name for p in paths] == ["gpt_encoder_case2.png",
                                       "gpt_encoder_lines_case2_layer0_head1.png"]
    assert all(png_size(p) for p in paths)


def test_plot_all_bad_layer_writes_nothing(tmp_path):
    visual.save_attention_pickle(tmp_path / "bert.pkl", **bert_data())
    one_line_error("--layer 9", visual.plot_all, tmp_path / "bert.pkl", tmp_path / "out", case=0,
                   layer=9)
    assert not (tmp_path / "out").exists()


def test_import_is_light():
    code = ("import sys, nlp_tutorials.analysis.visual; "
            "print([m for m in ('tensorflow', 'matplotlib') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
