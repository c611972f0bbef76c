"""export-model for SQuAD models: the graph's pieces, windows and answers against the package's
numpy path (squad.context_pieces, SquadTask.encode, ``bert predict``).

The model is a tiny fresh BERT whose span layer is drawn wide (logits of standard deviation 3
on the test's windows), so answers land on different pieces for different questions and a
wrong offset, window or max-context flag shows. Its 40 positions and a stride of 6 pieces cut
the long context into many overlapping windows.
"""
import numpy as np
import pytest

from fresh_process import load_elsewhere
from nlp_tutorials.tasks.squad import Squad2Task, SquadTask, context_pieces
from nlp_tutorials.tasks.squad_files import Question
from nlp_tutorials.text.tokenization import WordPieceTokenizer

tf = pytest.importorskip("tensorflow")
pytest.importorskip("tensorflow_text", reason="export-model needs tensorflow-text: "
                                              "pip install tensorflow-text")

MAX_POSITIONS = 40
STRIDE = 6
LONG = ("The river Thames flows through London, past the Houses of Parliament and the Tower. "
        "In 1894 Tower Bridge opened; it cost $1,184,000.50 to build. The Café Royal, on "
        "Regent Street, served Oscar Wilde and his friends. Boats sail east to the sea every "
        "morning, and the fog lifts by noon; by night the lamps of the embankment shine.")
# Characters whose normalised form is shorter than they are, first: every offset after them
# is wrong unless it is mapped back to the original characters. Mu\u0308nchen has a combining
# diaeresis (7 characters, "munchen"), İ lower-cases to i + a dot that is then stripped,
# U+00AD and U+200B vanish, U+00A0 is no space to run_squad but one to the tokenizer.
ACCENTED = ("Mu\u0308nchen İZMİR soft\u00adhyphen zero\u200bwidth 10\u00a0km: ÉCOLE bread, "
            "Ångström rulers and NAÏVE résumés were sold there.")
PUNCTUATED = "It cost $1,184,000.50 (about £300,000) in 1894 -- or so [they] said!"
SHORT = "The fog lifts by noon."
QUESTIONS = [("Who served Oscar Wilde?", LONG), ("When did Tower Bridge open?", LONG),
             ("What did the bridge cost?", PUNCTUATED), ("Where is ÉCOLE bread sold?", ACCENTED),
             ("When does the fog lift?", SHORT), ("What shines by night?", LONG),
             ("What was sold at 10 km?", ACCENTED),
             (" ".join(["Who served Oscar Wilde on Regent Street?"] * 4), LONG),  # cut to 18
             ("What is nothing?", "\u200b")]
# Awkward contexts for the offsets alone: tabs and line breaks between words, CJK, ligatures,
# a word of 101 characters ([UNK]), a snowman (no piece: each piece of its word spans the
# whole word), specials typed.
AWKWARD = [LONG, ACCENTED, PUNCTUATED, "tab\tword new\nline x\u202fy\r\nz", "東京 and ﬁne ½",
           "a" * 101 + " b", "[UNK] ## ##ing [CLS]", " leading and trailing ", "e\u0301 \u0301x",
           "ΣΟΦΙΑ straße Ǆemal", "a,\u2603b", "\u200b", "x"]


def tiny_span_model(task, lower_case: bool = True):
    """(head, tokenizer) of ``task`` on a tiny fresh BERT, its WordPiece vocabulary learnt from
    the test's texts, the span layer rescaled so the logits on the questions' windows have mean
    0 and standard deviation 3 per output (start, end)."""
    import keras

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.config import ModelConfig
    from nlp_tutorials.finetuned.inference import head_outputs

    texts = [text for pair in QUESTIONS for text in pair]
    tokenizer = WordPieceTokenizer.train(texts, vocab_size=150, lower_case=lower_case)
    keras.utils.set_random_seed(0)
    backbone = BERT(ModelConfig(vocab_size=tokenizer.vocab_size, hidden_size=16,
                                num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=32, max_position_embeddings=MAX_POSITIONS,
                                pad_token_id=tokenizer.pad_id, hidden_dropout_prob=0.0,
                                attention_probs_dropout_prob=0.0))
    head = task.build_head(backbone)
    arrays = task.encode(tokenizer, questions(), min(task.max_len, MAX_POSITIONS))
    outputs = head_outputs(head, arrays)
    logits = np.stack([outputs["start_logits"], outputs["end_logits"]], axis=-1)
    logits = logits[arrays["input_ids"] != tokenizer.pad_id]  # [real tokens, 2]
    scale = 3.0 / logits.std(axis=0)
    head.span.kernel.assign(head.span.kernel.numpy() * scale)
    head.span.bias.assign(-scale * (logits.mean(axis=0) - head.span.bias.numpy()))
    return head, tokenizer


def questions(pairs=QUESTIONS):
    return [Question(str(i), q, c) for i, (q, c) in enumerate(pairs)]


