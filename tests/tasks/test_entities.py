"""Entities read from IOB1 and IOB2 tags and scored as conlleval scores them, checked against
seqeval (its default mode is conlleval's reading; its strict IOB2 mode agrees on proper IOB2 tags)
and against cases worked by hand."""
import warnings

import pytest
from hypothesis import given, settings, strategies as st

from nlp_tutorials.tasks.entities import (count_entities, entity_spans, is_entity_tag, score,
                                          to_iob2)

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-TIME-RANGE", "I-TIME-RANGE"]


def seqeval_scores(gold, predicted, **mode) -> dict:
    """Micro and per-type scores as seqeval computes them (0 where it warns of a 0 division)."""
    from seqeval.metrics import accuracy_score, classification_report

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = classification_report(gold, predicted, output_dict=True, **mode)
    scores = {"f1": report["micro avg"]["f1-score"], "precision": report["micro avg"]["precision"],
              "recall": report["micro avg"]["recall"],
              "accuracy": accuracy_score(gold, predicted)}
    for entity_type, row in report.items():
        if not entity_type.endswith(" avg"):
            scores.update({f"f1_{entity_type}": row["f1-score"],
                           f"precision_{entity_type}": row["precision"],
                           f"recall_{entity_type}": row["recall"]})
    return scores


def seqeval_spans(tags) -> list:
    """seqeval's entities (type, first, last) as (type, first, one past the last)."""
    from seqeval.metrics.sequence_labeling import get_entities

    return [(entity_type, start, end + 1) for entity_type, start, end in get_entities(list(tags))]


# Sentences of tags, IOB1 or IOB2 or neither (stray I- tags), and a prediction of each's length.
tag_lists = st.lists(st.sampled_from(TAGS), max_size=12)
gold_and_predicted = st.lists(st.lists(st.sampled_from(TAGS), min_size=1, max_size=12),
                              min_size=1, max_size=6).flatmap(
    lambda gold: st.tuples(st.just(gold), st.tuples(
        *[st.lists(st.sampled_from(TAGS), min_size=len(tags), max_size=len(tags))
          for tags in gold])))


def test_iob1_entities_start_at_i_and_b_only_splits_two_of_one_type():
    # "Paris Berlin | said | Ada Lovelace" in CoNLL-2003's IOB1.
    tags = ["I-LOC", "B-LOC", "O", "I-PER", "I-PER"]
    assert entity_spans(tags) == [("LOC", 0, 1), ("LOC", 1, 2), ("PER", 3, 5)]
    assert to_iob2(tags) == ["B-LOC", "B-LOC", "O", "B-PER", "I-PER"]


def test_a_change_of_type_or_a_stray_i_starts_an_entity_as_conlleval_reads_it():
    assert entity_spans(["B-PER", "I-LOC", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 3)]
    assert entity_spans(["O", "I-ORG", "I-ORG", "B-ORG"]) == [("ORG", 1, 3), ("ORG", 3, 4)]
    assert entity_spans(["B-TIME-RANGE", "I-TIME-RANGE"]) == [("TIME-RANGE", 0, 2)]
    assert entity_spans([]) == [] and entity_spans(["O", "O"]) == []


def test_entity_tags_are_o_or_b_or_i_with_a_type():
    assert all(map(is_entity_tag, ["O", "B-PER", "I-LOC", "I-TIME-RANGE"]))
    assert not any(map(is_entity_tag, ["o", "PER", "B-", "X-PER", "BI-PER", "B_PER", "-PER"]))


def test_scores_of_a_hand_worked_case():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-LOC", "O"]]
    # The person and the second place found, the first place missed, a person made up.
    predicted = [["B-PER", "I-PER", "O", "O"], ["B-LOC", "B-PER"]]
    # Gold: PER(0,0-2) LOC(0,3-4) LOC(1,0-1); predicted: PER(0,0-2) LOC(1,0-1) PER(1,1-2).
    scores = score(gold, predicted)
    assert scores["precision"] == pytest.approx(2 / 3)
    assert scores["recall"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx(2 / 3)
    assert scores["accuracy"] == pytest.approx(4 / 6)
    assert (scores["precision_PER"], scores["recall_PER"]) == (pytest.approx(1 / 2), 1.0)
    assert scores["f1_PER"] == pytest.approx(2 * 0.5 / 1.5)
    assert (scores["precision_LOC"], scores["recall_LOC"]) == (1.0, pytest.approx(1 / 2))
    assert count_entities(gold) == {"LOC": 2, "PER": 1}


def test_nothing_predicted_scores_zero_as_conlleval_does():
    scores = score([["B-PER"]], [["O"]])
    assert (scores["f1"], scores["precision"], scores["recall"]) == (0.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
        score([["O", "O"]], [["O"]])


@settings(max_examples=200, deadline=None)
@given(tag_lists)
def test_entities_are_seqeval_s_and_survive_conversion_to_iob2(tags):
    assert entity_spans(tags) == seqeval_spans(tags)
    iob2 = to_iob2(tags)
    assert entity_spans(iob2) == entity_spans(tags)
    assert to_iob2(iob2) == iob2
    # Proper IOB2: every entity opens with B-, and every B- opens an entity.
    starts = [start for _, start, _ in entity_spans(iob2)]
    assert [i for i, tag in enumerate(iob2) if tag.startswith("B-")] == starts


@settings(max_examples=100, deadline=None)
@given(gold_and_predicted)
def test_scores_match_seqeval_on_any_tags(gold_predicted):
    gold, predicted = gold_predicted
    predicted = [list(tags) for tags in predicted]
    assert score(gold, predicted) == pytest.approx(seqeval_scores(gold, predicted))


@settings(max_examples=100, deadline=None)
@given(gold_and_predicted)
def test_scores_match_seqeval_s_strict_iob2_mode_on_iob2_tags(gold_predicted):
    from seqeval.scheme import IOB2

    gold = [to_iob2(tags) for tags in gold_predicted[0]]
    predicted = [to_iob2(tags) for tags in gold_predicted[1]]
    assert score(gold, predicted) == pytest.approx(
        seqeval_scores(gold, predicted, mode="strict", scheme=IOB2))
