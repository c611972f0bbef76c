"""Pre-training text behind one interface (:mod:`nlp_tutorials.sources.source`): MRPC's
sentence pairs, a streamed text corpus, and TFRecord shards."""
