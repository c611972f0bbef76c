"""Packing sentence pairs for BERT: ``[CLS] a [SEP] b [SEP]`` ids, segments and padding.

Numpy only; :func:`trim_padding` runs inside a ``tf.data`` pipeline and imports TensorFlow there.
"""

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import pad_ragged


def pair_tokens(tokenizer, pairs) -> list[tuple[list[str], list[str]]]:
    """(s1 tokens, s2 tokens) of every pair."""
    return [(tokenizer.tokenize(p.s1), tokenizer.tokenize(p.s2)) for p in pairs]


def longest_pair_length(tokenizer, pairs) -> int:
    """Tokens in the longest ``[CLS] s1 [SEP] s2 [SEP]``: a max_len that truncates nothing."""
    if not pairs:
        raise UserError("no sentence pairs to measure")
    return longest_tokenized_pair(pair_tokens(tokenizer, pairs))


def longest_tokenized_pair(tokens) -> int:
    return max(len(a) + len(b) for a, b in tokens) + 3


def encode_pair(tokenizer, s1_tokens, s2_tokens, max_len: int):
    """``(input_ids, token_type_ids)`` lists of length ``max_len``.

    Layout ``[CLS] s1 [SEP] s2 [SEP]`` with segment 0 for ``[CLS] s1 [SEP]`` and 1 for
    ``s2 [SEP]``, or ``[CLS] s1 [SEP]`` when ``s2_tokens`` is None; padded with the ``[PAD]``
    id, segment 0. A pair that does not fit is truncated longest-first as google-research/bert:
    drop the last token of the longer sentence (the second on a tie) until it fits.
    """
    return tokenizer.encode_tokens(s1_tokens, s2_tokens, max_len)


def encode_pairs(tokenizer, pairs, max_len: int) -> dict:
    """Encode MRPC pairs for classification, as :func:`encode_pair` does one.

    Returns numpy int32 arrays: ``input_ids`` [n, max_len], ``token_type_ids`` [n, max_len],
    ``labels`` [n].
    """
    ids_a, len_a, ids_b, len_b = id_matrices(tokenizer, pair_tokens(tokenizer, pairs))
    input_ids, token_type_ids = tokenizer.pack(ids_a, len_a, ids_b, len_b, max_len)
    labels = np.array([p.label for p in pairs], dtype=np.int32)
    return {"input_ids": input_ids, "token_type_ids": token_type_ids, "labels": labels}


def id_matrices(tokenizer, tokens):
    """Zero-padded ids and lengths of the first and second sentences: ids_a, len_a, ids_b, len_b."""
    ids_a, len_a = pad_ragged([tokenizer.convert_tokens_to_ids(a) for a, _ in tokens])
    ids_b, len_b = pad_ragged([tokenizer.convert_tokens_to_ids(b) for _, b in tokens])
    return ids_a, len_a, ids_b, len_b


def trim_padding(batch, multiple: int = 1, pad_id: int = 0,
                 per_token=("input_ids", "token_type_ids")):
    """Cut the columns that are padding in every row: [..., max_len] -> [..., length].

    ``length`` is the longest row rounded up to a multiple of ``multiple`` (at most max_len);
    a row's length counts its ids that are not ``pad_id`` (the tokenizer's, or the model
    config's ``pad_token_id``). MRPC pairs average 49 word tokens against a longest of 100, so
    most of a fixed-length batch is padding; attention and dense layers cost in proportion to
    length. Meant for ``tf.data.Dataset.map``; the arrays named in ``per_token`` are cut along
    their last axis (so [batch, choices, max_len] works too), the rest kept.
    """
    import tensorflow as tf

    ids = batch["input_ids"]
    lengths = tf.reduce_sum(tf.cast(ids != pad_id, tf.int32), axis=-1)  # [batch] or [batch, k]
    longest = tf.minimum(-(-tf.reduce_max(lengths) // multiple) * multiple, tf.shape(ids)[-1])
    return {name: value[..., :longest] if name in per_token else value
            for name, value in batch.items()}
