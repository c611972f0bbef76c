"""export-model for a token-tagging model (CoNLL-2003's encoding): the SavedModel's words and
tags against the words and tags ``predict`` prints for the same lines.

The model is a tiny fresh BERT with a WordPiece vocabulary learnt from a few sentences, so
most words are cut into several pieces. Its maximum length is set below its positions, so a
model laid out at the positions' length would answer differently; the long sentence is cut
into overlapping windows, where some words get different tags in different windows, so only
the window ``predict`` picks gives its tags.
"""
import numpy as np
import pytest

from fake_tasks import save_model, tiny_wordpiece_head
from fresh_process import load_elsewhere
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.base import Task
from nlp_tutorials.tasks.shapes import TOKEN, softmax
from nlp_tutorials.tasks.conll import ConllTask
from nlp_tutorials.finetuned.folders import load_finetuned
from nlp_tutorials.finetuned.inference import head_outputs
from nlp_tutorials.finetuned.predicting import predict

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text: "
                                              "pip install tensorflow-text")

LABELS = ("O", "B-LOC", "I-LOC", "B-PER", "I-PER")
LONG = " ".join(["the best film of the year , and a warm evening at the film"] * 3)
SENTENCES = [
    "the film was dull and long",
    "unseen storyteller , (warm) café",  # several pieces a word; punctuation inside words
    "Évening dull-long don't",  # an accent to strip, a hyphen, an apostrophe
    "zebras 世界 \x07 \u200b " + "x" * 101,  # [UNK]s: unknown, CJK, pieceless, over-long
    "a\x1cb\u3000c\u00a0d\te\x85f",  # whitespace beyond ASCII: predict splits on it too
    "x",
    LONG,
]
BLANK = ["", " \u3000\t"]  # predict passes such lines over; served, they have no words


@pytest.fixture(scope="module")
def tagger():
    """(head, tokenizer) of a tiny tagger: 24 positions, a 60-piece vocabulary."""
    return tiny_wordpiece_head(ConllTask(labels=LABELS), seed=2)


def conll_task(max_len: int, stride: int) -> ConllTask:
    return ConllTask(labels=LABELS, max_len=max_len, stride=stride)


def predicted(head, tokenizer, task, sentences):
    """(words, tags) for each sentence ``predict`` answers, read back from its printed lines
    (``word<TAB>tag`` a line)."""
    printed = []
    predict(head, tokenizer, task, [s + "\n" for s in sentences], "sentences.txt",
            printer=printed.append)
    rows = [[line.split("\t") for line in text.rstrip("\n").split("\n")] for text in printed]
    return [([w for w, _ in row], [t for _, t in row]) for row in rows]


def served(outputs) -> list:
    """(words, tags, probabilities) per sentence of serving_default's padded outputs."""
    rows = []
    for count, words, tags, probability in zip(
            *(np.asarray(outputs[k]) for k in ("word_count", "words", "tags", "probability"))):
        rows.append(([w.decode() if isinstance(w, bytes) else w for w in words[:count]],
                     [t.decode() if isinstance(t, bytes) else t for t in tags[:count]],
                     probability[:count]))
    return rows


def test_python_spaces_are_where_str_split_cuts():
    from nlp_tutorials.serving.tagging import split_on_spaces

    characters = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]  # no surrogates
    pieces = split_on_spaces(tf.constant([f"a{c}b" for c in characters])).row_lengths().numpy()
    cut = [c for c, n in zip(characters, pieces) if n == 2]
    assert cut == [c for c in characters if len(f"a{c}b".split()) == 2]
    assert len(cut) == 29 and "\x1c" in cut and "\u200b" not in cut


@pytest.mark.parametrize("max_len, stride", [(10, 3), (10, 128), (7, 1), (24, 128)])
def test_served_tags_are_predicts(tagger, max_len, stride):
    from nlp_tutorials.serving.tagging import TaggingModule

    head, tokenizer = tagger
    task = conll_task(max_len, stride)
    module = TaggingModule(head, tokenizer, task)
    got = served(module.serving_default(tf.constant(SENTENCES + BLANK)))
    want = predicted(head, tokenizer, task, SENTENCES + BLANK)
    assert [(words, tags) for words, tags, _ in got[:len(SENTENCES)]] == want
    assert [words for words, _, _ in got[len(SENTENCES):]] == [[], []]
    assert len({tag for _, tags in want for tag in tags}) >= 4  # the tags differ between words
    long = list(task.parse_lines([LONG], "long.txt"))
    assert task.longest(tokenizer, long) > max_len  # the long sentence needs windows


