"""CoNLL-2003 through its Task: files read as written (IOB1 and IOB2, bad lines refused), words
encoded as BERT's reference does (a tag on each word's first piece, long sentences in windows),
windows merged back per word, predict's and evaluate's text, and a tiny real BERT tagging."""
import json
from pathlib import Path

import numpy as np
import pytest

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.conll import ConllTask, Sentence, read_conll
from nlp_tutorials.tasks.entities import to_iob2
from nlp_tutorials.text.tokenization import SPECIAL_TOKENS, WordPieceTokenizer, WordTokenizer

FIXTURES = Path(__file__).parents[1] / "fixtures"
CONLL = FIXTURES / "conll"
REAL = Path(__file__).resolve().parents[3] / "shared" / "data" / "conll2003"

# A WordPiece vocabulary where "Lovelace" is two pieces and "Analytical" three.
PIECES = ("ada", "love", "##lace", "wrote", "notes", "in", "london", ".", "analytic", "##al",
          "##s", "engine")


def wordpiece():
    return WordPieceTokenizer(SPECIAL_TOKENS + PIECES)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- reading -------------------------------------------------------------------------------------

def test_reads_conll_2003_files_says_what_they_hold_and_learns_iob2_tags():
    said = []
    task = ConllTask(data_dir=CONLL, printer=said.append)
    train = task.examples("train")
    assert said == ["eng.train: 3 sentences, 7 entities (LOC 4, MISC 1, ORG 1, PER 1)"]
    assert task.labels == ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER",
                           "I-PER")
    assert train[0] == Sentence(("Ada", "Lovelace", "wrote", "notes", "in", "London", "."),
                                ("B-PER", "I-PER", "O", "O", "O", "B-LOC", "O"), 3)
    # IOB1's "Paris I-LOC Berlin B-LOC" is two places, each opened by B- in IOB2.
    assert train[2].line == 21
    assert train[2].tags[:4] == ("O", "B-LOC", "B-LOC", "O")
    assert train[2].tags[11:13] == ("B-ORG", "I-ORG")
    assert [len(s.words) for s in train] == [7, 7, 15]
    assert len(task.examples("dev")) == 1 and len(task.examples("test")) == 2
    assert said[1:] == ["eng.testa: 1 sentence, 2 entities (ORG 1, PER 1)",
                        "eng.testb: 2 sentences, 3 entities (LOC 2, PER 1)"]


def test_iob2_files_under_other_copies_names_read_as_the_iob1_originals(tmp_path):
    write(tmp_path / "train.txt", (CONLL / "eng.train").read_text())
    write(tmp_path / "test.txt", "-DOCSTART- -X- -X- O\n\nTuring NNP I-NP B-PER\n"
          "lived VBD I-VP O\nin IN I-PP O\nManchester NNP I-NP B-LOC\n. . O O\n\n"
          "Bletchley NNP I-NP B-LOC\nPark NNP I-NP I-LOC\nreopened VBD I-VP O\n. . O O\n")
    task = ConllTask(data_dir=tmp_path)
    assert task.path("test") == tmp_path / "test.txt" and task.path("dev") is None
    assert task.examples("test") == ConllTask(data_dir=CONLL).examples("test")


def test_a_line_with_the_wrong_number_of_columns_is_one_line_naming_it(tmp_path):
    path = write(tmp_path / "eng.train", "Ada NNP I-NP I-PER\n\nwrote VBD O\n")
    with pytest.raises(UserError) as info:
        read_conll(path)
    assert str(info.value) == (f"{path}:3: expected 4 space-separated columns (word, POS tag, "
                               f"chunk tag, entity tag), found 3")


def test_a_tag_that_is_no_entity_tag_is_refused(tmp_path):
    path = write(tmp_path / "eng.train", "Ada NNP I-NP I-PER\nLovelace NNP I-NP PER\n")
    with pytest.raises(UserError, match=rf"^{path}:2: tag 'PER' in the last column is not an "
                                        r"entity tag; expected O, B-TYPE or I-TYPE$"):
        read_conll(path)


