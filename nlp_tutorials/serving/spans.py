"""Serve a SQuAD model: a question and its paragraph in, the answer's text and characters out.

The SavedModel of a span task (SQuAD v1.1, v2.0, a ``--format squad`` file's) does in the graph
what ``bert predict`` does in numpy (:mod:`nlp_tutorials.tasks.squad`), step for step:

1. The context is split into words on run_squad's whitespace (``CONTEXT_WHITESPACE``), each
   word into WordPiece pieces (:class:`~nlp_tutorials.serving.savedmodel.GraphWordPiece`),
   and each piece gets its characters in the context (:func:`piece_offsets`).
2. The question keeps its first ``question_room(max_len)`` pieces; the context's pieces are
   cut into windows of what is left, ``stride`` pieces apart (:func:`lay_out_windows`), each
   row ``[CLS] question [SEP] window [SEP]``; the windows of every question of the batch go
   through the model together.
3. Each window offers its 20 best starts and ends; a span must lie in the window's context
   part, start <= end, at most 30 pieces, and start at a piece whose max-context window this
   is; the best start + end logit over all windows of a question wins (:func:`best_spans`).

Offsets are characters (Unicode code points) of the ORIGINAL context, end exclusive, as
``predict`` prints them: lower-casing and accent stripping change a word's length ("München"
typed with a combining diaeresis, U+0308, is seven characters and reads "munchen"), so each
normalised character remembers the character it came from, as ``squad._piece_offsets`` does; where a word's pieces do not spell its normalised
characters ([UNK]), each of its pieces spans the whole word.
"""
from typing import NamedTuple

import tensorflow as tf

from nlp_tutorials.serving.savedmodel import SequenceModule, import_tensorflow_text
from nlp_tutorials.tasks.shapes import SPAN
from nlp_tutorials.tasks.squad import (CONTEXT_WHITESPACE, CONTINUATION, MAX_ANSWER_PIECES,
                                       N_BEST, question_room)

# run_squad's word separators, as a regular expression class.
_CONTEXT_SPACE = "[" + "".join(f"\\x{{{ord(c):04X}}}" for c in sorted(CONTEXT_WHITESPACE)) + "]"
# What squad._normalized_chars drops from a word: Python's isspace() (Unicode Z*, and the
# controls among Cc) and control and format characters.
_DROPPED = r"[\p{Cc}\p{Cf}\p{Z}]"


class ContextPieces(NamedTuple):
    """The pieces of a batch of contexts: ``ids`` int32 and, in characters of the context,
    ``starts`` and ``ends`` (end exclusive), int32 ragged [batch, (pieces)] each."""
    ids: tf.RaggedTensor
    starts: tf.RaggedTensor
    ends: tf.RaggedTensor


class Windows(NamedTuple):
    """The windows of a batch, one row each: ``input_ids``, ``token_type_ids`` int32
    [windows, step]; ``example`` [windows], the question each belongs to; per token
    ``char_start``, ``char_end`` (the piece's characters, -1 outside the context) and
    ``max_context`` (1 where this window is the piece's max-context one), [windows, step]."""
    input_ids: tf.Tensor
    token_type_ids: tf.Tensor
    example: tf.Tensor
    char_start: tf.Tensor
    char_end: tf.Tensor
    max_context: tf.Tensor


def _exclusive_cumsum(values):
    return tf.cumsum(values, exclusive=True)


def _ceil_div(a, b):
    return -tf.math.floordiv(-a, b)


def _first_max(values):
    """Index of the first largest value of each row of [rows, n] (numpy's argmax; ties in
    ``tf.argmax`` are not promised to go to the first)."""
    n = tf.shape(values, out_type=tf.int64)[1]
    best = tf.reduce_max(values, axis=1, keepdims=True)
    return tf.reduce_min(tf.where(values == best, tf.range(n), n), axis=1)  # [rows]


