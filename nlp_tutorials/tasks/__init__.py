"""Downstream tasks: each reads its files into examples, encodes them, names its head and
scores predictions. MRPC is one task; the dates task trains the encoder-decoder."""
