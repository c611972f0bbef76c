"""The model's configuration, where it has always been imported from:
``from nlp_tutorials.config import ModelConfig`` (defined in :mod:`nlp_tutorials.models.config`)."""
from nlp_tutorials.models.config import BertConfig, ModelConfig

__all__ = ["BertConfig", "ModelConfig"]