def whitespace_words(contexts):
    """run_squad's words of string [batch]: ragged string [words, (characters)], one
    character a string, with ``word_row`` [words] (the context's index) and ``word_start``
    [words] (its first character in the context), int64."""
    chars = tf.strings.unicode_split(contexts, "UTF-8")  # [batch, (characters)]
    flat = chars.flat_values
    row = chars.value_rowids()
    position = tf.range(tf.size(flat, out_type=tf.int64)) - tf.gather(chars.row_starts(), row)
    space = tf.strings.regex_full_match(flat, _CONTEXT_SPACE)
    after_space = tf.concat([[True], space[:-1]], axis=0) | (position == 0)
    begins = ~space & after_space  # a word's first character
    word = tf.cumsum(tf.cast(begins, tf.int64)) - 1
    words = tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(flat, ~space), tf.boolean_mask(word, ~space),
        nrows=tf.reduce_sum(tf.cast(begins, tf.int64)))
    return words, tf.boolean_mask(row, begins), tf.boolean_mask(position, begins)


def normalized_chars(chars, lower_case: bool):
    """``squad._normalized_chars`` one character at a time: string [n] of single characters ->
    string [n], each as the tokenizer sees it (lower case and no accents when lower-casing;
    spaces, control and format characters ""), possibly several characters ("İ" -> "i")."""
    text = tf.strings.regex_replace(chars, _DROPPED, "")
    if not lower_case:
        return text
    lower = tf.strings.lower(text, encoding="utf-8")
    decomposed = import_tensorflow_text().normalize_utf8(lower, "NFD")
    return tf.strings.regex_replace(decomposed, r"\p{Mn}", "")


def piece_offsets(words, word_start, pieces, lower_case: bool):
    """(start, end) in the context of each piece, int64 [pieces] each: exact where a word's
    pieces (``##`` taken off after its first) spell its normalised characters, else the whole
    word, as ``squad._piece_offsets``.

    ``words``: ragged string [words, (characters)]; ``word_start`` [words]; ``pieces``:
    ragged string [words, (pieces)], the tokens of each word.
    """
    norm = normalized_chars(words.flat_values, lower_case)  # [characters]
    norm_length = tf.cast(tf.strings.length(norm, unit="UTF8_CHAR"), tf.int64)
    char_in_word = tf.range(tf.size(norm, out_type=tf.int64)) - tf.gather(
        words.row_starts(), words.value_rowids())
    # The character of its word each normalised character came from, one entry more so that
    # a gather never reads an empty tensor.
    origin = tf.concat([tf.repeat(char_in_word, norm_length), [0]], axis=0)
    word_norm_start = tf.gather(_exclusive_cumsum(norm_length), words.row_starts())

    first_piece = tf.ragged.range(pieces.row_lengths()).flat_values == 0  # [pieces]
    text = tf.where(first_piece, pieces.flat_values, tf.strings.regex_replace(
        pieces.flat_values, "^" + CONTINUATION, "", replace_global=False))
    length = tf.cast(tf.strings.length(text, unit="UTF8_CHAR"), tf.int64)
    spelled = ((tf.strings.reduce_join(pieces.with_flat_values(text), axis=1)
                == tf.strings.reduce_join(words.with_flat_values(norm), axis=1))
               & tf.reduce_all(pieces.with_flat_values(length > 0), axis=1))  # [words]

    word = pieces.value_rowids()  # [pieces]
    at = _exclusive_cumsum(length)
    first = tf.gather(word_norm_start, word) + at - tf.gather(at, tf.gather(pieces.row_starts(),
                                                                          word))
    last = tf.clip_by_value(first + length - 1, 0, tf.size(origin, out_type=tf.int64) - 1)
    first = tf.clip_by_value(first, 0, tf.size(origin, out_type=tf.int64) - 1)
    start = tf.gather(word_start, word)
    exact = tf.gather(spelled, word)
    return (tf.where(exact, start + tf.gather(origin, first), start),
            tf.where(exact, start + tf.gather(origin, last) + 1,
                     start + tf.gather(words.row_lengths(), word)))