def span_module(task, lower_case=True):
    from nlp_tutorials.serving.spans import SpanModule

    head, tokenizer = tiny_span_model(task, lower_case)
    return SpanModule(head, tokenizer, task), head, tokenizer


@pytest.mark.parametrize("lower_case", [True, pytest.param(False, marks=pytest.mark.slow)])
def test_the_graph_pieces_and_their_characters_are_context_pieces(lower_case):
    module, _, tokenizer = span_module(SquadTask(max_len=MAX_POSITIONS, stride=STRIDE),
                                       lower_case)
    got = module.context_pieces(tf.constant(AWKWARD))
    for row, context in enumerate(AWKWARD):
        want = context_pieces(tokenizer, context)
        assert got.ids[row].numpy().tolist() == tokenizer.convert_tokens_to_ids(want.pieces)
        assert got.starts[row].numpy().tolist() == want.piece_start, context
        assert got.ends[row].numpy().tolist() == want.piece_end, context
    # The contexts hold what the mapping is for: words whose normalised form is shorter, and a
    # word whose pieces do not spell it, where each piece spans the whole word.
    assert sum(map(len, tokenizer.basic_tokenize(ACCENTED))) < len(ACCENTED.replace(" ", ""))
    snowman = context_pieces(tokenizer, "a,\u2603b")
    assert snowman.pieces == ["a", ",", "[UNK]"]
    assert set(zip(snowman.piece_start, snowman.piece_end)) == {(0, 4)}


@pytest.mark.slow
def test_the_graph_windows_are_the_tasks_windows():
    """Every array decoding reads, window by window, for questions of different lengths
    (one cut to the question room) over contexts of 1 to many windows."""
    from nlp_tutorials.serving.spans import lay_out_windows

    task = SquadTask(max_len=MAX_POSITIONS, stride=STRIDE)
    module, _, tokenizer = span_module(task)
    pairs = QUESTIONS + [("", SHORT)]
    want = task.encode(tokenizer, questions(pairs), task.max_len)
    assert np.bincount(want["window_example"]).max() >= 10  # many overlapping windows
    question_ids = module.tokenizer.ids(tf.constant([q for q, _ in pairs]))
    windows = lay_out_windows(question_ids[:, :module.question_room],
                              module.context_pieces(tf.constant([c for _, c in pairs])),
                              task.max_len, task.stride, **module.special_ids)
    assert windows.example.numpy().tolist() == want["window_example"].tolist()
    # The longest window fills the positions, so the graph's rows are as long as the task's.
    assert windows.input_ids.shape[1] == task.max_len
    for got, name in ((windows.input_ids, "input_ids"),
                      (windows.token_type_ids, "token_type_ids"),
                      (windows.char_start, "token_char_start"),
                      (windows.char_end, "token_char_end"),
                      (windows.max_context, "token_max_context")):
        np.testing.assert_array_equal(got.numpy(), want[name], err_msg=name)


@pytest.mark.parametrize("task_class", [SquadTask,
                                        pytest.param(Squad2Task, marks=pytest.mark.slow)])
def test_the_graph_answers_are_the_tasks_decoding(task_class):
    """In this process, the module against SquadTask.predictions of the same head: text,
    characters and scores of every question (v2.0 at a threshold that leaves some
    unanswered)."""
    task = task_class(max_len=MAX_POSITIONS, stride=STRIDE)
    module, head, tokenizer = span_module(task)
    if task_class is Squad2Task:
        task = task.replace(null_threshold=halfway_threshold(task, head, tokenizer))
        module.null_threshold = task.null_threshold
    want = task.predictions(*decoded(head, tokenizer, task))
    got = module.serving_default(tf.constant([q for q, _ in QUESTIONS]),
                                 tf.constant([c for _, c in QUESTIONS]))
    assert [(text.decode(), int(start), int(end)) for text, start, end in zip(
        got["answer"].numpy(), got["start"].numpy(), got["end"].numpy())] == [
        (p.text, p.start, p.end) for p in want]
    np.testing.assert_allclose(got["score"], [p.score for p in want], atol=1e-4)
    assert len({p.best_text for p in want}) >= 5  # the spans differ between questions
    if task_class is Squad2Task:
        assert 2 <= sum(got["answered"].numpy()) <= len(QUESTIONS) - 2
        np.testing.assert_allclose(got["null_score"], [p.null_score for p in want], atol=1e-5)


@pytest.mark.slow
def test_an_empty_batch_answers_empty_outputs():
    module, _, _ = span_module(Squad2Task(max_len=MAX_POSITIONS, stride=STRIDE))
    got = module.serving_default(tf.constant([], tf.string), tf.constant([], tf.string))
    assert {name: value.shape.as_list() for name, value in got.items()} == {
        name: [0] for name in ("answer", "start", "end", "score", "null_score", "answered")}