def test_probability_is_the_tags_softmax_on_its_first_piece(tagger):
    from nlp_tutorials.serving.tagging import TaggingModule

    head, tokenizer = tagger
    task = conll_task(24, 128)
    got = served(TaggingModule(head, tokenizer, task).serving_default(tf.constant(SENTENCES)))
    arrays = task.encode(tokenizer, list(task.parse_lines(SENTENCES, "sentences.txt")),
                         task.max_len)
    probabilities = softmax(head_outputs(head, arrays))  # [windows, max_len, labels]
    windows = np.bincount(arrays["window_example"])  # [sentences]
    assert windows.tolist().count(1) >= 4
    for sentence in np.nonzero(windows == 1)[0]:  # a word's one first piece is its tag's
        row = arrays["window_example"].tolist().index(sentence)
        first = arrays["word_index"][row] >= 0  # in word order
        np.testing.assert_allclose(got[sentence][2], probabilities[row, first].max(axis=-1),
                                   atol=1e-5)


def test_the_window_predict_picks_decides_some_tags(tagger):
    """Taking each word's tag from its first window instead would change the answer: the
    comparison above can see a wrong window choice."""
    head, tokenizer = tagger
    task = conll_task(10, 3)
    example = next(task.parse_lines([LONG], "long.txt"))
    arrays = task.encode(tokenizer, [example], task.max_len)
    tag_ids = head_outputs(head, arrays).argmax(axis=-1)  # [windows, max_len]
    first_window = {}
    for window, position in zip(*np.nonzero(arrays["word_index"] >= 0)):
        first_window.setdefault(arrays["word_index"][window, position],
                                task.labels[tag_ids[window, position]])
    naive = [first_window[word] for word in range(len(example.words))]
    _, want = predicted(head, tokenizer, task, [LONG])[0]
    assert len(arrays["input_ids"]) > 10
    assert naive != want and len(naive) == len(want)


class SlashTags(Task):
    """A second token task, no kin of ConllTask: ``word/TAG`` a word, encoded as CoNLL-2003
    is (windows half a window apart at most), which it declares."""

    name, title, shape, labels = "slash_tags", "Slash tags", TOKEN, LABELS
    tags_first_pieces = True

    def window_step(self, max_len: int) -> int:
        return max(1, min(self.stride, (max_len - 2) // 2))


def test_a_token_task_that_declares_conll_s_layout_is_served_as_conll_is(tagger):
    from nlp_tutorials.serving.tagging import TaggingModule

    head, tokenizer = tagger
    sentences = tf.constant(SENTENCES + BLANK)
    got = served(TaggingModule(head, tokenizer, SlashTags(max_len=10, stride=3))
                 .serving_default(sentences))
    want = served(TaggingModule(head, tokenizer, conll_task(10, 3)).serving_default(sentences))
    assert [(words, tags) for words, tags, _ in got] == [(w, t) for w, t, _ in want]
    assert len(got[SENTENCES.index(LONG)][0]) == len(LONG.split())  # in several windows


def test_a_token_task_that_does_not_declare_conll_s_layout_is_refused(tagger):
    from nlp_tutorials.serving.tagging import TaggingModule

    class OtherTagging(SlashTags):
        name, title, tags_first_pieces = "other_tags", "Other tags", False

    head, tokenizer = tagger
    with pytest.raises(UserError, match=r"^Other tags: a token task that does not declare "
                                        r"tags_first_pieces; export-model lays out"):
        TaggingModule(head, tokenizer, OtherTagging())


@pytest.mark.slow
def test_exported_tagger_answers_as_predict_in_a_fresh_process(tagger, tmp_path):
    from nlp_tutorials.serving.savedmodel import export_model

    head, tokenizer = tagger
    model_dir = save_model(head, tokenizer, conll_task(10, 3), tmp_path / "model")
    printed = []
    version = export_model(model_dir, tmp_path / "served", printer=printed.append)
    assert printed == [f"SavedModel written to {version} (signatures: predict_ids, "
                       f"serving_default)"]
    head, tokenizer, task = load_finetuned(model_dir)
    assert (task.max_len, task.stride) == (10, 3)
    examples = list(task.parse_lines(SENTENCES, "sentences.txt"))
    arrays = task.encode(tokenizer, examples, task.max_len)  # [windows, 10]
    ids = {"input_ids": arrays["input_ids"].tolist(),
           "token_type_ids": arrays["token_type_ids"].tolist(),
           "attention_mask": (arrays["input_ids"] != tokenizer.pad_id).astype(int).tolist()}
    answer = load_elsewhere(version, {"serving_default": {"sentence": SENTENCES + BLANK},
                                      "predict_ids": ids})
    got = served(answer["serving_default"])
    assert [(words, tags) for words, tags, _ in got] == (
        predicted(head, tokenizer, task, SENTENCES) + [([], []), ([], [])])
    pieces = np.array(ids["attention_mask"]) == 1
    want = softmax(head_outputs(head, arrays))  # [windows, 10, labels]
    assert np.array(answer["predict_ids"]["tag_id"])[pieces].tolist() == (
        want.argmax(axis=-1)[pieces].tolist())
    assert np.array(answer["predict_ids"]["tag"])[pieces].tolist() == (
        [LABELS[i] for i in want.argmax(axis=-1)[pieces]])
    np.testing.assert_allclose(np.array(answer["predict_ids"]["probability"])[pieces],
                               want.max(axis=-1)[pieces], atol=1e-5)
