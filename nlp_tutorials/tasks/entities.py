"""Named entities in tag sequences, and their entity-level scores as CoNLL's ``conlleval`` counts.

A tagger labels each word ``O`` (outside every entity) or ``PREFIX-TYPE``: ``B-PER``, ``I-LOC``.
Two conventions for the prefix are in use, and both describe the same entities:

- IOB1 (CoNLL-2003's files): ``I-`` inside an entity *and* at its start; ``B-`` only starts an
  entity that directly follows one of the same type ("Paris I-LOC Berlin B-LOC").
- IOB2 (most copies elsewhere, and what taggers here predict): ``B-`` starts every entity,
  ``I-`` continues it.

``conlleval`` (and ``seqeval``'s default mode, which copies it) reads either: an entity starts
at a ``B-`` tag, at an ``I-`` tag after ``O``, or at any tag whose type differs from the tag
before it; it ends before ``O``, before a ``B-``, or before a change of type. So a stray ``I-``
(after ``O`` or after another type) starts an entity rather than being an error. Scores are
micro-averaged over entities: an entity counts as found only when its type, its first word and
its last word all match.
"""
OUTSIDE = "O"
BEGIN, INSIDE = "B", "I"


def split_tag(tag: str) -> tuple[str, str]:
    """(prefix, type) of a tag: ``"B-PER"`` -> ``("B", "PER")``; ``"O"`` -> ``("O", "")``.
    Only the first ``-`` separates: ``"I-TIME-RANGE"`` has the type ``TIME-RANGE``."""
    if tag == OUTSIDE:
        return OUTSIDE, ""
    prefix, _, entity_type = tag.partition("-")
    return prefix, entity_type


def is_entity_tag(tag: str) -> bool:
    """Whether ``tag`` is ``O`` or ``B-TYPE`` / ``I-TYPE`` with a non-empty type."""
    prefix, entity_type = split_tag(tag)
    return tag == OUTSIDE or (prefix in (BEGIN, INSIDE) and tag[1:2] == "-" and entity_type != "")


def entity_spans(tags) -> list[tuple[str, int, int]]:
    """The entities of one sentence's IOB1 or IOB2 tags, as conlleval finds them.

    Returns ``(type, start, stop)`` triples in order, ``start`` the first word's index and
    ``stop`` one past the last: ``["B-PER", "I-PER", "O", "I-LOC"]`` ->
    ``[("PER", 0, 2), ("LOC", 3, 4)]``.
    """
    spans = []
    start, current = None, ""  # the open entity's first word and type (None: no entity open)
    for index, tag in enumerate(tags):
        prefix, entity_type = split_tag(tag)
        continues = prefix == INSIDE and start is not None and entity_type == current
        if start is not None and not continues:
            spans.append((current, start, index))
            start = None
        if prefix != OUTSIDE and not continues:
            start, current = index, entity_type
    if start is not None:
        spans.append((current, start, len(tags)))
    return spans


def to_iob2(tags) -> list[str]:
    """The same entities tagged IOB2: every entity's first tag becomes ``B-``.

    IOB1 tags (or a tagger's stray ``I-`` after ``O``) become IOB2, and IOB2 tags come back
    unchanged, so ``entity_spans(to_iob2(tags)) == entity_spans(tags)`` always.
    """
    iob2 = [OUTSIDE] * len(tags)
    for entity_type, start, stop in entity_spans(tags):
        iob2[start] = f"{BEGIN}-{entity_type}"
        iob2[start + 1:stop] = [f"{INSIDE}-{entity_type}"] * (stop - start - 1)
    return iob2


def count_entities(sentences) -> dict[str, int]:
    """``{type: entities}`` over sentences' tags, types sorted by name."""
    counts = {}
    for tags in sentences:
        for entity_type, _, _ in entity_spans(tags):
            counts[entity_type] = counts.get(entity_type, 0) + 1
    return dict(sorted(counts.items()))


def _precision_recall_f1(found: int, predicted: int, gold: int) -> tuple[float, float, float]:
    """As conlleval: 0 where a denominator is 0."""
    precision = found / predicted if predicted else 0.0
    recall = found / gold if gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def score(gold_sentences, predicted_sentences) -> dict[str, float]:
    """Entity-level precision, recall and F1 of predicted tags against gold ones, as fractions.

    Args:
        gold_sentences, predicted_sentences: one tag list per sentence, the same lengths
            (IOB1 or IOB2, even mixed: entities are read as :func:`entity_spans` reads them).
    Returns:
        ``f1``, ``precision``, ``recall`` micro-averaged over every entity of every sentence;
        ``f1_TYPE``, ``precision_TYPE``, ``recall_TYPE`` for each type in gold or predicted; and
        ``accuracy``, the fraction of words whose tag is right (``O`` included, as conlleval's
        first line reports it).
    """
    gold, predicted = set(), set()
    words = right = 0
    for sentence, (gold_tags, predicted_tags) in enumerate(zip(gold_sentences,
                                                               predicted_sentences,
                                                               strict=True)):
        if len(gold_tags) != len(predicted_tags):
            raise ValueError(f"sentence {sentence}: {len(gold_tags)} gold tags but "
                             f"{len(predicted_tags)} predicted")
        gold.update((sentence, *span) for span in entity_spans(gold_tags))
        predicted.update((sentence, *span) for span in entity_spans(predicted_tags))
        words += len(gold_tags)
        right += sum(g == p for g, p in zip(gold_tags, predicted_tags))
    found = gold & predicted
    precision, recall, f1 = _precision_recall_f1(len(found), len(predicted), len(gold))
    scores = {"f1": f1, "precision": precision, "recall": recall,
              "accuracy": right / words if words else 0.0}
    for entity_type in sorted({span[1] for span in gold | predicted}):
        of_type = [sum(span[1] == entity_type for span in spans)
                   for spans in (found, predicted, gold)]
        precision, recall, f1 = _precision_recall_f1(*of_type)
        scores.update({f"f1_{entity_type}": f1, f"precision_{entity_type}": precision,
                       f"recall_{entity_type}": recall})
    return scores
