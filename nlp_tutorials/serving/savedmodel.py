"""Serve a fine-tuned BERT: a SavedModel that answers raw text, for the sequence, the
multiple-choice and (with :mod:`nlp_tutorials.serving.tagging`) the token-tagging tasks.

``python -m nlp_tutorials.bert export-model --model-dir DIR --output OUT`` writes
``OUT/<version>/`` (TensorFlow Serving's layout). A sequence task's model has three signatures:

- ``serving_default``: the task's texts (string [batch] each): ``sentence1``, ``sentence2``
  for a sentence pair (MRPC), ``sentence`` for a task of single sentences (see
  ``Task.text_inputs``) -> ``probability`` (float32 [batch]: with two labels the second's,
  P(paraphrase) for MRPC; with more, the predicted label's) and ``label`` (int32 [batch], the
  arg-max), with ``label_name`` (string [batch]) when the labels have names of their own; a
  regression (STS-B) answers ``score`` (float32 [batch]) instead. The sentences are tokenized
  inside the graph (:class:`GraphWordPiece`), laid out and truncated as ``predict`` does.
- ``predict_ids``: ``input_ids``, ``token_type_ids``, ``attention_mask`` (int32
  [batch, step]) -> the same outputs. Plain TensorFlow ops only: any TensorFlow runtime serves it.
- ``encode``: ``sentence`` (string [batch]) -> ``embedding`` (float32 [batch, hidden]): the
  vector the classifier reads (pooled ``[CLS]`` or the mean of the token vectors).

A multiple-choice model (SWAG, CommonsenseQA) has ``serving_default``: ``context`` (string
[batch]) and ``endings`` (string [batch, choices]) -> ``probabilities`` (float32 [batch,
choices]), ``choice`` (int32 [batch]) and ``ending`` (string [batch], the chosen one's text);
and ``predict_ids`` on ids [batch, choices, step]. A token-tagging model (CoNLL-2003, a user's
``--format conll`` tags) is served by :mod:`nlp_tutorials.serving.tagging` (a sentence in, its
words and their tags out), a SQuAD model by :mod:`nlp_tutorials.serving.spans` (a question and
its context in, the answer's text and characters out).

The string signatures need tensorflow-text's ops (``FastWordpieceTokenizer``, ``RegexSplit``,
``NormalizeUTF8``) wherever the model is loaded: ``import tensorflow_text`` before
``tf.saved_model.load``. A model with the word-level tokenizer gets ``predict_ids`` only: its
number rule needs look-around, which the graph's regular expressions (RE2) lack.
"""
from pathlib import Path

import numpy as np
import tensorflow as tf

from nlp_tutorials.speed.compiled import compiled_in_buckets
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.model_files import SERVED_PRECISIONS, SERVED_VERSION
from nlp_tutorials.tasks.shapes import CHOICE, SEQUENCE, SHAPES
from nlp_tutorials.text.tokenization import CONTINUATION, MAX_WORD_CHARS, UNK, WordPieceTokenizer

# google-research/bert's ranges of CJK ideographs: each such character is a word of its own.
_CJK = (r"\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F}"
        r"\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}")
# BERT's punctuation: every ASCII non-letter, non-digit, non-space character, and Unicode P*.
_PUNCTUATION = r"[!-/:-@\[-`{-~]|\p{P}"
# UTF-8 needs at most 4 bytes a character: the byte limit of the graph's WordPiece never cuts
# in before the character limit, which is applied separately (see GraphWordPiece.ids).
_MAX_WORD_BYTES = 4 * MAX_WORD_CHARS


def import_tensorflow_text():
    """tensorflow_text, imported on demand so the rest of the package never needs it."""
    try:
        import tensorflow_text
    except ImportError:
        raise UserError("tensorflow_text is not installed; the exported model tokenizes in the "
                        "graph with its ops: pip install tensorflow-text") from None
    return tensorflow_text


