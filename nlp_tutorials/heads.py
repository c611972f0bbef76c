"""The fine-tuning heads, where they have always been imported from:
``from nlp_tutorials.heads import SequenceClassifier`` (defined in :mod:`nlp_tutorials.models.heads`)."""
from nlp_tutorials.models.heads import (
    Head,
    MultipleChoice,
    SequenceClassifier,
    SpanExtractor,
    TokenClassifier,
)

__all__ = ["Head", "MultipleChoice", "SequenceClassifier", "SpanExtractor", "TokenClassifier"]
