"""Pre-training sources: MRPC's sentence pairs, a streamed text corpus, and TFRecord shards."""
