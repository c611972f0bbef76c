"""The task heads fine-tuning adds, where they have always been imported from:
``from nlp_tutorials.heads import SequenceClassifier`` (defined in
:mod:`nlp_tutorials.models.task_heads`)."""
from nlp_tutorials.models.task_heads import (
    Head,
    MultipleChoice,
    SequenceClassifier,
    SpanExtractor,
    TokenClassifier,
)

__all__ = ["Head", "MultipleChoice", "SequenceClassifier", "SpanExtractor", "TokenClassifier"]