def test_a_dev_tag_that_training_never_saw_names_its_line_and_the_known_tags(tmp_path):
    write(tmp_path / "eng.train", "Ada NNP I-NP I-PER\n. . O O\n")
    write(tmp_path / "eng.testa", "Grace NNP I-NP I-PER\n\nin IN I-PP O\nTurin NNP I-NP I-LOC\n")
    task = ConllTask(data_dir=tmp_path)
    with pytest.raises(UserError) as info:
        task.examples("dev")
    assert str(info.value) == (f"{tmp_path / 'eng.testa'}:4: tag 'I-LOC' never occurs in the "
                               f"training file; expected one of O, B-PER, I-PER")


def test_bytes_that_are_not_utf8_name_their_line(tmp_path):
    path = tmp_path / "eng.train"
    path.write_bytes(b"Ada NNP I-NP I-PER\nZ\xfcrich NNP I-NP I-LOC\n")
    with pytest.raises(UserError, match=rf"^{path}:2: not valid UTF-8 \(byte 0xfc at column 2\)"):
        read_conll(path)


def test_a_user_s_own_files_need_two_or_more_columns_the_same_on_every_line(tmp_path):
    own = write(tmp_path / "train.txt", "Ada\tB-PER\nLovelace  I-PER\r\n\nin O\nTurin B-CITY\n")
    task = ConllTask(paths={"train": own}, columns=None)
    assert [s.tags for s in task.examples("train")] == [("B-PER", "I-PER"), ("O", "B-CITY")]
    assert task.labels == ("O", "B-CITY", "I-CITY", "B-PER", "I-PER")
    assert task.summarize(task.examples("train")) == "2 sentences, 2 entities (CITY 1, PER 1)"
    assert task.summarize(task.examples("train")[1:]) == "1 sentence, 1 entity (CITY 1)"
    three = write(tmp_path / "three.txt", "Ada NNP B-PER\nwrote O\n")
    with pytest.raises(UserError, match=rf"^{three}:2: expected 3 space-separated columns as on "
                                        r"the file's first word line \(the word first, its "
                                        r"tag last\), found 2$"):
        read_conll(three, columns=None)
    one = write(tmp_path / "one.txt", "\nAda\n")
    with pytest.raises(UserError, match=rf"^{one}:2: expected at least 2 space-separated "
                                        r"columns \(the word first, its tag last\), found 1$"):
        read_conll(one, columns=None)


def test_settings_rebuild_the_task_through_json():
    task = ConllTask(data_dir=CONLL, columns=None, max_len=64, stride=20)
    task.examples("train")
    saved = json.loads(json.dumps(task.settings()))
    rebuilt = ConllTask(**saved)
    assert (rebuilt.labels, rebuilt.columns, rebuilt.max_len, rebuilt.stride) == (
        task.labels, None, 64, 20)


@pytest.mark.parametrize("name, summary", [
    pytest.param("eng.train", "14,041 sentences, 23,499 entities (LOC 7,140, MISC 3,438, "
                              "ORG 6,321, PER 6,600)", marks=pytest.mark.slow),
    ("eng.testa", "3,250 sentences, 5,942 entities"),
    ("eng.testb", "3,453 sentences, 5,648 entities")])
def test_the_real_files_hold_what_their_source_notes_count(name, summary):
    if not (REAL / name).is_file():
        pytest.skip(f"{REAL / name} not here (CoNLL-2003 is licensed and not shipped)")
    task = ConllTask()
    assert task.summarize(read_conll(REAL / name)).startswith(summary)


# --- encoding -------------------------------------------------------------------------------------