def exported(task, tmp_path):
    """(model folder, SavedModel folder) of a tiny model of ``task``, saved as ``finetune``
    saves it and exported by export-model."""
    from fake_tasks import save_model
    from nlp_tutorials.serving.savedmodel import export_model

    head, tokenizer = tiny_span_model(task)
    model_dir = save_model(head, tokenizer, task, tmp_path / "model")
    printed = []
    version = export_model(model_dir, tmp_path / "served", printer=printed.append)
    assert printed[-1].endswith("(signatures: predict_ids, serving_default)")
    return model_dir, version


def predicted(model_dir):
    """``bert predict``'s lines on QUESTIONS, with the task's own numpy decoding of them."""
    from nlp_tutorials.finetuned.folders import load_finetuned
    from nlp_tutorials.finetuned.inference import head_outputs
    from nlp_tutorials.finetuned.predicting import predict

    head, tokenizer, task = load_finetuned(model_dir)
    lines = [f"{q}\t{c}" for q, c in QUESTIONS]
    printed = []
    assert predict(head, tokenizer, task, lines, "questions.tsv", printer=printed.append) \
        == len(QUESTIONS)
    examples = list(task.parse_lines(lines, "questions.tsv"))
    arrays = task.encode(tokenizer, examples, task.max_len)
    outputs = head_outputs(head, arrays)
    return printed, task.predictions(outputs, arrays, examples), arrays, outputs


def served_lines(answer):
    """The served answers as ``predict`` prints them (SquadTask.format_prediction)."""
    return [f"{' '.join(text.replace(chr(9), ' ').splitlines())}\t{start}\t{end}"
            for text, start, end in zip(answer["answer"], answer["start"], answer["end"])]


def request():
    return {"question": [q for q, _ in QUESTIONS], "context": [c for _, c in QUESTIONS]}


@pytest.mark.slow
def test_squad_answers_what_predict_answers(tmp_path):
    model_dir, version = exported(SquadTask(stride=STRIDE), tmp_path)
    printed, predictions, arrays, outputs = predicted(model_dir)
    ids = {"input_ids": arrays["input_ids"].tolist(),
           "token_type_ids": arrays["token_type_ids"].tolist(),
           "attention_mask": (arrays["input_ids"] != 0).astype(int).tolist()}  # [PAD] is 0
    answer = load_elsewhere(version, {"serving_default": request(), "predict_ids": ids})
    got = answer["serving_default"]
    assert served_lines(got) == printed
    assert got["answer"] == [c[s:e] if s >= 0 else "" for (_, c), s, e
                             in zip(QUESTIONS, got["start"], got["end"])]
    scores = np.array([p.score for p in predictions])
    np.testing.assert_allclose(got["score"], scores, atol=1e-4)
    for name in ("start_logits", "end_logits"):
        np.testing.assert_allclose(answer["predict_ids"][name], outputs[name], atol=1e-5)
    # The answers could show a wrong layout or offset: they differ, one lies beyond the long
    # context's first window, one after ACCENTED's shortened words, one holds an accent.
    assert len(set(got["answer"])) >= 6 and got["answer"][-1] == "" and got["start"][-1] == -1
    starts = {context: [s for (_, c), s in zip(QUESTIONS, got["start"]) if c == context]
              for context in (LONG, ACCENTED)}
    assert max(starts[LONG]) > arrays["token_char_end"][0].max()  # the first window's end
    assert max(starts[ACCENTED]) > ACCENTED.index("km")
    assert any(not text.isascii() for text in got["answer"])


@pytest.mark.slow
def test_squad2_answers_none_where_the_null_score_wins(tmp_path):
    """v2.0 with the threshold halfway through the questions' null-minus-best margins: some
    are answered, some get "" and -1, as predict decides."""
    task = Squad2Task(stride=STRIDE)
    task = task.replace(null_threshold=halfway_threshold(task, *tiny_span_model(task)))
    model_dir, version = exported(task, tmp_path)
    printed, predictions, _, _ = predicted(model_dir)
    got = load_elsewhere(version, {"serving_default": request()})["serving_default"]
    assert served_lines(got) == printed
    assert got["answered"] == [bool(p.text) for p in predictions]
    assert 2 <= sum(got["answered"]) <= len(QUESTIONS) - 2
    assert all(s == e == -1 and text == "" for text, s, e, answered
               in zip(got["answer"], got["start"], got["end"], got["answered"]) if not answered)
    np.testing.assert_allclose(got["null_score"], [p.null_score for p in predictions],
                               atol=1e-4)


def halfway_threshold(task, head, tokenizer) -> float:
    """A v2.0 threshold halfway through the questions' null-minus-best margins: about half
    are answered."""
    margins = sorted(p.null_score - p.score for p in task.predictions(
        *decoded(head, tokenizer, task)) if p.score > -np.inf)
    return (margins[len(margins) // 2 - 1] + margins[len(margins) // 2]) / 2


def decoded(head, tokenizer, task):
    """(outputs, arrays, examples) of QUESTIONS, for ``task.predictions``."""
    from nlp_tutorials.finetuned.inference import head_outputs

    examples = questions()
    arrays = task.encode(tokenizer, examples, min(task.max_len, MAX_POSITIONS))
    return head_outputs(head, arrays), arrays, examples
