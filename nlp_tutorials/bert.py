"""``python -m nlp_tutorials.bert``: pre-train, fine-tune, inspect and serve BERT.

Run as a program, this hands over to the command line before TensorFlow is imported, so
``--help`` and argument errors answer at once. Imported, it gives the model:
``from nlp_tutorials.bert import BERT`` (the lesson itself is :mod:`nlp_tutorials.models.bert`).
"""
if __name__ == "__main__":
    from nlp_tutorials.cli import main

    raise SystemExit(main("bert"))

from nlp_tutorials.models.bert import BERT  # noqa: E402

__all__ = ["BERT"]
