"""A task model's answers on the explorer page, in a real browser (see test_explorer_browser.py
for how Chromium is found): the line under the head chips shows each example's answer as the
task gave it, and a page without answers shows none."""
import os

import pytest

from nlp_tutorials.analysis import explorer
from nlp_tutorials.analysis.visual import attention_data
from test_explorer import bert_data

pytestmark = pytest.mark.slow  # drives a Chromium subprocess

ANSWERS = [{"label": "entailment", "probability": 0.8125},
           {"score": 3.14159},
           {"tags": ["", "B-PER", "", "O"]},
           None]


def answer_lines(chromium, tmp_path, answers):
    """The #answer element's text and hidden flag for each example of a page whose examples
    carry ``answers`` (None: a page without any)."""
    data = attention_data(**bert_data(lengths=(7, 10, 5, 6)))
    if answers is not None:
        data["answers"] = answers
    path = explorer.write_explorer(tmp_path / "page.html", data)
    executable, playwright_api = chromium
    with playwright_api.sync_playwright() as driver:
        args = ["--no-sandbox"] if os.geteuid() == 0 else []
        browser = driver.chromium.launch(executable_path=executable, args=args)
        page = browser.new_context(offline=True).new_page()
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready=true]", timeout=15000)
        shown = []
        for index in range(len(data["src"])):
            page.evaluate("index => window.explorer.setExample(index)", index)
            shown.append(page.evaluate("""() => { const line = document.getElementById("answer");
                                                  return [line.textContent, line.hidden]; }"""))
        browser.close()
    return shown, data["src"]


def test_each_example_shows_its_answer(chromium, tmp_path):
    shown, tokens = answer_lines(chromium, tmp_path, ANSWERS)
    tagged = " ".join(f"{tokens[2][i]}/{tag}" for i, tag in enumerate(ANSWERS[2]["tags"]) if tag)
    assert shown == [["Model's answer: entailment (probability 0.813)", False],
                     ["Model's score: 3.142", False],
                     [f"Model's tags: {tagged}", False],
                     ["", True]]


def test_a_page_without_answers_shows_none(chromium, tmp_path):
    shown, _ = answer_lines(chromium, tmp_path, None)
    assert shown == [["", True]] * 4
