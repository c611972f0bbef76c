"""The explorer page in a real browser: headless Chromium opens the file from disk with the
network off, and what the page draws (the numbers it puts on the canvas as ``data-drawn``) is
compared with the pickle it was made from, within the quantization error the page states.

Chromium is found by :func:`nlp_tutorials.analysis.explorer.find_chromium` (``NLP_TUTORIALS_CHROMIUM``,
else ``chromium``/``chromium-browser`` on the PATH); without one these tests skip and say so.
"""
import json
import os
from xml.etree import ElementTree

import numpy as np
import pytest

from nlp_tutorials.analysis import explorer
from nlp_tutorials.analysis.visual import attention_data
from test_explorer import bert_data, transformer_data

pytestmark = pytest.mark.slow  # each test drives a Chromium subprocess
PNG_MAGIC = b"\x89PNG"
TOLERANCE = explorer.WEIGHT_ERROR + 1e-6  # float32 weights vs the page's byte / 255


@pytest.fixture(scope="module")
def browser():
    executable = explorer.find_chromium()
    if executable is None:
        pytest.skip("no Chromium found: set NLP_TUTORIALS_CHROMIUM or put chromium on the PATH")
    playwright_api = pytest.importorskip("playwright.sync_api",
                                         reason="playwright (the test extra) is not installed")
    with playwright_api.sync_playwright() as driver:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        chromium = driver.chromium.launch(executable_path=executable, args=args)
        yield chromium
        chromium.close()


@pytest.fixture
def open_page(browser, tmp_path):
    """open_page(data, **initial) -> (page, data as loaded): the explorer of ``data`` (keyword
    arguments of save_attention_pickle), opened from disk with every other request refused."""
    contexts, outside = [], []

    def refuse_outside(route):
        if not route.request.url.startswith("file:"):
            outside.append(route.request.url)
            return route.abort()
        return route.continue_()

    def opener(data, importance=None, **initial):
        loaded = attention_data(**data)
        start = explorer.check_initial(loaded, initial.get("example", 0), initial.get("layer", 0),
                                       initial.get("head", 0), initial.get("view", "head"))
        path = explorer.write_explorer(tmp_path / "page.html", loaded, importance, start)
        context = browser.new_context(offline=True, accept_downloads=True,
                                      viewport={"width": 1100, "height": 800})
        contexts.append(context)
        context.route("**/*", refuse_outside)
        page = context.new_page()
        errors = []
        page.on("pageerror", lambda error: errors.append(error))
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready=true]", timeout=15000)
        assert not errors
        return page, loaded

    yield opener
    for context in contexts:
        context.close()
    assert not outside, f"the page asked for {outside}"


def drawn(page, **expected):
    """The numbers of the last drawing, once it shows ``expected`` (the redraw is async)."""
    page.wait_for_function(
        """expected => { const text = document.getElementById("view").dataset.drawn;
           if (!text) return false; const drawn = JSON.parse(text);
           return Object.entries(expected).every(([k, v]) =>
             JSON.stringify(drawn[k]) === JSON.stringify(v)); }""", arg=expected, timeout=10000)
    return json.loads(page.get_attribute("#view", "data-drawn"))


def real_length(tokens):
    return len(explorer.unpadded_positions(tokens))


def check_lines(lines, weights, heads, only=None):
    """Drawn [head, i, j, weight] lines against ``weights`` [heads, q, k] (unpadded): each drawn
    weight within the error, and every weight above the drawing threshold drawn."""
    minimum = 3 / 255
    found = {(h, i, j): w for h, i, j, w in lines}
    assert {h for h, _, _ in found} <= set(heads)
    for (h, i, j), w in found.items():
        assert abs(w - weights[h, i, j]) <= TOLERANCE
        assert only is None or only(i, j)
    for h in heads:
        for i, j in zip(*np.nonzero(weights[h] >= minimum + TOLERANCE)):
            if only is None or only(i, j):
                assert (h, i, j) in found, (h, i, j)
    assert all(w >= minimum - TOLERANCE for w in found.values())


def test_head_view_draws_the_pickle_weights(open_page, tmp_path):
    page, data = open_page(bert_data())
    page.select_option("#example", "1")
    page.select_option("#layer", "1")
    page.click(".chip[data-head='2']")
    page.click(".chip[data-head='0']")
    page.click(".chip[data-head='1']")
    result = drawn(page, view="head", example=1, layer=1, heads=[1, 2])
    length = real_length(data["src"][1])
    weights = data["attentions"]["encoder"][1][1][:, :length, :length]
    check_lines(result["lines"], weights, [1, 2])
    page.screenshot(path=tmp_path / "head.png")
    assert (tmp_path / "head.png").read_bytes()[:4] == PNG_MAGIC


