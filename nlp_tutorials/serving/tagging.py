"""Serve a token-tagging model (CoNLL-2003 named entities, a user's ``--format conll`` tags):
sentences in, one tag per word out, laid out and decoded as ``bert predict`` does.

``export-model`` writes two signatures for a tagging model:

- ``serving_default``: ``sentence`` (string [batch], the words separated by whitespace: a line
  as ``predict`` reads it) -> ``words`` (string [batch, words], the sentence's words, padded
  with ""), ``tags`` (string [batch, words], each word's IOB2 tag, padded with ""),
  ``word_count`` (int32 [batch]) and ``probability`` (float32 [batch, words], the softmax
  probability of the word's arg-max tag, padded with 0).
- ``predict_ids``: ``input_ids``, ``token_type_ids``, ``attention_mask`` (int32 [batch, step])
  -> for every position: ``tag_id`` (int32 [batch, step], the arg-max), ``tag`` (string
  [batch, step], its name as the labels spell it: pieces are not words, so no IOB2 rewrite)
  and ``probability`` (float32 [batch, step]). [CLS], [SEP], padding and a word's later
  pieces get answers too: the caller keeps the positions it wants.

The graph follows :class:`~nlp_tutorials.tasks.conll.ConllTask` step by step, and serves any
token task that encodes as it does (``tags_first_pieces = True``, and ``window_step``):

1. A sentence is cut into words where Python's ``str.split()`` cuts it (every character
   ``str.isspace`` accepts; RE2's ``\\s`` knows only ASCII spaces).
2. Each word is cut into pieces on its own by :class:`GraphWordPiece`; a word that gives
   none (a lone control character) is one ``[UNK]``, so every word has a first piece.
3. A sentence longer than ``max_len - 2`` pieces is cut into windows of ``max_len - 2``
   pieces, ``task.window_step(max_len)`` apart (as ``ConllTask._windows``), each laid out
   ``[CLS] pieces [SEP]``; all windows of the batch go through the model together.
4. Each word takes the arg-max of its first piece's logits in the window where that piece
   has the most context (the fewer pieces on either side, largest; the earlier window on a
   tie), and the tags are rewritten as IOB2 as ``entities.to_iob2`` does.

A blank sentence has no words: ``word_count`` 0 (``predict`` passes blank lines over).

:class:`TaggingModule` registers itself for the token shape (:mod:`nlp_tutorials.tasks.shapes`),
and ``export_model`` serves token tasks with it.
"""
import numpy as np
import tensorflow as tf

import nlp_tutorials.tasks.entities as entities
from nlp_tutorials.serving.savedmodel import (
    SequenceModule,
    ids_spec,
    logits_of_label,
    strings_spec,
    import_tensorflow_text,
    pack,
)
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.tasks.shapes import TOKEN

# The characters Python's str.isspace() accepts, where str.split() cuts a predict line.
PYTHON_SPACES = (r"[\t-\r\x{1C}-\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}"
                 r"\x{202F}\x{205F}\x{3000}]+")


def split_on_spaces(sentences):
    """string [batch] -> ragged string [batch, (words)], as ``line.split()`` per sentence."""
    return import_tensorflow_text().regex_split(sentences, delim_regex_pattern=PYTHON_SPACES)


def window_layout(piece_counts, width: int, step: int):
    """The windows :func:`nlp_tutorials.tasks.windows.window_starts` cuts sentences of
    ``piece_counts`` (int64 [batch]) pieces into: a window every ``step`` pieces, ``width``
    wide, until one reaches the sentence's end.

    Returns int64 [windows] each, windows in order of sentence then start: the sentence of
    each window, its first piece and one past its last (pieces counted within the sentence).
    """
    beyond_first = tf.maximum(piece_counts - width, 0)  # pieces the first window cannot hold
    windows = 1 + (beyond_first + step - 1) // step  # [batch]
    sentence = tf.repeat(tf.range(tf.size(piece_counts, out_type=tf.int64)), windows)
    start = tf.ragged.range(windows).flat_values * step
    stop = tf.minimum(start + width, tf.gather(piece_counts, sentence))
    return sentence, start, stop


