"""``python -m nlp_tutorials.transformer``: the encoder-decoder Transformer on the date task.

Run as a program, this hands over to the command line before TensorFlow is imported, so
``--help`` and argument errors answer at once. Imported, it gives the model and its layers:
``from nlp_tutorials.transformer import Transformer`` (the lesson itself is
:mod:`nlp_tutorials.models.transformer`).
"""
if __name__ == "__main__":
    from nlp_tutorials.cli import main

    raise SystemExit(main("transformer"))

from nlp_tutorials.models.layers import (  # noqa: E402
    Decoder,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    FeedForward,
    MultiHeadAttention,
)
from nlp_tutorials.models.transformer import Transformer  # noqa: E402

__all__ = ["Decoder", "DecoderLayer", "Embeddings", "Encoder", "EncoderLayer", "FeedForward",
           "MultiHeadAttention", "Transformer"]