def max_context_windows(piece, room, shift, windows, pieces):
    """``squad.max_context_windows`` for every piece of a batch: the window (0, 1, ... of its
    question) where the piece has the most context, the earlier on a tie. All int64 [pieces]:
    ``piece`` the piece's index in its context, and its question's ``room`` (pieces a window
    holds), ``shift`` (between window starts), ``windows`` and ``pieces`` (its count)."""
    first = tf.maximum(tf.math.floordiv(piece - room, shift) + 1, 0)  # the first holding it
    last = tf.minimum(windows - 1, tf.math.floordiv(piece, shift))  # the last
    width = tf.reduce_max(tf.concat([last - first, [0]], axis=0)) + 1  # candidates a piece
    window = first[:, tf.newaxis] + tf.range(width)[tf.newaxis, :]  # [pieces, width]
    start = window * shift[:, tf.newaxis]
    length = tf.minimum(room[:, tf.newaxis], pieces[:, tf.newaxis] - start)
    left, right = piece[:, tf.newaxis] - start, start + length - 1 - piece[:, tf.newaxis]
    score = tf.where(window <= last[:, tf.newaxis],
                     tf.cast(tf.minimum(left, right), tf.float64)
                     + 0.01 * tf.cast(length, tf.float64), float("-inf"))
    return first + _first_max(score)


def _column(rows, value):
    """Ragged int32 [rows, (1)] of ``value``: one special token a row."""
    return tf.RaggedTensor.from_tensor(tf.fill(tf.stack([rows, 1]), tf.constant(value, tf.int32)))


def _window_row(rows, question, window, first, between, last, padding):
    """``first question between window last`` a row, padded: int32 [rows, step].
    ``question`` and ``window`` ragged [rows, (pieces)]; the others token values."""
    row = tf.concat([_column(rows, first), question, _column(rows, between), window,
                     _column(rows, last)], axis=1)
    return row.to_tensor(default_value=padding)


def lay_out_windows(questions, pieces: ContextPieces, max_len: int, stride: int,
                    cls_id: int, sep_id: int, pad_id: int) -> Windows:
    """``[CLS] question [SEP] window [SEP]`` rows of every question of a batch, as
    ``squad.encode_windows`` lays them out, padded to the longest row (at most ``max_len``).

    ``questions``: int32 ragged [batch, (pieces)], already cut to the question room. A
    question's windows hold ``room = max_len - 3 - its pieces`` context pieces, each
    ``min(room, stride)`` after the one before, the last ending at the context's last piece.
    """
    count = pieces.ids.row_lengths()  # [batch]
    room = max_len - 3 - questions.row_lengths()
    shift = tf.minimum(room, stride)
    windows = 1 + tf.maximum(_ceil_div(count - room, shift), 0)  # [batch]
    example = tf.repeat(tf.range(questions.nrows()), windows)  # [windows]
    rows = tf.size(example, out_type=tf.int64)
    number = tf.range(rows) - tf.repeat(_exclusive_cumsum(windows), windows)  # in its question
    begin = number * tf.gather(shift, example)
    end = tf.minimum(begin + tf.gather(room, example), tf.gather(count, example))

    piece_row = pieces.ids.value_rowids()  # [pieces of the batch]
    piece = tf.range(tf.size(piece_row, out_type=tf.int64)) - tf.gather(
        pieces.ids.row_starts(), piece_row)  # its index in its context
    best_window = max_context_windows(piece, *(tf.gather(x, piece_row)
                                               for x in (room, shift, windows, count)))
    first = tf.gather(pieces.ids.row_starts(), example)
    chosen = tf.ragged.range(first + begin, first + end)  # [windows, (pieces)], batch-wide

    def per_piece(values):  # [pieces of the batch] -> int32 [windows, (pieces)]
        return chosen.with_flat_values(tf.cast(tf.gather(values, chosen.flat_values), tf.int32))

    question = tf.gather(questions, example)  # [windows, (question pieces)]
    blank = question * 0 - 1
    this_window = chosen.with_flat_values(tf.cast(
        tf.gather(best_window, chosen.flat_values)
        == tf.gather(number, chosen.value_rowids()), tf.int32))
    return Windows(
        input_ids=_window_row(rows, question, per_piece(pieces.ids.flat_values), cls_id,
                              sep_id, sep_id, pad_id),
        token_type_ids=_window_row(rows, question * 0, this_window * 0 + 1, 0, 0, 1, 0),
        example=example,
        char_start=_window_row(rows, blank, per_piece(pieces.starts.flat_values), -1, -1, -1,
                               -1),
        char_end=_window_row(rows, blank, per_piece(pieces.ends.flat_values), -1, -1, -1, -1),
        max_context=_window_row(rows, question * 0, this_window, 0, 0, 0, 0))