def most_context(word, context, words):
    """For each of ``words`` words, the entry (index into ``word`` [entries], the word of each
    entry) with the largest ``context`` [entries], the earliest on a tie: int [words]."""
    best = tf.math.unsorted_segment_max(context, word, words)  # [words]
    entries = tf.size(word, out_type=word.dtype)
    index = tf.range(entries, dtype=word.dtype)
    candidates = tf.where(context == tf.gather(best, word), index, entries)
    return tf.math.unsorted_segment_min(candidates, word, words)


@TOKEN.register_server
class TaggingModule(SequenceModule):
    """The SavedModel of a token-tagging task: the head, the graph tokenizer, the tag tables.

    A token task that declares it encodes this way (``tags_first_pieces``, as
    :class:`~nlp_tutorials.tasks.conll.ConllTask` does for CoNLL-2003 and a user's ``--format
    conll`` files) is served; another is refused in one line.
    """

    answers_label_names = False  # it names each word's tag itself

    def __init__(self, head, tokenizer, task, strings: bool = True):
        if not task.tags_first_pieces:
            raise UserError(f"{task.title}: a token task that does not declare "
                            f"tags_first_pieces; export-model lays out each word's tag on its "
                            f"first word piece, as CoNLL-2003 encodes, and no other way")
        super().__init__(head, tokenizer, task, strings)
        if self.max_len < 3:
            raise UserError(f"max_len={self.max_len}: expected at least 3 (room for [CLS], "
                            f"a word piece and [SEP])")
        self.width, self.step = self.max_len - 2, task.window_step(self.max_len)
        self.unk_id = tokenizer.unk_id
        self.labels = tf.constant(task.labels)
        self.add_iob2_tables(task.labels)

    def add_iob2_tables(self, labels):
        """What ``entities.to_iob2`` reads of each label (by label id): whether it is outside
        (prefix ``O``) or inside (``I``), its type's index, and its ``B-`` and ``I-`` names."""
        split = [entities.split_tag(label) for label in labels]
        type_index = {entity_type: index
                      for index, entity_type in enumerate(dict.fromkeys(t for _, t in split))}
        self.outside = tf.constant([prefix == entities.OUTSIDE for prefix, _ in split])
        self.inside = tf.constant([prefix == entities.INSIDE for prefix, _ in split])
        self.type_index = tf.constant([type_index[t] for _, t in split], tf.int32)
        self.begin_names = tf.constant([f"{entities.BEGIN}-{t}" for _, t in split])
        self.inside_names = tf.constant([f"{entities.INSIDE}-{t}" for _, t in split])

    def answer(self, logits) -> dict:
        """Logits [batch, step, labels] -> each position's ``tag_id`` int32, ``tag`` string
        and ``probability`` float32 [batch, step] (``predict_ids``)."""
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))  # [batch, step, labels]
        tag_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)
        return {"tag_id": tag_id, "tag": tf.gather(self.labels, tag_id),
                "probability": tf.reduce_max(probabilities, axis=-1)}

    def logits_from_answer(self, outputs: dict) -> np.ndarray:
        """Logits [batch, step, labels] whose arg-max is each position's ``tag_id``."""
        return logits_of_label(outputs["tag_id"], outputs["probability"], self.head.num_labels)

    def word_pieces(self, words):
        """Each word's piece ids, the word tokenized on its own: string [words] -> ragged
        int32 [words, (pieces)], ``[UNK]`` for a word that gives none (``conll.word_ids``)."""
        pieces = self.tokenizer.ids(words)
        empty = tf.cast(pieces.row_lengths() == 0, pieces.row_splits.dtype)  # [words]
        unknown = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(empty)], tf.constant(self.unk_id, tf.int32)), empty)
        return tf.concat([pieces, unknown], axis=1)

    def window_logits(self, sentence_pieces):
        """Every window of every sentence through the model.

        ``sentence_pieces``: ragged int32 [batch, (pieces)]. Returns, per entry (a piece seen
        in a window; a piece in two windows is two entries): its index among all the batch's
        pieces (int64 [entries]), its context (the fewer pieces on either side of it in the
        window, int64 [entries]) and the logits there (float32 [entries, labels]).
        """
        sentence, start, stop = window_layout(sentence_pieces.row_lengths(), self.width,
                                              self.step)
        positions = tf.ragged.range(start, stop)  # [windows, (pieces)], within the sentence
        piece = positions + tf.gather(sentence_pieces.row_starts(), sentence)[:, tf.newaxis]
        ids, types = pack([tf.gather(sentence_pieces.flat_values, piece)], self.max_len,
                          **self.special_ids)  # [windows, step]
        logits = tf.cast(self.head({"input_ids": ids, "token_type_ids": types},
                                   training=False), tf.float32)  # [windows, step, labels]
        window = positions.value_rowids()  # [entries]
        offset = positions.flat_values - tf.gather(start, window)  # after [CLS]
        after = tf.gather(stop - start, window) - 1 - offset
        entry_logits = tf.gather_nd(logits, tf.stack([window, offset + 1], axis=1))
        return piece.flat_values, tf.minimum(offset, after), entry_logits

    def iob2(self, tag_id, first_word):
        """Tag names as ``entities.to_iob2`` writes them: an ``I-`` tag continues an entity
        only after a word of that type that is not outside, in the same sentence; otherwise
        it starts one (``B-``). ``tag_id`` int32 [words], ``first_word`` bool [words]."""
        previous = tf.roll(tag_id, 1, axis=0)  # the first word's wraps round: never read
        continues = (tf.gather(self.inside, tag_id) & ~first_word
                     & ~tf.gather(self.outside, previous)
                     & tf.equal(tf.gather(self.type_index, previous),
                                tf.gather(self.type_index, tag_id)))
        names = tf.where(continues, tf.gather(self.inside_names, tag_id),
                         tf.gather(self.begin_names, tag_id))
        return tf.where(tf.gather(self.outside, tag_id), entities.OUTSIDE, names)

    def serving_default(self, sentence):
        """Sentences, string [batch] -> ``words``, ``tags``, ``word_count``, ``probability``
        (see the module's docstring)."""
        words = split_on_spaces(sentence)  # [batch, (words)]
        pieces = self.word_pieces(words.flat_values)  # [all words, (pieces)]
        sentence_pieces = tf.RaggedTensor.from_row_lengths(
            pieces, words.row_lengths()).merge_dims(1, 2)  # [batch, (pieces)]
        piece, context, logits = self.window_logits(sentence_pieces)
        # Only a word's first piece carries its tag.
        is_first = tf.ragged.range(pieces.row_lengths()).flat_values == 0  # [all pieces]
        keep = tf.gather(is_first, piece)
        word = tf.gather(pieces.value_rowids(), tf.boolean_mask(piece, keep))  # [entries kept]
        chosen = most_context(word, tf.boolean_mask(context, keep), tf.size(words.flat_values))
        probabilities = tf.nn.softmax(tf.gather(tf.boolean_mask(logits, keep), chosen))
        tag_id = tf.argmax(probabilities, axis=-1, output_type=tf.int32)  # [all words]
        first_word = tf.ragged.range(words.row_lengths()).flat_values == 0
        return {"words": words.to_tensor(""),
                "tags": words.with_flat_values(self.iob2(tag_id, first_word)).to_tensor(""),
                "word_count": tf.cast(words.row_lengths(), tf.int32),
                "probability": words.with_flat_values(
                    tf.reduce_max(probabilities, axis=-1)).to_tensor(0.0)}

    def signatures(self) -> dict:
        """``predict_ids`` and, with a graph tokenizer, ``serving_default``."""
        functions = {"predict_ids": tf.function(self.predict_ids, input_signature=[
            ids_spec("input_ids"), ids_spec("token_type_ids"), ids_spec("attention_mask")])}
        if self.tokenizer is not None:
            functions["serving_default"] = tf.function(
                self.serving_default, input_signature=[strings_spec("sentence")])
        return {name: function.get_concrete_function() for name, function in functions.items()}