def normalize(sentences, lower_case: bool):
    """BERT's text cleaning as HuggingFace's ``BertNormalizer`` does it, on string [batch].

    Control and format characters (Unicode C*, U+FFFD) go, other whitespace becomes a space,
    CJK ideographs get spaces around them; with ``lower_case`` accents are stripped (NFD, then
    the non-spacing marks dropped) and letters lower-cased; finally NFC, as the Python side.
    """
    text = import_tensorflow_text()
    sentences = tf.strings.regex_replace(sentences, r"[\t\n\r]", " ")
    sentences = tf.strings.regex_replace(sentences, r"[\p{C}\x{FFFD}]", "")
    sentences = tf.strings.regex_replace(sentences, r"[\p{Zs}\x{2028}\x{2029}]", " ")
    sentences = tf.strings.regex_replace(sentences, f"([{_CJK}])", r" \1 ")
    if lower_case:
        sentences = tf.strings.regex_replace(text.normalize_utf8(sentences, "NFD"), r"\p{Mn}", "")
        # HuggingFace lower-cases character by character, so a capital sigma is always σ; ICU
        # would write a word-final one as ς.
        sentences = tf.strings.lower(tf.strings.regex_replace(sentences, "Σ", "σ"),
                                     encoding="utf-8")
    return text.normalize_utf8(sentences, "NFC")


def split_words(normalized):
    """Words of normalized sentences: split on spaces, each punctuation mark a word of its own.

    string [batch] -> ragged string [batch, (words)].
    """
    text = import_tensorflow_text()
    return text.regex_split(normalized, delim_regex_pattern=rf"\s+|{_PUNCTUATION}",
                            keep_delim_regex_pattern=_PUNCTUATION)


class GraphWordPiece(tf.Module):
    """:class:`~nlp_tutorials.tokenization.WordPieceTokenizer` as TensorFlow ops.

    ``ids(sentences)``: string [batch] -> ragged int32 [batch, (tokens)], the ids
    ``WordPieceTokenizer.tokenize`` gives (tests/serving/test_serving.py checks every MRPC sentence).
    The vocabulary is compiled into the graph: the SavedModel needs no vocabulary file.
    """

    def __init__(self, tokenizer: WordPieceTokenizer):
        super().__init__()
        text = import_tensorflow_text()
        self.lower_case = tokenizer.lower_case
        self.wordpiece = text.FastWordpieceTokenizer(
            tokenizer.vocab, suffix_indicator=CONTINUATION, max_bytes_per_word=_MAX_WORD_BYTES,
            token_out_type=tf.int32, unknown_token=UNK, no_pretokenization=True,
            support_detokenization=False)

    def ids(self, sentences):
        words = split_words(normalize(sentences, self.lower_case))  # [batch, (words)]
        # A word over MAX_WORD_CHARS characters is one [UNK]: the word "[UNK]" is exactly that
        # token (every vocabulary holds it, and WordPiece takes the longest match).
        too_long = tf.strings.length(words, unit="UTF8_CHAR") > MAX_WORD_CHARS
        words = tf.where(too_long, UNK, words)
        return self.wordpiece.tokenize(words).merge_dims(1, 2)  # [batch, (tokens)]


