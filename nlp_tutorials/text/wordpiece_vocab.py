"""Learning a WordPiece vocabulary from word counts, deterministically.

:meth:`~nlp_tutorials.text.tokenization.WordPieceTokenizer.train` counts the words of its text
and hands them here with the tokenizer's special tokens and continuation prefix (``##``), which
that module declares; the vocabulary comes back as a list of tokens, in id order.
"""
import collections
import heapq

from nlp_tutorials.system.errors import UserError


def learn_wordpiece_vocab(word_counts: dict, vocab_size: int, special_tokens,
                          continuation: str) -> list[str]:
    """A WordPiece vocabulary from word counts: ``special_tokens``, characters, then the
    commonest merges.

    Each word starts as its characters, all but the first marked with ``continuation``, ``##``
    in BERT ("cat" -> c ##a ##t).
    Then, as byte-pair encoding, the adjacent pair seen most often over all words (ties: the
    alphabetically first pair) is merged into one new token (c ##a -> ca, ##a ##t -> ##at),
    until the vocabulary holds ``vocab_size`` tokens or every word is one token.

    Written here rather than using ``tokenizers``' WordPieceTrainer because that one breaks
    ties in hash-map order: the same MRPC text gave different vocabularies from run to run,
    and a seed must give the same run.
    """
    symbols = [[word[0]] + [continuation + c for c in word[1:]] for word in word_counts]
    counts = list(word_counts.values())
    alphabet = sorted({s for word in symbols for s in word})
    vocab = list(special_tokens) + alphabet
    if not isinstance(vocab_size, int) or vocab_size < len(vocab):
        raise UserError(f"vocab_size={vocab_size!r} is too small: the text needs at least "
                        f"{len(vocab)} tokens ({len(special_tokens)} special tokens and "
                        f"{len(alphabet)} characters)")
    pair_counts, pair_words = collections.Counter(), collections.defaultdict(set)
    for w, word in enumerate(symbols):
        _count_pairs(word, counts[w], w, pair_counts, pair_words)
    heap = [(-n, pair) for pair, n in pair_counts.items()]
    heapq.heapify(heap)
    known = set(vocab)
    while heap and len(vocab) < vocab_size:
        negative_count, pair = heapq.heappop(heap)
        if pair_counts[pair] != -negative_count:
            continue  # a stale entry: the pair's count changed since it was pushed
        merged = pair[0] + pair[1].removeprefix(continuation)
        if merged not in known:  # "abc" may come from ab + ##c and from a + ##bc
            vocab.append(merged)
            known.add(merged)
        changed = set()
        for w in pair_words.pop(pair):
            new_word = _merge(symbols[w], pair, merged)
            if len(new_word) == len(symbols[w]):
                continue  # an earlier merge already took the pair out of this word
            changed.update(_count_pairs(symbols[w], -counts[w], w, pair_counts, pair_words))
            symbols[w] = new_word
            changed.update(_count_pairs(new_word, counts[w], w, pair_counts, pair_words))
        # Each changed count gets a fresh entry; the old ones are skipped as stale.
        changed.discard(pair)
        for other in changed:
            if pair_counts[other] > 0:
                heapq.heappush(heap, (-pair_counts[other], other))
        del pair_counts[pair]
    return vocab


def _count_pairs(word, count, w, pair_counts, pair_words):
    """Add ``count`` (negative: remove) for each adjacent pair of ``word`` (index ``w``).

    Returns the pairs touched.
    """
    pairs = list(zip(word, word[1:]))
    for pair in pairs:
        pair_counts[pair] += count
        if count > 0:
            pair_words[pair].add(w)
    return pairs


def _merge(word, pair, merged):
    """``word``'s symbols with every occurrence of ``pair`` replaced by ``merged``."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(merged)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out
