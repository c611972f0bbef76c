"""Serving: a fine-tuned model exported as a TensorFlow SavedModel.

:mod:`~nlp_tutorials.serving.savedmodel` holds the graph tokenizer, the sequence and choice
modules and ``export_model``; token tagging (:mod:`~nlp_tutorials.serving.tagging`) and answer
spans (:mod:`~nlp_tutorials.serving.spans`) have modules of their own. Each module registers
itself for the task shape it serves (``@SEQUENCE.register_server``, see
:mod:`nlp_tutorials.tasks.shapes`), and ``export_model`` serves a task with its shape's.
Importing the package imports all three, then checks that every shape said to be served has
its module.
"""
import nlp_tutorials.serving.savedmodel
import nlp_tutorials.serving.spans
import nlp_tutorials.serving.tagging  # noqa: F401 (each registers its module on import)
from nlp_tutorials.tasks.shapes import SHAPES, check_served

check_served(SHAPES.values())