class BestSpans(NamedTuple):
    """Each question's best span over its windows: ``score`` float64 [batch] (start + end
    logit, -inf when no span is allowed), ``start`` and ``end`` int32 [batch] (characters of
    the context, end exclusive; meaningless without a span) and ``null_score`` float64
    [batch] (the [CLS] start + end logit, the lowest over the question's windows)."""
    score: tf.Tensor
    start: tf.Tensor
    end: tf.Tensor
    null_score: tf.Tensor


def best_in_windows(start_logits, end_logits, windows: Windows):
    """``squad._best_in_window`` on every window: (score float64, start position, end
    position), [windows] each; the score is -inf where no span is allowed."""
    k = tf.minimum(N_BEST, tf.shape(start_logits)[1])
    starts = tf.math.top_k(start_logits, k).indices  # [windows, k]; ties: the lower position
    ends = tf.math.top_k(end_logits, k).indices
    in_context = windows.char_start >= 0  # [windows, step]
    can_start = tf.gather(in_context & (windows.max_context == 1), starts, batch_dims=1)
    can_end = tf.gather(in_context, ends, batch_dims=1)
    first, last = starts[:, :, tf.newaxis], ends[:, tf.newaxis, :]
    allowed = (can_start[:, :, tf.newaxis] & can_end[:, tf.newaxis, :] & (first <= last)
               & (last - first < MAX_ANSWER_PIECES))  # [windows, k, k]
    scores = (tf.cast(tf.gather(start_logits, starts, batch_dims=1), tf.float64)[:, :, None]
              + tf.cast(tf.gather(end_logits, ends, batch_dims=1), tf.float64)[:, None, :])
    scores = tf.reshape(tf.where(allowed, scores, float("-inf")), [tf.shape(starts)[0], k * k])
    pair = tf.cast(_first_max(scores), tf.int32)  # in (start rank, end rank) order
    return (tf.gather(scores, pair, batch_dims=1),
            tf.gather(starts, pair // k, batch_dims=1), tf.gather(ends, pair % k, batch_dims=1))


def best_spans(logits: dict, windows: Windows) -> BestSpans:
    """The best span of each question over its windows, the first window's on
    a tie, as ``SquadTask._decode`` picks it, from ``start_logits``, ``end_logits``
    [windows, step]."""
    start_logits, end_logits = logits["start_logits"], logits["end_logits"]
    score, start, end = best_in_windows(start_logits, end_logits, windows)  # [windows]
    # Every question has a window and its windows are consecutive: sorted segments, whose
    # max keeps -inf (the unsorted op starts from the lowest float and would answer that).
    best = tf.math.segment_max(score, windows.example)  # [batch]
    rows = tf.size(score, out_type=tf.int64)
    window = tf.math.segment_min(
        tf.where(score == tf.gather(best, windows.example), tf.range(rows), rows),
        windows.example)  # [batch], the first window reaching the best
    # [CLS]'s start + end; [:, :1], not [:, 0]: an empty batch has no position at all
    null = tf.reduce_sum(tf.cast(start_logits[:, :1], tf.float64)
                         + tf.cast(end_logits[:, :1], tf.float64), axis=1)  # [windows]
    at = tf.stack([window, tf.cast(tf.gather(start, window), tf.int64)], axis=1)
    until = tf.stack([window, tf.cast(tf.gather(end, window), tf.int64)], axis=1)
    return BestSpans(best, tf.gather_nd(windows.char_start, at),
                     tf.gather_nd(windows.char_end, until),
                     tf.math.segment_min(null, windows.example))


@SPAN.register_server
class SpanModule(SequenceModule):
    """The SavedModel of a SQuAD task: ``question`` and ``context`` in, the answer out (see
    the module's docstring for how), with the task's ``max_len`` and ``stride`` and, for
    v2.0, its ``null_threshold``. ``predict_ids`` is the model alone on laid-out windows."""

    answers_label_names = False  # its answer is not one of the task's labels

    def __init__(self, head, tokenizer, task, strings: bool = True):
        super().__init__(head, tokenizer, task, strings)
        self.max_len = task.max_len  # fitted to the model's positions by load_finetuned
        self.stride = task.stride
        self.question_room = question_room(task.max_len)
        # v2.0 only: answer "" when the null score beats the best span's by more than this.
        self.null_threshold = getattr(task, "null_threshold", None)
        if self.tokenizer is not None:
            self.lower_case = tokenizer.lower_case
            self.vocab = tf.constant(tokenizer.vocab)  # id -> piece, for the offsets

    def answer(self, logits) -> dict:
        """The head's ``start_logits``, ``end_logits`` float32 [batch, step] as they are."""
        return {name: tf.cast(logits[name], tf.float32) for name in ("start_logits",
                                                                       "end_logits")}

    def logits_from_answer(self, outputs: dict) -> dict:
        """The answer itself: it is the head's logits."""
        return {name: outputs[name] for name in ("start_logits", "end_logits")}

    def context_pieces(self, context) -> ContextPieces:
        """``squad.context_pieces`` of string [batch]: run_squad's words, their pieces and
        each piece's characters in the context."""
        words, word_row, word_start = whitespace_words(context)
        ids = self.tokenizer.ids(tf.strings.reduce_join(words, axis=1))  # [words, (pieces)]
        tokens = ids.with_flat_values(tf.gather(self.vocab, ids.flat_values))
        starts, ends = piece_offsets(words, word_start, tokens, self.lower_case)
        context_row = tf.gather(word_row, ids.value_rowids())  # [pieces of the batch]

        def per_context(values):
            return tf.RaggedTensor.from_value_rowids(tf.cast(values, tf.int32), context_row,
                                                     nrows=tf.size(context, out_type=tf.int64))

        return ContextPieces(per_context(ids.flat_values), per_context(starts),
                             per_context(ends))

    def serving_default(self, question, context):
        """``question``, ``context`` string [batch] -> ``answer`` string [batch] (the
        context's own characters, "" for none), ``start``, ``end`` int32 [batch] (its
        characters in the context, end exclusive; -1 for none) and ``score`` float32 [batch]
        (start + end logit; -inf when no span is allowed); v2.0 adds ``null_score`` float32
        and ``answered`` bool [batch]."""
        questions = self.tokenizer.ids(question)[:, :self.question_room]
        windows = lay_out_windows(questions, self.context_pieces(context), self.max_len,
                                  self.stride, **self.special_ids)
        logits = self.head({"input_ids": windows.input_ids,
                            "token_type_ids": windows.token_type_ids}, training=False)
        best = best_spans(self.answer(logits), windows)
        answered = (best.score > float("-inf")) & (best.end > best.start)
        outputs = {"score": tf.cast(best.score, tf.float32)}
        if self.null_threshold is not None:
            answered &= ~(best.null_score - best.score > self.null_threshold)
            outputs.update(null_score=tf.cast(best.null_score, tf.float32), answered=answered)
        start, end = tf.where(answered, best.start, -1), tf.where(answered, best.end, -1)
        outputs.update(start=start, end=end, answer=tf.strings.substr(
            context, tf.maximum(start, 0), end - start, unit="UTF8_CHAR"))
        return outputs

    def signatures(self) -> dict:
        """``predict_ids`` (ids [windows, step] -> logits) and, with a graph tokenizer,
        ``serving_default``."""
        ids = [tf.TensorSpec([None, None], tf.int32, name=name)
               for name in ("input_ids", "token_type_ids", "attention_mask")]
        functions = {"predict_ids": tf.function(self.predict_ids, input_signature=ids)}
        if self.tokenizer is not None:
            functions["serving_default"] = tf.function(self.serving_default, input_signature=[
                tf.TensorSpec([None], tf.string, name=name) for name in ("question", "context")])
        return {name: function.get_concrete_function() for name, function in functions.items()}

