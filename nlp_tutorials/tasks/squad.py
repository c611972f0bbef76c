"""SQuAD (Rajpurkar et al., 2016 and 2018): find the answer to a question in a paragraph.

The answer is a span of the paragraph (its "context"), so the model marks where it starts and
where it ends (the span shape, :class:`~nlp_tutorials.models.task_heads.SpanExtractor`). v1.1
answers every question; v2.0 adds questions the paragraph cannot answer, where the right
answer is none at all.

Encoding and decoding follow BERT's reference code (google-research/bert ``run_squad.py``):

1. The context is split on whitespace into words, and each word into word pieces; every piece
   remembers its word and the characters of the context it came from (:class:`ContextPieces`).
2. A gold answer, given by its characters (``answer_start`` and its text), becomes a word span,
   then the piece span of those words, tightened to the smallest piece span that spells the
   tokenized answer ("1,520" inside "$1,520.15").
3. ``[CLS] question [SEP] window [SEP]``: the question keeps at most 64 pieces, the context is
   cut into windows of the pieces left, each ``stride`` pieces after the one before. A window
   that does not hold the whole answer (and every window of an unanswerable question) targets
   ``[CLS]``, position 0.
4. Decoding takes, in each window, the 20 best start and the 20 best end positions, keeps the
   pairs inside the context with start <= end, at most 30 pieces long and starting at a piece
   whose window is its "max context" one (the window where it has the most pieces on its
   shorter side), and picks the best sum of start and end logits over every window of the
   question. The answer is the context's own characters from the first piece's first
   character to the last piece's last one. The null score is the ``[CLS]`` start and end
   logits' sum, the lowest over the windows; v2.0 answers "" when it beats the best span by
   more than ``null_threshold``.
"""
import json
import unicodedata
from typing import NamedTuple

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.answers import squad2_scores, squad_scores
from nlp_tutorials.tasks.base import Task, counted, example_lines
from nlp_tutorials.tasks.shapes import SPAN
from nlp_tutorials.tasks.squad_files import Answer, Question, read_squad_file
from nlp_tutorials.tasks.windows import window_starts

MAX_QUESTION_PIECES = 64  # BERT's max_query_length
N_BEST = 20  # starts and ends tried per window (BERT's n_best_size)
MAX_ANSWER_PIECES = 30  # BERT's max_answer_length
# What run_squad.py splits contexts on: not every Unicode space (a no-break space stays inside
# its word), so the words are the reference's.
CONTEXT_WHITESPACE = frozenset(" \t\r\n\u202f")
CONTINUATION = "##"


class SpanPrediction(NamedTuple):
    """The answer to one question.

    ``text`` is ``context[start:end]`` (character offsets, end exclusive); no answer (v2.0, or
    no allowed span at all) is ``""`` with ``start = end = -1``. ``score`` is the best span's
    start + end logit (``-inf`` when no span was allowed), ``null_score`` the ``[CLS]`` one
    (the lowest over windows), ``best_text`` the best span's text even where ``text`` is "".
    """
    text: str
    start: int
    end: int
    score: float
    null_score: float
    best_text: str


# Encoding.

class ContextPieces(NamedTuple):
    """A context cut into whitespace words and each word into pieces.

    ``char_to_word`` [chars]: each character's word (a space: the word before it, -1 before
    the first). Per piece: ``pieces`` (the token), ``piece_word``, and ``piece_start``,
    ``piece_end`` (its characters in the context, end exclusive). ``word_first_piece``
    [words + 1]: each word's first piece, then the number of pieces.
    """
    words: list
    char_to_word: list
    pieces: list
    piece_word: list
    piece_start: list
    piece_end: list
    word_first_piece: list


def _normalized_chars(word: str, lower_case: bool) -> tuple[str, list[int]]:
    """``word`` as a tokenizer sees it, one character at a time (lower case and no accents
    when it lower-cases; spaces and control characters dropped), and for each character of
    the result, its index in ``word``."""
    if word.isascii() and word.isprintable():  # the common case, one character for one
        return (word.lower() if lower_case else word), list(range(len(word)))
    text, origin = [], []
    for index, char in enumerate(word):
        if char.isspace() or unicodedata.category(char) in ("Cc", "Cf"):
            continue
        if lower_case:
            char = "".join(c for c in unicodedata.normalize("NFD", char.lower())
                           if unicodedata.category(c) != "Mn")
        text.append(char)
        origin.extend([index] * len(char))
    return "".join(text), origin


