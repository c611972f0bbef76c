"""A new kind of pre-training text is one class: a subclass of PretrainingText, handed to
pretrain, trains a model and leaves a folder later commands read."""
import dataclasses

import pytest

from nlp_tutorials.sources.mrpc import HeldOutPairs, MrpcPretrainingData
from nlp_tutorials.sources.source import PretrainingText, TextSettings, build_tokenizer
from nlp_tutorials.tasks.glue import TextExample

SENTENCES = [
    "the zebra crossed the river at dawn .",
    "a heron waited in the reeds .",
    "the river ran fast after the rain .",
    "the zebra drank where the heron stood .",
    "rain fell on the reeds all night .",
    "at dawn the herd moved to the hills .",
    "the hills were green after the rain .",
    "a zebra foal followed the herd .",
    "the heron flew over the hills .",
    "night came and the river was quiet .",
]


class SentencesText(PretrainingText):
    """A few sentences held in memory, each paired with the one after it; the last four pairs
    held out, to score the run on."""

    def __init__(self, sentences):
        pairs = [TextExample(first, second, "0") for first, second in zip(sentences, sentences[1:])]
        self.pairs, self.held_out_pairs = pairs[:-4], pairs[-4:]

    def new_tokenizer(self, settings: TextSettings):
        tokenizer = build_tokenizer(settings.tokenizer, settings.vocab_size,
                                    [s for p in self.pairs for s in (p.text, p.pair)])
        return tokenizer, dataclasses.replace(
            settings, max_len=settings.max_len or self.default_max_len(tokenizer))

    def default_max_len(self, tokenizer) -> int:
        return 24

    def source(self, settings: TextSettings, tokenizer, worker, printer):
        return MrpcPretrainingData(tokenizer, self.pairs, max_len=settings.max_len,
                                   seed=settings.seed)

    def held_out(self, settings: TextSettings, tokenizer):
        return HeldOutPairs(tokenizer, settings, self.pairs, self.held_out_pairs,
                            "the last four pairs")


@pytest.mark.slow
def test_a_text_is_one_subclass_that_pretrain_reads(tmp_path):
    from nlp_tutorials.text.tokenization import load_tokenizer
    from nlp_tutorials.training.config import TrainConfig
    from nlp_tutorials.training.pretraining import pretrain

    config = TrainConfig(model_dir=str(tmp_path / "run"), dim=32, layers=1, heads=2,
                         batch_size=4, steps=2, checkpoint_every=2, sample_every=100,
                         log_every=1)
    printed = []
    run = pretrain(config, printer=printed.append, text=SentencesText(SENTENCES))
    assert int(run.model.optimizer.iterations.numpy()) == 2
    assert run.config.max_len == 24  # the text's default length, recorded in the run
    model_dir = tmp_path / "run"
    for name in ("config.json", "train_config.json", "vocab.txt", "tokenizer_config.json",
                 "checkpoints/checkpoint"):
        assert (model_dir / name).is_file(), name
    vocab = load_tokenizer(model_dir).vocab
    assert "zebra" in vocab and "heron" in vocab  # learned from this text, not MRPC's
    assert len(vocab) < 60
    # Scored on the four pairs it held out: one batch of 4.
    assert "scored on the last four pairs: 1 batches of 4" in printed
    assert set(run.evaluation) >= {"mlm_accuracy", "nsp_accuracy"}


def test_a_text_must_give_its_tokenizer_length_and_batches():
    class NoBatches(PretrainingText):
        def new_tokenizer(self, settings):
            raise AssertionError("not reached")

        def default_max_len(self, tokenizer):
            return 8

    with pytest.raises(TypeError, match="source"):
        NoBatches()