def test_each_word_s_tag_sits_on_its_first_piece_only():
    task = ConllTask(labels=("O", "B-LOC", "I-LOC", "B-PER", "I-PER"))
    tokenizer = wordpiece()
    sentence = Sentence(("Ada", "Lovelace", "wrote", "\x07", "Analyticals"),
                        ("B-PER", "I-PER", "O", "O", "B-LOC"), 1)
    arrays = task.encode(tokenizer, [sentence], 12)
    ids = tokenizer.convert_tokens_to_ids(
        ["[CLS]", "ada", "love", "##lace", "wrote", "[UNK]", "analytic", "##al", "##s", "[SEP]",
         "[PAD]", "[PAD]"])
    assert arrays["input_ids"].tolist() == [ids]
    assert arrays["token_type_ids"].tolist() == [[0] * 12]
    assert arrays["tag_ids"].tolist() == [[0, 3, 4, 0, 0, 0, 1, 0, 0, 0, 0, 0]]
    assert arrays["tag_weights"].tolist() == [[0, 1, 1, 0, 1, 1, 1, 0, 0, 0, 0, 0]]
    assert arrays["word_index"].tolist() == [[-1, 0, 1, -1, 2, 3, 4, -1, -1, -1, -1, -1]]
    assert arrays["window_example"].tolist() == [0]
    assert {name: array.dtype for name, array in arrays.items()} == {
        "input_ids": np.int32, "token_type_ids": np.int32, "tag_ids": np.int32,
        "tag_weights": np.float32, "word_index": np.int32, "word_context": np.int32,
        "window_example": np.int32}
    assert task.longest(tokenizer, [sentence]) == 10
    assert task.texts([sentence]) == ["Ada Lovelace wrote \x07 Analyticals"]


def brute_force_windows(pieces: int, width: int, step: int) -> list[int]:
    """Window starts: every ``step`` pieces from 0 while the window before ends short."""
    return [start for start in range(0, max(pieces, 1), step)
            if start == 0 or start - step + width < pieces]


def context(position: int, start: int, width: int, pieces: int) -> float:
    """Pieces a piece sees before and after it in a window, the fewer of the two; a side the
    window does not cut sees the whole sentence (the task counts pieces in the window only,
    which must choose the same windows)."""
    stop = min(start + width, pieces)
    before = position - start if start > 0 else np.inf
    after = stop - 1 - position if stop < pieces else np.inf
    return min(before, after)


