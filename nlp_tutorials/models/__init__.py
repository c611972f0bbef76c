"""The lesson: the Transformer family, read top to bottom.

``masks`` (padding and causal masks) → ``transformer`` (attention, feed-forward, the layers and
the encoder-decoder ``Transformer``) → ``gpt`` (``GPT(Transformer)``: one causal stack) →
``bert`` (``BERT(GPT)``: ``mask()`` and ``step()`` only) → ``heads`` (fine-tuning heads that wrap
a backbone). Beside them: ``config`` (the model's JSON config), ``trainable`` (the ``step()``
protocol), ``losses``, ``pruning``, ``decoding`` (generation with a key/value cache) and
``pretrained`` (HuggingFace and Google checkpoints). Imports run only downward, to ``speed``,
``text`` and ``system``.
"""
