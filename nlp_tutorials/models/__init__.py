"""The lesson: the Transformer family, read top to bottom.

``masks`` (padding and causal masks) → ``layers`` (attention, feed-forward, the encoder and
decoder layers and stacks) → ``transformer`` (the encoder-decoder ``Transformer``, the family's
base) → ``gpt`` (``GPT(Transformer)``: one causal stack) → ``bert`` (``BERT(GPT)``: ``mask()``
and ``step()`` only) → ``task_heads`` (fine-tuning heads that wrap a backbone). Beside them:
``config`` (the model's JSON config), ``trainable`` (the ``step()`` protocol), ``losses``,
``decoding`` (generation with a key/value cache), and the bases that keep what is not the lesson
out of the lesson files: ``huggingface`` (``encode``, ``prune_heads``, ``from_pretrained``,
``save_pretrained``, the last two reading and writing through ``pretrained``) and ``pruning``
(``with_heads_pruned``). The queries and keys the explorer draws are computed in
``analysis/attention_capture.py``. Imports run only downward, to ``speed``, ``text`` and
``system``.
"""