def _piece_offsets(word: str, word_start: int, pieces, lower_case: bool) -> list:
    """(start, end) in the context of each piece of ``word``: exact where the pieces spell the
    word (``##`` taken off), else the whole word for each ([UNK], ``<num>``)."""
    whole = [(word_start, word_start + len(word))] * len(pieces)
    text, origin = _normalized_chars(word, lower_case)
    offsets, at = [], 0
    for piece in pieces:
        piece = piece.removeprefix(CONTINUATION) if offsets else piece
        if not piece or not text.startswith(piece, at):
            return whole
        offsets.append((word_start + origin[at], word_start + origin[at + len(piece) - 1] + 1))
        at += len(piece)
    return offsets if at == len(text) else whole


def context_pieces(tokenizer, context: str) -> ContextPieces:
    """Split ``context`` as run_squad.py does (see :class:`ContextPieces`)."""
    words, word_starts, char_to_word = [], [], []
    for index, char in enumerate(context):
        if char in CONTEXT_WHITESPACE:
            pass
        elif index == 0 or context[index - 1] in CONTEXT_WHITESPACE:
            words.append(char)
            word_starts.append(index)
        else:
            words[-1] += char
        char_to_word.append(len(words) - 1)
    lower_case = getattr(tokenizer, "lower_case", False)
    pieces, piece_word, piece_start, piece_end, first_piece = [], [], [], [], []
    for w, (word, start) in enumerate(zip(words, word_starts)):
        first_piece.append(len(pieces))
        word_pieces = tokenizer.tokenize(word)
        for begin, end in _piece_offsets(word, start, word_pieces, lower_case):
            piece_start.append(begin)
            piece_end.append(end)
        pieces.extend(word_pieces)
        piece_word.extend([w] * len(word_pieces))
    first_piece.append(len(pieces))
    return ContextPieces(words, char_to_word, pieces, piece_word, piece_start, piece_end,
                         first_piece)


def answer_pieces(tokenizer, context: ContextPieces, answer: Answer) -> tuple[int, int]:
    """(first, last) piece of ``answer``: the pieces of its words, then the tightest span of
    them whose pieces are the answer text's own pieces (run_squad's "improve answer span")."""
    first_word = context.char_to_word[answer.start]
    last_word = context.char_to_word[answer.start + len(answer.text) - 1]
    first = context.word_first_piece[first_word]
    last = context.word_first_piece[last_word + 1] - 1
    wanted = tokenizer.tokenize(answer.text)
    for start in range(first, last + 1):
        for end in range(last, start - 1, -1):
            if context.pieces[start:end + 1] == wanted:
                return start, end
    return first, last


def max_context_windows(starts: list[int], room: int, pieces: int) -> np.ndarray:
    """For each piece, the window (index into ``starts``) where it has the most context: the
    largest ``min(pieces on its left, pieces on its right) + 0.01 * window length``, the
    earlier window on a tie, as run_squad's ``_check_is_max_context``. int [pieces]."""
    starts = np.asarray(starts)[np.newaxis, :]  # [1, windows]
    lengths = np.minimum(room, pieces - starts)  # [1, windows]
    piece = np.arange(pieces)[:, np.newaxis]  # [pieces, 1]
    left, right = piece - starts, starts + lengths - 1 - piece  # [pieces, windows]
    scores = np.where((left >= 0) & (right >= 0), np.minimum(left, right) + 0.01 * lengths,
                      -np.inf)
    return np.argmax(scores, axis=1)  # the first of equal scores: the earlier window


