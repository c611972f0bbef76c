"""A run is scored on its own text's held-out part: a corpus run on the corpus' held-out
documents, which it never trains on, an MRPC run on MRPC's test split, and a text that holds
nothing out is said to be unscored. A corpus prepared into shards keeps its held-out documents
in a file of their own, on which a ``train --data`` run is scored."""
import json
import shutil
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


# --- a corpus prepared into shards: the held-out documents in a file of their own ---

def records_of(path: Path) -> list[np.ndarray]:
    """The input_ids of every pair in the TFRecord file ``path``, read by TensorFlow."""
    import tensorflow as tf

    return [np.array(tf.train.Example.FromString(record.numpy()).features
                     .feature["input_ids"].int64_list.value)
            for record in tf.data.TFRecordDataset(str(path))]


def documents_of_records(path: Path, tokenizer) -> set:
    return documents_in([{"input_ids": ids[None], "mlm_weights": np.zeros((1, 1)),
                          "mlm_positions": np.zeros((1, 1), int), "mlm_ids": np.zeros((1, 1))}
                         for ids in records_of(path)], tokenizer)


@pytest.fixture(scope="module")
def prepared(corpus, tmp_path_factory):
    """The 60-document corpus prepared into 2 shards (max_len 32)."""
    from nlp_tutorials.sources.shards import prepare_shards

    path, tokenizer = corpus
    folder = tmp_path_factory.mktemp("prepared") / "shards"
    printed = []
    prepare_shards(str(path), folder, 2, tokenizer, 32, seed=1, printer=printed.append)
    return folder, printed


def without_held_out(prepared: Path, folder: Path) -> Path:
    """A copy of ``prepared`` as `prepare` wrote folders before it kept held-out documents
    apart: no held-out file, none named in corpus.json."""
    shutil.copytree(prepared, folder)
    description = json.loads((folder / "corpus.json").read_text())
    (folder / description.pop("held_out")["file"]).unlink()
    (folder / "corpus.json").write_text(json.dumps(description))
    return folder


def test_prepare_writes_the_held_out_documents_apart_and_the_shards_hold_the_rest(corpus,
                                                                                  prepared):
    path, tokenizer = corpus
    folder, printed = prepared
    description = json.loads((folder / "corpus.json").read_text())
    held_out = folder / description["held_out"]["file"]
    assert description["held_out"] == {"file": "held-out.tfrecord",
                                       "examples": len(records_of(held_out))}
    assert documents_of_records(held_out, tokenizer) == held_out_by_hand(path)
    in_shards = set().union(*(documents_of_records(folder / entry["file"], tokenizer)
                              for entry in description["shards"]))
    assert in_shards == set(range(60)) - held_out_by_hand(path)
    assert description["documents"] == 60
    assert "held-out pairs in held-out.tfrecord" in printed[-1]


def test_the_held_out_file_is_batched_and_masked_as_a_corpus_run_scores(corpus, prepared):
    from nlp_tutorials.sources.shard_batches import ShardText

    path, tokenizer = corpus
    folder, _ = prepared
    held_out = ShardText(folder).held_out(settings(), tokenizer)
    batches = held_out.batches(4)
    examples = json.loads((folder / "corpus.json").read_text())["held_out"]["examples"]
    assert len(batches) == examples // 4 > 0
    assert documents_in([{k: np.array(v) for k, v in b.items()} for b in batches],
                        tokenizer) == held_out_by_hand(path)
    masks = np.concatenate([np.array(b["mlm_weights"]).sum(axis=1) for b in batches])
    assert (masks > 0).all()  # every pair masked, once: the same batches each call
    again = held_out.batches(4)
    assert all((np.array(a["input_ids"]) == np.array(b["input_ids"])).all()
               for a, b in zip(batches, again))
    assert held_out.described == CorpusHeldOut.described
    assert held_out.train_masked_ids(4).size > 0


def test_a_folder_prepared_without_held_out_file_says_so_in_one_line(prepared, tmp_path):
    from nlp_tutorials.sources.shard_batches import ShardText
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining_evaluation import score_on_test

    folder = without_held_out(prepared[0], tmp_path / "old")
    text = ShardText(folder)
    assert text.held_out(settings(), None) is None
    printed = []
    assert score_on_test(None, None, TrainConfig(), None, printed.append, text.unscored) == {}
    assert printed == [f"--data {folder} has no held-out documents (prepared before `prepare` "
                       f"wrote them apart): the run is not scored; prepare the corpus again to "
                       f"score on them"]


@pytest.mark.slow
def test_a_data_run_is_scored_on_the_held_out_file_and_an_old_folder_still_trains(
        corpus, prepared, tmp_path):
    from nlp_tutorials.sources.shard_batches import ShardHeldOut
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining import pretrain

    path, _ = corpus
    folder, _ = prepared
    tiny = dict(dim=32, layers=1, heads=2, batch_size=4, steps=2, checkpoint_every=2,
                sample_every=100, log_every=1)
    printed = []
    run = pretrain(TrainConfig(model_dir=str(tmp_path / "run"), data=str(folder), **tiny),
                   printer=printed.append)
    held_out = ShardHeldOut(folder, run.tokenizer, settings(seed=run.config.seed))
    batches = held_out.batches(4)
    assert documents_in([{k: np.array(v) for k, v in b.items()} for b in batches],
                        run.tokenizer) == held_out_by_hand(path)
    assert (f"scored on the corpus' held-out documents (one in 10, chosen by a checksum of "
            f"their text): {len(batches)} batches of 4") in printed
    step = run.model.compiled_step(batches[0], training=False)
    accuracy = np.mean([float(step(batch)["mlm_accuracy"]) for batch in batches])
    assert run.evaluation["mlm_accuracy"] == pytest.approx(accuracy, abs=1e-6)

    old = without_held_out(folder, tmp_path / "old")
    printed.clear()
    run = pretrain(TrainConfig(model_dir=str(tmp_path / "old-run"), data=str(old), **tiny),
                   printer=printed.append)
    assert run.evaluation == {}
    assert [line for line in printed if "held-out" in line] == [
        f"--data {old} has no held-out documents (prepared before `prepare` wrote them apart): "
        f"the run is not scored; prepare the corpus again to score on them"]
