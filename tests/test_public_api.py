"""The names users import, and the commands they run, still work after the package was laid out
by layer: each old import gives the very object its new module defines."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (module users import from, public name, module that defines it now)
PUBLIC_NAMES = [
    ("nlp_tutorials.bert", "BERT", "nlp_tutorials.models.bert"),
    ("nlp_tutorials.gpt", "GPT", "nlp_tutorials.models.gpt"),
    ("nlp_tutorials.transformer", "Transformer", "nlp_tutorials.models.transformer"),
    *[("nlp_tutorials.transformer", name, "nlp_tutorials.models.layers")
      for name in ("MultiHeadAttention", "FeedForward", "EncoderLayer", "DecoderLayer",
                   "Encoder", "Decoder", "Embeddings")],
    ("nlp_tutorials.config", "ModelConfig", "nlp_tutorials.models.config"),
    ("nlp_tutorials.config", "BertConfig", "nlp_tutorials.models.config"),
    *[("nlp_tutorials.heads", name, "nlp_tutorials.models.task_heads")
      for name in ("Head", "SequenceClassifier", "TokenClassifier", "SpanExtractor",
                   "MultipleChoice")],
    *[("nlp_tutorials.tokenization", name, "nlp_tutorials.text.tokenization")
      for name in ("Tokenizer", "WordTokenizer", "WordPieceTokenizer", "load_tokenizer")],
]


@pytest.mark.parametrize("old, name, new", PUBLIC_NAMES,
                         ids=[f"{old}.{name}" for old, name, _ in PUBLIC_NAMES])
def test_public_name_is_the_object_its_new_module_defines(old, name, new):
    imported = getattr(importlib.import_module(old), name)
    assert imported is getattr(importlib.import_module(new), name)
    assert imported.__module__ == new
    assert name in importlib.import_module(old).__all__


def test_baseline_module_runs_the_command_line(monkeypatch):
    import nlp_tutorials.baseline
    import nlp_tutorials.cli

    calls = []
    monkeypatch.setattr(nlp_tutorials.cli, "main", lambda *args: calls.append(args) or 7)
    assert nlp_tutorials.baseline.main(["--task", "rte"]) == 7
    assert calls == [("baseline", ["--task", "rte"])]


def run_module(*argv, timeout=120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT)


@pytest.mark.parametrize("command, subcommands", [
    ("bert", ["train", "finetune", "export-model"]),
    ("gpt", ["train", "generate"]),
    ("transformer", ["train", "translate"]),
])
def test_launchers_still_answer_help(command, subcommands):
    result = run_module(f"nlp_tutorials.{command}", "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: python -m nlp_tutorials.{command} ")
    for subcommand in subcommands:
        assert subcommand in result.stdout