def question_room(max_len: int) -> int:
    """Pieces a question keeps: BERT's 64, and never more than half of what ``[CLS] q [SEP]
    ctx [SEP]`` leaves, so a short ``max_len`` still has room for the context."""
    return min(MAX_QUESTION_PIECES, (max_len - 3) // 2)


def encode_windows(tokenizer, question: list, context: ContextPieces, target, max_len: int,
                   stride: int) -> list[dict]:
    """One row per window of ``[CLS] question [SEP] window [SEP]``, padded to ``max_len``.

    Each row: ``input_ids``, ``token_type_ids`` (1 from the window to its [SEP]),
    ``start_positions``, ``end_positions`` (``target``'s pieces, or 0 for [CLS] when it is
    None or not wholly in the window), and per token the piece's ``token_word``,
    ``token_char_start``, ``token_char_end`` (-1 outside the context) and
    ``token_max_context`` (1 where this window is the piece's max-context window).
    """
    offset = len(question) + 2  # the window's first position
    room = max_len - offset - 1
    count = len(context.pieces)
    starts = window_starts(count, room, stride)
    best_window = max_context_windows(starts, room, count)
    piece_ids = tokenizer.convert_tokens_to_ids(context.pieces)
    rows = []
    for w, start in enumerate(starts):
        end = min(start + room, count)  # one past the window's last piece
        span = slice(offset, offset + end - start)
        row = {name: np.full(max_len, -1, np.int32) for name in (
            "token_word", "token_char_start", "token_char_end")}
        row["input_ids"] = np.full(max_len, tokenizer.pad_id, np.int32)
        row["input_ids"][:offset] = [tokenizer.cls_id, *tokenizer.convert_tokens_to_ids(
            question), tokenizer.sep_id]
        row["input_ids"][span] = piece_ids[start:end]
        row["input_ids"][span.stop] = tokenizer.sep_id
        row["token_type_ids"] = np.zeros(max_len, np.int32)
        row["token_type_ids"][offset:span.stop + 1] = 1
        row["token_word"][span] = context.piece_word[start:end]
        row["token_char_start"][span] = context.piece_start[start:end]
        row["token_char_end"][span] = context.piece_end[start:end]
        row["token_max_context"] = np.zeros(max_len, np.int32)
        row["token_max_context"][span] = best_window[start:end] == w
        inside = target is not None and start <= target[0] and target[1] < end
        row["start_positions"] = np.int32(target[0] - start + offset if inside else 0)
        row["end_positions"] = np.int32(target[1] - start + offset if inside else 0)
        rows.append(row)
    return rows


def _best_in_window(start_logits, end_logits, char_start, max_context):
    """(score, start, end) of the best allowed span of one window ([step] arrays), or
    (-inf, 0, 0) when none is allowed: among the ``N_BEST`` best starts and ends, both in the
    context, start <= end, at most ``MAX_ANSWER_PIECES`` pieces, starting at a piece whose
    max-context window this is. The first best in (start rank, end rank) order wins a tie."""
    starts = np.argsort(-start_logits, kind="stable")[:N_BEST, np.newaxis]  # [N_BEST, 1]
    ends = np.argsort(-end_logits, kind="stable")[np.newaxis, :N_BEST]  # [1, N_BEST]
    allowed = ((char_start[starts] >= 0) & (char_start[ends] >= 0) & (starts <= ends)
               & (ends - starts < MAX_ANSWER_PIECES) & (max_context[starts] == 1))
    scores = np.where(allowed, start_logits[starts].astype(np.float64) + end_logits[ends],
                      -np.inf)  # [N_BEST, N_BEST]
    best = np.unravel_index(np.argmax(scores), scores.shape)
    return float(scores[best]), int(starts[best[0], 0]), int(ends[0, best[1]])


WINDOW_ARRAYS = ("input_ids", "token_type_ids", "start_positions", "end_positions",
                 "token_word", "token_char_start", "token_char_end", "token_max_context")


class SquadTask(Task):
    """SQuAD v1.1: every question's answer is a span of its paragraph.

    Files: ``train-v1.1.json`` and ``dev-v1.1.json`` (examples: :class:`Question`); BERT's
    recipe: 384 tokens a window, windows 128 pieces apart (``stride``). ``encode`` gives a row
    per window and, beside the head's arrays, ``window_example`` [windows] (the question's
    index) and per token ``token_word``, ``token_char_start``, ``token_char_end`` (-1 outside
    the context) and ``token_max_context`` [windows, max_len], which decoding reads. Scores:
    the official F1 and exact match (:mod:`nlp_tutorials.tasks.answers`).
    """

    name = "squad"
    title = "SQuAD v1.1"
    shape = SPAN
    # The head's two scores per token (not classes learnt from train, which `labels = ()` means).
    labels = ("start", "end")
    file_names = {"train": ("train-v1.1.json",), "dev": ("dev-v1.1.json",)}
    default_max_len = 384
    recipe = {"epochs": 3, "batch_size": 32, "learning_rate": 5e-5}  # BERT paper, 4.2
    metrics = (("f1", "F1"), ("exact_match", "exact match"))
    version = "1.1"
    splits_by_article = True

    def read_file(self, path) -> list[Question]:
        questions = read_squad_file(path)
        for question in questions:
            if question.is_impossible:
                raise UserError(f"{path}: question {question.id} is_impossible: expected "
                                f"SQuAD v1.1, every question answered (v2.0 files: --task "
                                f"squad2)")
        return questions

    def summarize(self, questions) -> str:
        articles = len({q.article for q in questions})
        paragraphs = len({(q.article, q.paragraph) for q in questions})
        return ", ".join([counted(articles, "article"), counted(paragraphs, "paragraph"),
                          counted(len(questions), "question")])

    def texts(self, questions) -> list[str]:
        return [q.question for q in questions] + list(dict.fromkeys(q.context for q in questions))

    def longest(self, tokenizer, questions) -> int:
        """[CLS] question [SEP] context [SEP] of the longest question (its first 64 pieces)."""
        return max(min(len(tokenizer.tokenize(q.question)), MAX_QUESTION_PIECES)
                   + len(context_pieces(tokenizer, q.context).pieces) + 3 for q in questions)

    def encode(self, tokenizer, questions, max_len: int) -> dict:
        """Windows of every question (see :func:`encode_windows`), int32: the head's
        ``input_ids``, ``token_type_ids`` [windows, max_len] and ``start_positions``,
        ``end_positions`` [windows] (the first gold answer's pieces; [CLS] where a window
        lacks it), then ``window_example`` [windows] and the per-token decoding arrays."""
        if max_len < 8:
            raise UserError(f"max_len {max_len}: expected at least 8 tokens for "
                            f"[CLS] question [SEP] context [SEP]")
        contexts, rows, window_example = {}, [], []
        for index, question in enumerate(questions):
            if question.context not in contexts:
                contexts[question.context] = context_pieces(tokenizer, question.context)
            context = contexts[question.context]
            target = None
            if question.answers and not question.is_impossible:
                target = answer_pieces(tokenizer, context, question.answers[0])
            question_tokens = tokenizer.tokenize(question.question)[:question_room(max_len)]
            windows = encode_windows(tokenizer, question_tokens, context, target, max_len,
                                     self.stride)
            rows.extend(windows)
            window_example.extend([index] * len(windows))
        if not rows:  # no question: no window, every array empty
            return {name: np.zeros((0, max_len) if name.startswith(("input", "token")) else 0,
                                   np.int32) for name in (*WINDOW_ARRAYS, "window_example")}
        arrays = {name: np.stack([row[name] for row in rows]) for name in WINDOW_ARRAYS}
        arrays["window_example"] = np.array(window_example, np.int32)
        return arrays

    def predictions(self, outputs, encoded: dict, questions) -> list[SpanPrediction]:
        """The answer to each question, decoded over all its windows (see the module's
        step 4) from ``outputs["start_logits"]``, ``outputs["end_logits"]`` [windows, step]."""
        start_logits = np.asarray(outputs["start_logits"], np.float32)
        end_logits = np.asarray(outputs["end_logits"], np.float32)
        windows = [[] for _ in questions]
        for w, index in enumerate(encoded["window_example"]):
            windows[index].append(w)
        return [self._decode(question, windows[q], start_logits, end_logits, encoded)
                for q, question in enumerate(questions)]

    def _decode(self, question, windows, start_logits, end_logits, encoded) -> SpanPrediction:
        best_score, best_chars = -np.inf, (-1, -1)
        null_score = np.inf
        for w in windows:
            null_score = min(null_score, float(start_logits[w, 0]) + float(end_logits[w, 0]))
            score, start, end = _best_in_window(start_logits[w], end_logits[w],
                                                encoded["token_char_start"][w],
                                                encoded["token_max_context"][w])
            if score > best_score:
                best_score = score
                best_chars = (int(encoded["token_char_start"][w, start]),
                              int(encoded["token_char_end"][w, end]))
        best_text = question.context[best_chars[0]:best_chars[1]] if best_chars[0] >= 0 else ""
        if not best_text or self.answers_none(null_score, best_score):
            return SpanPrediction("", -1, -1, best_score, null_score, best_text)
        return SpanPrediction(best_text, *best_chars, best_score, null_score, best_text)

    def answers_none(self, null_score: float, best_score: float) -> bool:
        """Whether to answer "" rather than the best span: never in v1.1."""
        return False

    def score(self, questions, predictions) -> dict:
        """The official v1.1 ``exact_match`` and ``f1``, fractions."""
        return squad_scores([[a.text for a in q.answers] for q in questions],
                            [p.text for p in predictions], version=self.version)

    def parse_lines(self, lines, source: str):
        """Questions from ``question<TAB>context`` lines (the context may hold more tabs); the
        id of each is its line number. Blank lines are skipped."""
        for number, line in example_lines(
                lines, source, "no questions found (only blank lines); expected "
                "question<TAB>context a line"):
            fields = line.split("\t", 1)
            if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
                raise UserError(f"{source}, line {number}: expected a question and its "
                                f"context, separated by a tab")
            yield Question(str(number), fields[0], fields[1])

    def shown_answer(self, question, answer, row=None) -> dict:
        """The answer's text, and its first and last token in the shown row (the first
        window) when it lies there: the pieces whose context characters fall inside the
        answer's."""
        shown = {"answer": answer.text}
        starts, ends = np.asarray(row["token_char_start"]), np.asarray(row["token_char_end"])
        inside = np.nonzero((starts >= 0) & (starts >= answer.start) & (ends <= answer.end))[0]
        if answer.text and inside.size:
            shown["tokens"] = [int(inside[0]), int(inside[-1])]
        return shown

    def format_prediction(self, question, prediction) -> str:
        """``answer<TAB>start<TAB>end``: the answer is ``context[start:end]`` (characters,
        end exclusive; tabs and line breaks inside it printed as spaces); no answer (v2.0) is
        an empty answer and ``-1<TAB>-1``."""
        text = " ".join(prediction.text.replace("\t", " ").splitlines())
        return f"{text}\t{prediction.start}\t{prediction.end}"

    def prediction_file(self, questions, predictions) -> tuple[str, str]:
        """``.json``, the official scripts' input: ``{question id: answer text}``."""
        answers = {q.id: p.text for q, p in zip(questions, predictions)}
        return ".json", json.dumps(answers, ensure_ascii=False, indent=1) + "\n"


class Squad2Task(SquadTask):
    """SQuAD v2.0: v1.1 plus questions the paragraph does not answer (``is_impossible``).

    Files ``train-v2.0.json`` and ``dev-v2.0.json``. An unanswerable question targets [CLS]
    in every window; decoding answers "" when the null score exceeds the best span's score by
    more than ``null_threshold`` (default 0.0; :meth:`tuned` copies the task with the dev
    file's best, and ``settings()`` keeps it). Scores add the official HasAns and NoAns parts
    and the best threshold (:func:`nlp_tutorials.tasks.answers.squad2_scores`).
    """

    name = "squad2"
    title = "SQuAD v2.0"
    file_names = {"train": ("train-v2.0.json",), "dev": ("dev-v2.0.json",)}
    recipe = {"epochs": 2, "batch_size": 48, "learning_rate": 5e-5}  # BERT paper, 4.3
    version = "2.0"

    def __init__(self, *args, null_threshold: float = 0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.null_threshold = float(null_threshold)

    def settings(self) -> dict:
        return {**super().settings(), "null_threshold": self.null_threshold}

    def tuned(self, dev_scores: dict) -> "Squad2Task":
        """This task with the threshold that gave the best dev F1 (``best_threshold``)."""
        if "best_threshold" not in dev_scores:
            return self
        return self.replace(null_threshold=float(dev_scores["best_threshold"]))

    def selection_score(self, dev_scores: dict) -> float:
        """F1 at the dev file's best threshold, the one :meth:`tuned` then adopts. F1 at the
        threshold in use would tie every epoch that still answers nothing, and keep the first."""
        return dev_scores["best_f1"]

    def read_file(self, path) -> list[Question]:
        return read_squad_file(path)

    def summarize(self, questions) -> str:
        unanswerable = sum(q.is_impossible for q in questions)
        return f"{super().summarize(questions)}, {unanswerable:,} unanswerable"

    def answers_none(self, null_score: float, best_score: float) -> bool:
        return null_score - best_score > self.null_threshold

    def score(self, questions, predictions) -> dict:
        """The official v2.0 scores, and the best threshold swept over each question's best
        span with ``null_score - score`` as its no-answer score."""
        return squad2_scores([[a.text for a in q.answers] for q in questions],
                             [p.text for p in predictions],
                             [p.best_text for p in predictions],
                             [p.null_score - p.score for p in predictions])
