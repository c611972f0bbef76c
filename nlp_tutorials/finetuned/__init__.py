"""A fine-tuned model: its folder and its answers.

What ``finetune`` leaves behind and every later tool reads: the model folder's files, written
and loaded back with their checks (:mod:`~nlp_tutorials.finetuned.folders`); the head's logits
on encoded examples, batch by batch (:mod:`~nlp_tutorials.finetuned.batching`,
:mod:`~nlp_tutorials.finetuned.inference`); and the two commands that only read a model,
``predict`` (:mod:`~nlp_tutorials.finetuned.predicting`) and ``evaluate``
(:mod:`~nlp_tutorials.finetuned.evaluation`). It sits below ``training/``, so serving and
analysis load a model without reaching into how it was trained.
"""
