"""Serving: a fine-tuned model exported as a TensorFlow SavedModel.

:mod:`~nlp_tutorials.serving.savedmodel` holds the graph tokenizer, the sequence and choice
modules and ``export_model``; token tagging (:mod:`~nlp_tutorials.serving.tagging`) and answer
spans (:mod:`~nlp_tutorials.serving.spans`) have modules of their own. Each task shape names
the module serving it (:mod:`nlp_tutorials.tasks.shapes`), and ``export_model`` loads it.
"""
