"""Serving: a fine-tuned model exported as a TensorFlow SavedModel.

:mod:`~nlp_tutorials.serving.savedmodel` holds the graph tokenizer, the sequence and choice
modules and ``export_model``; a task shape with a module of its own (token tagging:
:mod:`~nlp_tutorials.serving.tagging`; answer spans: :mod:`~nlp_tutorials.serving.spans`)
imports from it and is registered in ``SERVING_MODULES`` here, once all are loaded.
savedmodel.py never imports those modules, so there is no import cycle, and any import of the
package sees every module registered.
"""
from nlp_tutorials.serving import savedmodel, spans, tagging

savedmodel.SERVING_MODULES["token"] = tagging.TaggingModule
savedmodel.SERVING_MODULES["span"] = spans.SpanModule