def truncated_lengths(len_a, len_b, budget: int):
    """:func:`nlp_tutorials.tokenization.truncated_lengths` in TensorFlow ops: the lengths
    [batch] of a pair after longest-first truncation to ``budget`` tokens in total."""
    new_a = tf.minimum(len_a, tf.maximum(budget - len_b, (budget + 1) // 2))
    new_b = tf.minimum(len_b, budget - new_a)
    fits = len_a + len_b <= budget
    return tf.where(fits, len_a, new_a), tf.where(fits, len_b, new_b)


def keep_first(tokens, lengths):
    """The first ``lengths`` [batch] tokens of each row of ragged [batch, (tokens)]."""
    positions = tf.ragged.range(tokens.row_lengths())  # [batch, (tokens)]
    return tf.ragged.boolean_mask(tokens, positions < lengths[:, tf.newaxis])


def pack(segments, max_len: int, cls_id: int, sep_id: int, pad_id: int):
    """``[CLS] a [SEP]`` or ``[CLS] a [SEP] b [SEP]``, truncated as ``Tokenizer.pack`` does and
    padded to the batch's longest row (not to ``max_len``: the model's cost grows with it).

    ``segments``: one or two ragged int32 [batch, (tokens)]. Returns input_ids and
    token_type_ids, int32 [batch, step] with step <= ``max_len``.
    """
    lengths = [s.row_lengths() for s in segments]
    if len(segments) == 1:
        lengths = [tf.minimum(lengths[0], max_len - 2)]
    else:
        lengths = list(truncated_lengths(*lengths, max_len - 3))
    batch = tf.shape(lengths[0])[:1]
    cls = tf.RaggedTensor.from_tensor(tf.fill(tf.concat([batch, [1]], 0), cls_id))
    sep = tf.RaggedTensor.from_tensor(tf.fill(tf.concat([batch, [1]], 0), sep_id))
    ids, types = [cls], [tf.zeros_like(cls)]
    for segment_type, (tokens, length) in enumerate(zip(segments, lengths)):
        piece = tf.concat([keep_first(tokens, length), sep], axis=1)
        ids.append(piece)
        types.append(tf.ones_like(piece) * segment_type)
    ids, types = tf.concat(ids, axis=1), tf.concat(types, axis=1)  # [batch, (step)]
    return ids.to_tensor(default_value=pad_id), types.to_tensor()


TINY = 1e-30  # a probability's floor before its log, so that a 0 gives no -inf


def logits_of_label(label, probability, labels: int) -> np.ndarray:
    """Logits float32 [..., labels] whose softmax gives ``label`` int [...] its ``probability``
    [...] and shares the rest evenly among the other labels: their arg-max is ``label``."""
    probability = probability.astype(np.float64)
    others = np.log(np.maximum((1 - probability) / (labels - 1), TINY))  # [...]
    logits = np.repeat(others[..., None], labels, axis=-1)  # [..., labels]
    np.put_along_axis(logits, label[..., None].astype(np.int64),
                      np.log(np.maximum(probability, TINY))[..., None], axis=-1)
    return logits.astype(np.float32)


def ids_spec(name: str):
    return tf.TensorSpec([None, None], tf.int32, name=name)


def strings_spec(name: str):
    return tf.TensorSpec([None], tf.string, name=name)


@SEQUENCE.register_server
class SequenceModule(tf.Module):
    """What the SavedModel of a sequence task holds: the fine-tuned head, the graph tokenizer
    and the signatures.

    Inputs are laid out and truncated as ``predict`` lays them out (``Tokenizer.pack`` with
    the task's ``max_len``, saved with the model), so the answers are ``predict``'s. The raw
    texts are the task's :meth:`~nlp_tutorials.tasks.base.Task.text_inputs`: a sentence pair
    (``sentence1``, ``sentence2``) or one ``sentence``.
    """

    # Label names that say more than their index ("positive", not "1") are answered too.
    answers_label_names = True

    def __init__(self, head, tokenizer, task, strings: bool = True, xla: bool = False):
        """``strings``: tokenize in the graph (a WordPiece ``tokenizer`` only); ``xla``: the
        head's call compiled by XLA on inputs padded to a multiple of 32 positions
        (:mod:`~nlp_tutorials.speed.compiled`)."""
        super().__init__()
        self.head = head
        self.text_inputs = task.text_inputs()
        # predict's length: the task's (fine-tuning's), never more than the model's positions
        # (load_finetuned has fitted it already; a task built elsewhere may not be).
        self.max_len = min(task.max_len, head.backbone.config.max_position_embeddings)
        self.model_pad_id = head.backbone.config.pad_token_id
        self.logits = (compiled_in_buckets(self.head_logits, self.model_pad_id) if xla
                       else self.head_logits)
        self.special_ids = {"cls_id": tokenizer.cls_id, "sep_id": tokenizer.sep_id,
                            "pad_id": tokenizer.pad_id}
        self.tokenizer = (GraphWordPiece(tokenizer)
                          if strings and isinstance(tokenizer, WordPieceTokenizer) else None)
        named = tuple(task.labels) != tuple(str(i) for i in range(len(task.labels)))
        self.label_names = (tf.constant(task.labels)
                            if named and self.answers_label_names and task.num_labels > 1
                            else None)

    def answer(self, logits) -> dict:
        """The outputs for logits [batch, labels]: a regression's ``score`` float32 [batch]
        (its one output); else the ``label`` int32 [batch] (the arg-max) and a ``probability``
        float32 [batch], with two labels the second label's (P(paraphrase) for MRPC), as
        ``predict`` prints it, with more the predicted label's; and ``label_name`` string
        [batch] when the names are not just the labels' numbers."""
        logits = tf.cast(logits, tf.float32)
        if self.head.num_labels == 1:
            return {"score": logits[:, 0]}
        probabilities = tf.nn.softmax(logits)  # [batch, labels]
        label = tf.argmax(probabilities, axis=-1, output_type=tf.int32)  # [batch]
        if self.head.num_labels == 2:
            probability = probabilities[:, 1]
        else:
            probability = tf.gather(probabilities, label, axis=1, batch_dims=1)
        outputs = {"probability": probability, "label": label}
        if self.label_names is not None:
            outputs["label_name"] = tf.gather(self.label_names, label)
        return outputs

    def logits_from_answer(self, outputs: dict):
        """Logits that the task's predictions read as :meth:`answer` answered, from an exported
        model's numeric ``outputs`` (numpy): how the int8 check scores an ONNX model
        (:mod:`~nlp_tutorials.serving.quantization`). A regression's score; with two labels
        the log-probabilities; with more, the predicted label's log-probability and the rest
        shared among the others (the arg-max, what is scored, is the answer's label)."""
        if self.head.num_labels == 1:
            return outputs["score"][:, None]  # [batch, 1]
        if self.head.num_labels == 2:
            probability = outputs["probability"].astype(np.float64)  # [batch]
            both = np.stack([1 - probability, probability], axis=-1)  # [batch, 2]
            return np.log(np.clip(both, TINY, 1)).astype(np.float32)
        return logits_of_label(outputs["label"], outputs["probability"], self.head.num_labels)

    def head_logits(self, input_ids, token_type_ids):
        """The head's logits for encoded inputs, int32 [batch, step] each."""
        return self.head({"input_ids": input_ids, "token_type_ids": token_type_ids},
                         training=False)

    def classify(self, input_ids, token_type_ids):
        """Encoded inputs, int32 [batch, step] each -> :meth:`answer`."""
        return self.answer(self.logits(input_ids, token_type_ids))

    def predict_ids(self, input_ids, token_type_ids, attention_mask):
        """Encoded inputs, int32 [batch, step] each -> the answer (see :meth:`answer`)."""
        # The model reads padding from the [PAD] id: where the mask says padding, it is made so.
        input_ids = tf.where(attention_mask > 0, input_ids, self.model_pad_id)
        return self.classify(input_ids, token_type_ids)

    def serving_default(self, *texts):
        """Raw texts (a pair, or one sentence), string [batch] each -> the answer."""
        ids, types = pack([self.tokenizer.ids(t) for t in texts], self.max_len,
                          **self.special_ids)
        return self.classify(ids, types)

    def encode(self, sentence):
        """Raw sentences, string [batch] -> the classifier's input vector [batch, hidden]."""
        ids, types = pack([self.tokenizer.ids(sentence)], self.max_len, **self.special_ids)
        summary = self.head.summary({"input_ids": ids, "token_type_ids": types}, training=False)
        return {"embedding": tf.cast(summary, tf.float32)}  # [batch, hidden]

    def signatures(self) -> dict:
        """The concrete functions to export, by signature name; without a graph tokenizer
        (word-level vocabulary) ``predict_ids`` only."""
        functions = {"predict_ids": tf.function(self.predict_ids, input_signature=[
            ids_spec("input_ids"), ids_spec("token_type_ids"), ids_spec("attention_mask")])}
        if self.tokenizer is not None:
            functions["serving_default"] = tf.function(self.serving_default, input_signature=[
                strings_spec(name) for name in self.text_inputs])
            functions["encode"] = tf.function(self.encode,
                                              input_signature=[strings_spec("sentence")])
        return {name: function.get_concrete_function() for name, function in functions.items()}


@CHOICE.register_server
class ChoiceModule(SequenceModule):
    """The SavedModel of a multiple-choice task: a context and its endings in, one probability
    per ending and the chosen one out.

    Each (context, ending) pair is laid out ``[CLS] context [SEP] ending [SEP]`` and truncated
    longest-first, as BERT's multiple-choice models (and ``predict``) encode them; the head
    scores every pair and the scores of one context compete in a softmax.
    """

    answers_label_names = False  # its answer is not one of the task's labels

    def answer(self, logits) -> dict:
        """Logits [batch, choices] -> ``probabilities`` float32 [batch, choices] and
        ``choice`` int32 [batch], the index of the most probable ending."""
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32))
        return {"probabilities": probabilities,
                "choice": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}

    def logits_from_answer(self, outputs: dict) -> np.ndarray:
        """The endings' log-probabilities [batch, choices]: their softmax is the answer's."""
        return np.log(np.clip(outputs["probabilities"].astype(np.float64), TINY, 1)
                      ).astype(np.float32)

    def serving_default(self, context, endings):
        """``context`` string [batch] and ``endings`` string [batch, choices] -> the answer, and
        ``ending`` string [batch], the chosen ending's text."""
        choices = tf.shape(endings)[1]
        rows = tf.repeat(tf.range(tf.shape(context)[0]), choices)  # [batch * choices]
        contexts = tf.gather(self.tokenizer.ids(context), rows)  # [batch * choices, (tokens)]
        ids, types = pack([contexts, self.tokenizer.ids(tf.reshape(endings, [-1]))],
                          self.max_len, **self.special_ids)  # [batch * choices, step]
        shape = tf.stack([-1, choices, tf.shape(ids)[1]])
        outputs = self.classify(tf.reshape(ids, shape), tf.reshape(types, shape))
        outputs["ending"] = tf.gather(endings, outputs["choice"], axis=1, batch_dims=1)
        return outputs

    def signatures(self) -> dict:
        """``predict_ids`` (ids [batch, choices, step]) and, with a graph tokenizer,
        ``serving_default``."""
        ids = [tf.TensorSpec([None, None, None], tf.int32, name=name)
               for name in ("input_ids", "token_type_ids", "attention_mask")]
        functions = {"predict_ids": tf.function(self.predict_ids, input_signature=ids)}
        if self.tokenizer is not None:
            functions["serving_default"] = tf.function(self.serving_default, input_signature=[
                strings_spec("context"), tf.TensorSpec([None, None], tf.string, name="endings")])
        return {name: function.get_concrete_function() for name, function in functions.items()}


