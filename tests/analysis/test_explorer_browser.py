"""The explorer page in a real browser: headless Chromium opens the file from disk with the
network off, and what the page draws (the numbers it puts on the canvas as ``data-drawn``) is
compared with the pickle it was made from, within the quantization error the page states.

Pictures (the PNG download, a screenshot) are decoded with Pillow and their pixels compared
with the weights, never with the page's own numbers alone.

Chromium is found by :func:`nlp_tutorials.analysis.explorer.find_chromium` (``NLP_TUTORIALS_CHROMIUM``,
else ``chromium``/``chromium-browser`` on the PATH; see the ``chromium`` fixture in conftest.py):
without one these tests skip and say so, except under ``CI=true``, where they fail.
"""
import json
import os
from xml.etree import ElementTree

import numpy as np
import pytest
from PIL import Image

from nlp_tutorials.analysis import explorer
from nlp_tutorials.analysis.visual import attention_data
from test_explorer import bert_data, transformer_data

pytestmark = pytest.mark.slow  # each test drives a Chromium subprocess
PNG_MAGIC = b"\x89PNG"
TOLERANCE = explorer.WEIGHT_ERROR + 1e-6  # float32 weights vs the page's byte / 255


@pytest.fixture(scope="module")
def browser(chromium):
    executable, playwright_api = chromium
    with playwright_api.sync_playwright() as driver:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        launched = driver.chromium.launch(executable_path=executable, args=args)
        yield launched
        launched.close()


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


def pixels_of(png) -> np.ndarray:
    """[height, width, 3] uint8: the PNG file ``png`` decoded by Pillow."""
    with Image.open(png) as image:
        return np.asarray(image.convert("RGB"))


def hue_and_chroma(pixels):
    """Hue in degrees [0, 360) and chroma (max - min channel, 0..1) of [..., 3] uint8 pixels.

    A line of colour c drawn with opacity a over white is 1 - a (1 - c): the same hue as c, so
    the hue tells which head drew a pixel whatever the line's weight."""
    r, g, b = np.moveaxis(pixels.astype(np.float64) / 255, -1, 0)
    top = np.maximum(np.maximum(r, g), b)
    chroma = top - np.minimum(np.minimum(r, g), b)
    safe = np.where(chroma > 0, chroma, 1.0)
    sector = np.select([top == r, top == g], [((g - b) / safe) % 6, (b - r) / safe + 2],
                       (r - g) / safe + 4)
    return sector * 60, chroma


def near_hue(hue, degrees, within=20):
    """[...] bool: whether each hue lies within ``within`` degrees of ``degrees``, round the
    wheel."""
    return np.abs((hue - degrees + 180) % 360 - 180) <= within


def head_hue(head, heads):
    """The hue of head ``head``'s lines and chip: evenly spaced round the colour wheel."""
    return 360 * head / heads


def canvas_pixels(page) -> np.ndarray:
    """[height, width, 3] uint8: what the page's canvas holds now, read with getImageData."""
    width, height, rgba = page.evaluate("""() => {
        const canvas = document.getElementById("view");
        const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
        return [canvas.width, canvas.height, Array.from(data.data)]; }""")
    return np.array(rgba, np.uint8).reshape(height, width, 4)[..., :3]


def download(page, button, path):
    """Click ``button`` and save the file it downloads as ``path``."""
    with page.expect_download() as started:
        page.click(button)
    started.value.save_as(path)
    return path


def heatmap_colour(weight):
    """[..., 3] the model view's colour of ``weight`` (float array): the stored byte
    round(255 w) on a square-root scale ("darker is more", docs/explorer.md) from white (0) to
    dark blue (1): 255 - (225, 185, 115) sqrt(byte / 255)."""
    stored = np.round(255 * np.asarray(weight, np.float64)) / 255
    return 255 - np.array([225, 185, 115]) * np.sqrt(stored)[..., None]


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
    # On screen, between the token columns: lines in the hues of heads 1 and 2, none in head
    # 0's (red), which is switched off.
    box = page.locator("#view").bounding_box()
    layout = page.evaluate("explorer.scene().layout")
    left, right = (int(box["x"] + layout[x]) + sign * 8 for x, sign in (("xLeft", 1),
                                                                         ("xRight", -1)))
    top, bottom = int(box["y"] + layout["top"]), int(box["y"] + box["height"]) - 12
    hue, chroma = hue_and_chroma(pixels_of(tmp_path / "head.png")[top:bottom, left:right])
    coloured = hue[chroma > 0.1]
    for head in (1, 2):
        assert near_hue(coloured, head_hue(head, 3)).sum() > 100, f"no line of head {head}"
    assert not near_hue(coloured, head_hue(0, 3), within=40).any(), "head 0's lines are shown"


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
    png = download(page, "#save-png", tmp_path / "view.png")
    header = png.read_bytes()
    width, height = (int.from_bytes(header[at:at + 4], "big") for at in (16, 20))
    assert header[:4] == PNG_MAGIC
    assert (width, height) == tuple(page.evaluate("[explorer.scene().width, "
                                                  "explorer.scene().height]"))
    # The file holds the drawing on the canvas, pixel for pixel, and that drawing is not
    # blank: head 0's lines (red, the only head shown) between the token columns.
    pixels = pixels_of(png)
    np.testing.assert_array_equal(pixels, canvas_pixels(page))
    layout = page.evaluate("explorer.scene().layout")
    hue, chroma = hue_and_chroma(pixels[:, layout["xLeft"] + 8:layout["xRight"] - 8])
    assert near_hue(hue[chroma > 0.1], head_hue(0, 3)).sum() > 100
    assert len(np.unique(pixels.reshape(-1, 3), axis=0)) > 50
    svg = download(page, "#save-svg", tmp_path / "view.svg")
    root = ElementTree.parse(svg).getroot()
    namespace = "{http://www.w3.org/2000/svg}"
    segments = sum(path.get("d").count("M") for path in root.iter(f"{namespace}path"))
    assert segments == len(result["lines"])
    texts = [text.text for text in root.iter(f"{namespace}text")]
    tokens = data["src"][1][:real_length(data["src"][1])]
    assert texts[2:] == tokens + tokens  # the column titles, then queries and keys


def test_saved_png_of_the_model_view_holds_every_heads_heatmap(open_page, tmp_path):
    """Each (layer, head) picture of the model view, read from the PNG download at the centre
    of each token's block, has the colour of the pickle's weight there."""
    page, data = open_page(bert_data(), example=1, view="model")
    result = drawn(page, view="model", example=1)
    pixels = pixels_of(download(page, "#save-png", tmp_path / "model.png"))
    length = real_length(data["src"][1])
    assert len(result["cells"]) == 2 * 3
    for cell in result["cells"]:
        weights = data["attentions"]["encoder"][cell["layer"]][1][cell["head"], :length, :length]
        centres = (np.arange(length) + 0.5) * cell["size"] / length  # one block per token
        rows = (cell["y"] + centres).astype(int)
        columns = (cell["x"] + centres).astype(int)
        shown = pixels[rows[:, None], columns[None, :]].astype(np.float64)  # [q, k, 3]
        # The page rounds each channel to a byte: within 1 of the exact colour.
        assert np.abs(shown - heatmap_colour(weights)).max() <= 1, cell
        assert len(np.unique(shown.reshape(-1, 3), axis=0)) > length  # a picture, not a fill
