"""The explorer pictures in docs/images/, made from a real model's page.

    python -m nlp_tutorials.bert explore --model-dir /path/to/minilm_mrpc --n 4 \\
        --output /tmp/minilm_explorer.html
    python scripts/explorer_screenshots.py /tmp/minilm_explorer.html

Opens the page in headless Chromium (found as the tests find it), offline, and writes
``explorer_head_view.png`` (the page with its controls), ``explorer_model_view.png`` and
``explorer_neuron_view.png`` (the drawing alone) into docs/images/, each reduced to 128
colours to stay small.
"""
import argparse
import os
from pathlib import Path

from PIL import Image
from playwright.sync_api import sync_playwright

from nlp_tutorials.analysis.explorer import find_chromium

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"


def redraw(page, action):
    """Run ``action`` and wait until the page has drawn again."""
    before = int(page.get_attribute("#view", "data-renders"))
    action()
    page.wait_for_function(
        "before => Number(document.getElementById('view').dataset.renders) > before", arg=before)


def shoot(target, name, **options):
    """Screenshot ``target`` (a page or an element) into docs/images/``name``, 128 colours."""
    path = IMAGES / name
    target.screenshot(path=path, **options)
    Image.open(path).convert("RGB").quantize(colors=128).save(path, optimize=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("page", type=Path, help="an explorer page")
    parser.add_argument("--example", default="1", help="example to show (default 1)")
    args = parser.parse_args()
    with sync_playwright() as driver:
        browser = driver.chromium.launch(executable_path=find_chromium(),
                                         args=["--no-sandbox"] if os.geteuid() == 0 else [])
        page = browser.new_context(offline=True, viewport={"width": 1180, "height": 640}).new_page()
        page.goto(args.page.resolve().as_uri())
        page.wait_for_selector("body[data-ready=true]")
        # The controls stay at the top while scrolling; in a picture of the drawing they would
        # cover part of it.
        page.add_style_tag(content="header { position: static; }")
        redraw(page, lambda: page.select_option("#example", args.example))
        redraw(page, lambda: page.select_option("#layer", "2"))
        redraw(page, lambda: page.click(".chip[data-head='9']"))
        shoot(page, "explorer_head_view.png", clip={"x": 0, "y": 0, "width": 1000, "height": 640})
        redraw(page, lambda: page.click("button[data-view='model']"))
        shoot(page.locator("#view"), "explorer_model_view.png")
        redraw(page, lambda: page.click("button[data-view='neuron']"))
        redraw(page, lambda: page.click(".chip[data-head='9']"))
        redraw(page, lambda: page.select_option("#query", "5"))
        shoot(page.locator("#view"), "explorer_neuron_view.png")
        browser.close()


if __name__ == "__main__":
    main()