WORD_LEVEL_NOTE = ("note: word-level tokenizer: exported predict_ids only (its number rule needs "
                   "regex look-around, which the graph's RE2 lacks); tokenize with the "
                   "package's WordTokenizer, or fine-tune a WordPiece model for raw strings")


def serving_module(model_dir, strings: bool = True, xla: bool = False,
                   precision: str = SERVED_PRECISIONS[0]):
    """(serving module, task, tokenizer) of the fine-tuned model in ``model_dir``; a shape
    without a serving module is one line. ``strings``: with the graph tokenizer's signatures;
    ``xla``: the head compiled by XLA (sequence and multiple-choice models); ``precision``:
    the weights' and the products' (:mod:`~nlp_tutorials.serving.precision`)."""
    from nlp_tutorials.serving.precision import in_precision
    from nlp_tutorials.finetuned.folders import load_finetuned

    head, tokenizer, task = load_finetuned(model_dir)
    head = in_precision(head, precision)
    if task.shape.server is None:
        served = sorted(name for name, shape in SHAPES.items() if shape.server is not None)
        raise UserError(f"{model_dir}: a {task.title} model, of shape {task.shape.name!r}; "
                        f"export-model serves the shapes {', '.join(served[:-1])} and "
                        f"{served[-1]}")
    options = {"strings": strings}
    if xla:
        if not task.shape.compiles_with_xla:
            compiled = [name for name, shape in SHAPES.items() if shape.compiles_with_xla]
            raise UserError(f"--xla: {model_dir} is a {task.title} model, of shape "
                            f"{task.shape.name!r}; --xla compiles the shapes "
                            f"{' and '.join(compiled)} only")
        options["xla"] = True
    return task.shape.server(head, tokenizer, task, **options), task, tokenizer


