"""Text processing apart from any dataset: tokenizers, pair packing, masked-LM masking and
next-sentence pairing. Numpy only (TensorFlow where a function says so)."""
