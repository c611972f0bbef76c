"""A run is scored on its own text's held-out part: a corpus run on the corpus' held-out
documents, which it never trains on, an MRPC run on MRPC's test split, and a text that holds
nothing out is said to be unscored."""
import zlib
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.sources.corpus import HELD_OUT, TRAINED, CorpusData
from nlp_tutorials.sources.corpus_text import CorpusHeldOut
from nlp_tutorials.sources.source import TextSettings
from nlp_tutorials.text.tokenization import WordTokenizer

SENTENCES, WORDS = 3, 4


def write_corpus(path: Path, documents: int) -> Path:
    """Documents of three sentences whose words name their document: d7x12 is document 7."""
    text = "\n\n".join("\n".join(" ".join(f"d{d}x{s}{k}" for k in range(WORDS)) + " ."
                                 for s in range(SENTENCES)) for d in range(documents))
    path.write_text(text + "\n", encoding="utf-8")
    return path


def held_out_by_hand(path: Path) -> set:
    """The documents whose text (lines joined by newlines) has a CRC-32 that is a multiple of
    10: the rule docs/pretraining.md states."""
    documents = path.read_text(encoding="utf-8").strip().split("\n\n")
    return {d for d, text in enumerate(documents) if zlib.crc32(text.encode()) % 10 == 0}


def documents_in(batches, tokenizer) -> set:
    """The documents whose words the batches hold, masked ones included."""
    found = set()
    for batch in batches:
        ids = np.array(batch["input_ids"])
        rows = np.nonzero(batch["mlm_weights"] > 0)[0]
        ids[rows, batch["mlm_positions"][batch["mlm_weights"] > 0]] = \
            batch["mlm_ids"][batch["mlm_weights"] > 0]
        for token in tokenizer.convert_ids_to_tokens(np.unique(ids)):
            if token.startswith("d"):
                found.add(int(token[1:].split("x")[0]))
    return found


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = write_corpus(tmp_path_factory.mktemp("held_out") / "corpus.txt", 60)
    return path, WordTokenizer.build(path.read_text(encoding="utf-8").split("\n"))


def test_training_never_reads_the_held_out_documents_and_scoring_reads_only_them(corpus):
    path, tokenizer = corpus
    held_out = held_out_by_hand(path)
    assert 2 <= len(held_out) <= 15  # about a tenth of 60: the check below can tell
    quiet = {"max_len": 32, "printer": lambda _: None}
    trained = list(CorpusData(str(path), tokenizer, part=TRAINED, **quiet).epoch_batches(0, 4))
    scored = list(CorpusData(str(path), tokenizer, part=HELD_OUT, **quiet).epoch_batches(0, 4))
    assert documents_in(scored, tokenizer) == held_out
    assert documents_in(trained, tokenizer) == set(range(60)) - held_out


def settings(**changes) -> TextSettings:
    values = dict(tokenizer="word", vocab_size=100, tokenizer_sample_mb=1, max_len=32,
                  nsp_mode="random", seed=0, whole_word_mask=False, given=frozenset())
    return TextSettings(**{**values, **changes})


def test_a_held_out_part_too_small_for_a_batch_is_said_and_not_scored(tmp_path):
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining_evaluation import score_on_test

    path = write_corpus(tmp_path / "small.txt", 3)
    assert len(held_out_by_hand(path)) < 2  # no NotNext pair can be drawn from it
    tokenizer = WordTokenizer.build(path.read_text(encoding="utf-8").split("\n"))
    held_out = CorpusHeldOut(str(path), tokenizer, settings())
    assert held_out.batches(4) == []
    printed = []
    config = TrainConfig(batch_size=4)
    assert score_on_test(None, tokenizer, config, held_out, printed.append) == {}
    assert printed == ["scored on the corpus' held-out documents (one in 10, chosen by a "
                       "checksum of their text): too few pairs for one batch of 4; not scored"]
    printed.clear()
    assert score_on_test(None, tokenizer, config, None, printed.append) == {}
    assert printed == ["no held-out text: the run is not scored"]


@pytest.mark.slow
def test_a_corpus_run_is_scored_on_its_held_out_documents_not_on_mrpc(corpus, tmp_path,
                                                                      monkeypatch):
    from nlp_tutorials.system import files
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining import pretrain

    path, _ = corpus
    opened = []
    open_regular = files.open_regular  # how every data file is opened, MRPC's included
    monkeypatch.setattr(files, "open_regular",
                        lambda name: opened.append(Path(name).name) or open_regular(name))
    config = TrainConfig(model_dir=str(tmp_path / "run"), corpus=str(path), max_len=32, dim=32,
                         layers=1, heads=2, batch_size=4, steps=2, checkpoint_every=2,
                         sample_every=100, log_every=1)
    printed = []
    run = pretrain(config, printer=printed.append)
    assert not [name for name in opened if name.startswith("msr_paraphrase_")]
    assert run.test_pairs is None
    # Independently: the trained model's own step over the held-out documents' batches,
    # masked with the run's seed + 1000.
    held_out = CorpusData(str(path), run.tokenizer, max_len=32, seed=config.seed + 1000,
                          part=HELD_OUT, printer=lambda _: None)
    batches = list(held_out.epoch_batches(0, 4))
    assert documents_in(batches, run.tokenizer) == held_out_by_hand(path)
    assert (f"scored on the corpus' held-out documents (one in 10, chosen by a checksum of "
            f"their text): {len(batches)} batches of 4") in printed
    step = run.model.compiled_step(batches[0], training=False)
    accuracy = np.mean([float(step(batch)["mlm_accuracy"]) for batch in batches])
    assert run.evaluation["mlm_accuracy"] == pytest.approx(accuracy, abs=1e-6)
    assert 0.0 <= run.evaluation["baseline_accuracy"] <= 1.0