def export_model(model_dir, output, version: int = SERVED_VERSION, overwrite: bool = False,
                 ids_only: bool = False, printer=print, xla: bool = False,
                 precision: str = SERVED_PRECISIONS[0]) -> Path:
    """Write the fine-tuned model in ``model_dir`` as a SavedModel in ``output/<version>``
    (TensorFlow Serving's layout); with ``ids_only``, the ``predict_ids`` signature only, so
    the model holds no tensorflow-text op and loads in any TensorFlow runtime; with ``xla``
    (sequence and multiple-choice models), the model's call in ``predict_ids`` and
    ``serving_default`` is compiled by XLA on inputs padded to a multiple of 32 positions;
    ``precision`` "bfloat16" stores and multiplies the weights in bfloat16 (the outputs stay
    float32).

    The folder is written beside its target under a hidden name and renamed into place, so
    TensorFlow Serving (which watches ``output`` for numbered folders) never sees half a model,
    and a failed export leaves the old version untouched. Returns the version folder.
    """
    from nlp_tutorials.system.files import refuse_existing, save_folder_atomic

    target = Path(output) / str(version)
    refuse_existing(target, overwrite, "--output")
    from nlp_tutorials.serving.precision import SLOW_HERE_NOTE
    from nlp_tutorials.system import hardware

    module, _, _ = serving_module(model_dir, strings=not ids_only, xla=xla, precision=precision)
    signatures = module.signatures()
    save_folder_atomic(target, lambda tmp: tf.saved_model.save(module, str(tmp),
                                                               signatures=signatures))
    if module.tokenizer is None and not ids_only:
        printer(WORD_LEVEL_NOTE)
    if precision == "bfloat16" and hardware.has_bfloat16_instructions() is False:
        printer(SLOW_HERE_NOTE)
    printer(f"SavedModel written to {target} (signatures: {', '.join(sorted(signatures))})")
    return target