@pytest.mark.parametrize("max_len, stride", [(6, 128), (9, 2), (40, 128)])
def test_long_sentences_are_windows_and_each_word_takes_the_tag_of_its_best_window(max_len,
                                                                                   stride):
    labels = ("O", "B-A", "I-A", "B-B", "I-B")
    task = ConllTask(labels=labels, stride=stride)
    tokenizer = wordpiece()
    words = ("Ada", "Lovelace", "wrote", "Analyticals", "notes", "in", "London", ".") * 2
    short = Sentence(("Ada",), ("O",), 1)
    examples = [short, Sentence(words, ("O",) * len(words), 2), short]
    arrays = task.encode(tokenizer, examples, max_len)
    # The long sentence, piece by piece, and where each word starts.
    piece_ids, word_starts = [], []
    for word in words:
        word_starts.append(len(piece_ids))
        piece_ids += tokenizer.convert_tokens_to_ids(tokenizer.tokenize(word))
    width, step = max_len - 2, max(1, min(stride, (max_len - 2) // 2))
    starts = brute_force_windows(len(piece_ids), width, step)
    assert arrays["window_example"].tolist() == [0] + [1] * len(starts) + [2]
    for row, start in enumerate(starts, start=1):
        window = piece_ids[start:start + width]
        assert arrays["input_ids"][row, :len(window) + 2].tolist() == [
            tokenizer.cls_id, *window, tokenizer.sep_id]
        assert (arrays["input_ids"][row, len(window) + 2:] == tokenizer.pad_id).all()
    # Each window votes its own tag (row r: label r % 5) for every piece.
    rows = len(arrays["input_ids"])
    logits = np.full((rows, max_len, len(labels)), -1.0, np.float32)
    logits[np.arange(rows), :, np.arange(rows) % len(labels)] = 1.0
    predicted = task.predictions(logits, arrays, examples)
    best_rows = []
    for position in word_starts:
        holding = [row for row, start in enumerate(starts, start=1)
                   if start <= position < start + width]
        best_rows.append(max(holding, key=lambda row: (
            context(position, starts[row - 1], width, len(piece_ids)), -row)))
    assert predicted[1] == to_iob2([labels[row % len(labels)] for row in best_rows])
    assert predicted[0] == ["O"] and predicted[2] == to_iob2([labels[(rows - 1) % len(labels)]])


def test_predicted_tags_are_iob2_naming_the_entities_the_arg_max_names():
    labels = ("O", "B-PER", "I-PER", "B-LOC", "I-LOC")
    task = ConllTask(labels=labels)
    tokenizer = WordTokenizer.build(["a b c d e"])
    sentence = Sentence(tuple("abcde"), (), 1)
    arrays = task.encode(tokenizer, [sentence], 10)
    wanted = ["I-PER", "I-PER", "O", "I-LOC", "I-PER"]  # arg-max: stray I- tags
    logits = np.full((1, 10, len(labels)), -1e9, np.float32)
    for word, tag in enumerate(wanted):
        logits[0, word + 1, labels.index(tag)] = 0.0
    assert task.predictions(logits, arrays, [sentence]) == [
        ["B-PER", "I-PER", "O", "B-LOC", "B-PER"]]


# --- predict and evaluate's text ------------------------------------------------------------------

def test_predict_reads_a_sentence_a_line_and_writes_a_word_and_tag_a_line():
    task = ConllTask(labels=("O", "B-PER", "I-PER"))
    read = task.parse_lines(["Ada  Lovelace wrote\n", "\n", "\tHi .\r\n"], "stdin")
    first, second = list(read)
    assert first == Sentence(("Ada", "Lovelace", "wrote"), (), 1)
    assert second.words == ("Hi", ".") and second.line == 3
    assert task.format_prediction(first, ["B-PER", "I-PER", "O"]) == (
        "Ada\tB-PER\nLovelace\tI-PER\nwrote\tO\n")
    with pytest.raises(UserError, match=r"^sentences.txt: no sentences found \(only blank "
                                        r"lines\); expected one sentence a line"):
        list(task.parse_lines(["\n", "  \n"], "sentences.txt"))


def test_evaluate_writes_conlleval_s_input_and_scores_entities():
    task = ConllTask(data_dir=CONLL)
    test = task.examples("test")
    predicted = [["B-PER", "O", "O", "B-LOC", "O"], ["B-LOC", "O", "O", "O"]]
    suffix, text = task.prediction_file(test, predicted)
    assert suffix == ".txt"
    assert text == ("Turing B-PER B-PER\nlived O O\nin O O\nManchester B-LOC B-LOC\n. O O\n\n"
                    "Bletchley B-LOC B-LOC\nPark I-LOC O\nreopened O O\n. O O\n\n")
    scores = task.score(test, predicted)
    assert (scores["precision"], scores["recall"]) == (pytest.approx(2 / 3), pytest.approx(2 / 3))
    assert scores["f1_PER"] == 1.0 and scores["recall_LOC"] == 0.5
    assert task.describe(scores) == "F1 66.7 precision 66.7 recall 66.7"


# --- a real model ---------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_tiny_bert_tags_windows_back_into_words_and_learns():
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.text.tokenization import load_tokenizer

    keras.utils.set_random_seed(0)
    task = ConllTask(labels=("O", "B-PER", "I-PER", "B-LOC", "I-LOC"))
    tokenizer = load_tokenizer(FIXTURES / "bert_tiny_hf")  # words w5 ... w99
    head = task.build_head(BERT.from_pretrained(FIXTURES / "bert_tiny_hf",
                                                printer=lambda line: None))
    long_words = tuple(f"w{5 + i % 90}" for i in range(40)) + ("w7-w8",)  # "-": 3 pieces
    examples = [Sentence(("w5", "w6", "w7"), ("B-PER", "I-PER", "O"), 1),
                Sentence(long_words, tuple(["O", "B-LOC", "I-LOC"] * 13 + ["O", "B-PER"]), 5),
                Sentence(("w9-w10", "w11"), ("B-LOC", "O"), 50)]
    arrays = task.encode(tokenizer, examples, 16)
    assert arrays["window_example"].tolist().count(1) > 1  # the long sentence is in windows
    logits = np.asarray(head(task.shape.for_model(arrays)))
    assert logits.shape == (len(arrays["input_ids"]), 16, 5)
    predicted = task.predictions(logits, arrays, examples)
    assert [len(tags) for tags in predicted] == [3, 41, 2]
    assert all(tag in task.labels for tags in predicted for tag in tags)
    head.compile(optimizer=keras.optimizers.Adam(1e-2))
    batch = task.shape.for_model(arrays)
    before = float(head.step(batch, training=False)["loss"])
    for _ in range(3):
        head.step(batch)
    assert float(head.step(batch, training=False)["loss"]) < before