def test_hovering_a_token_shows_only_its_lines(open_page):
    page, data = open_page(bert_data(), example=2, layer=0, head=0)
    layout = page.evaluate("explorer.scene().layout")
    box = page.locator("#view").bounding_box()
    query = 3
    page.mouse.move(box["x"] + layout["xLeft"] - 20,
                    box["y"] + layout["top"] + (query + 0.5) * layout["rowH"])
    result = drawn(page, example=2)
    page.wait_for_function("() => explorer.state.hover && explorer.state.hover.index === 3")
    result = json.loads(page.get_attribute("#view", "data-drawn"))
    length = real_length(data["src"][2])
    weights = data["attentions"]["encoder"][0][2][:, :length, :length]
    assert result["lines"]
    check_lines(result["lines"], weights, [0], only=lambda i, j: i == query)


def test_model_view_shows_importance_and_opens_a_head(open_page):
    importance = np.random.default_rng(5).random((2, 3)).tolist()
    page, _ = open_page(bert_data(), importance=importance)
    page.click("button[data-view='model']")
    result = drawn(page, view="model")
    assert result["has_importance"]
    assert [[cell["importance"] for cell in result["cells"] if cell["layer"] == layer]
            for layer in range(2)] == importance
    cell = next(c for c in result["cells"] if (c["layer"], c["head"]) == (1, 2))
    box = page.locator("#view").bounding_box()
    page.mouse.click(box["x"] + cell["x"] + cell["size"] / 2,
                     box["y"] + cell["y"] + cell["size"] / 2)
    assert drawn(page, view="head", layer=1, heads=[2])["lines"]


def test_neuron_view_shows_the_vectors_that_make_the_score(open_page):
    page, data = open_page(bert_data(), example=0, layer=1, head=2, view="neuron")
    page.select_option("#query", "4")
    result = drawn(page, view="neuron", query=4, layer=1, head=2)
    length = real_length(data["src"][0])
    q = data["queries"]["encoder"][1][0, 2, :length]  # [q_len, size]
    k = data["keys"]["encoder"][1][0, 2, :length]
    q_step, k_step = np.abs(q).max() / 127, np.abs(k).max() / 127
    page_q, page_k = np.array(result["q"]), np.array(result["keys"])
    assert np.abs(page_q - q[4]).max() <= q_step / 2 + 1e-6
    assert np.abs(page_k - k).max() <= k_step / 2 + 1e-6
    assert np.allclose(result["products"], page_q * page_k)
    # The score error bound follows from the component errors: |dq|, |dk| <= half a step.
    bound = ((np.abs(q[4]) * k_step / 2 + np.abs(k) * q_step / 2 + q_step * k_step / 4).sum(1)
             / np.sqrt(q.shape[1]))
    assert np.all(np.abs(np.array(result["scores"]) - k @ q[4] / np.sqrt(q.shape[1]))
                  <= bound + 1e-6)
    scores = np.array(result["scores"])
    assert np.allclose(result["softmax"], np.exp(scores) / np.exp(scores).sum())
    exact = data["attentions"]["encoder"][1][0, 2, 4, :length]
    assert np.abs(np.array(result["weights"]) - exact).max() <= TOLERANCE


def test_seq2seq_cross_attention_and_causal_neuron_view(open_page):
    page, data = open_page(transformer_data(), example=1)
    page.select_option("#entry", "encoder_decoder")
    page.select_option("#layer", "1")
    result = drawn(page, entry="encoder_decoder", layer=1, heads=[0])
    tgt, src = (real_length(data[axis][1]) for axis in ("tgt", "src"))
    check_lines(result["lines"], data["attentions"]["encoder_decoder"][1][1][:, :tgt, :src], [0])
    page.select_option("#entry", "decoder")
    page.click("button[data-view='neuron']")
    page.select_option("#query", "2")
    result = drawn(page, view="neuron", entry="decoder", query=2)
    assert len(result["scores"]) == 3  # a decoder query sees keys 0..2 only
    exact = data["attentions"]["decoder"][1][1, 0, 2, :3]
    assert np.abs(np.array(result["weights"]) - exact).max() <= TOLERANCE


def test_saves_png_and_svg_of_the_same_drawing(open_page, tmp_path):
    page, data = open_page(bert_data(), example=1)
    result = drawn(page, view="head", example=1)
    with page.expect_download() as download:
        page.click("#save-png")
    png = tmp_path / "view.png"
    download.value.save_as(png)
    header = png.read_bytes()
    width, height = (int.from_bytes(header[at:at + 4], "big") for at in (16, 20))
    assert header[:4] == PNG_MAGIC
    assert (width, height) == tuple(page.evaluate("[explorer.scene().width, "
                                                  "explorer.scene().height]"))
    with page.expect_download() as download:
        page.click("#save-svg")
    svg = tmp_path / "view.svg"
    download.value.save_as(svg)
    root = ElementTree.parse(svg).getroot()
    namespace = "{http://www.w3.org/2000/svg}"
    segments = sum(path.get("d").count("M") for path in root.iter(f"{namespace}path"))
    assert segments == len(result["lines"])
    texts = [text.text for text in root.iter(f"{namespace}text")]
    tokens = data["src"][1][:real_length(data["src"][1])]
    assert texts[2:] == tokens + tokens  # the column titles, then queries and keys
