"""``python -m nlp_tutorials.gpt``: train GPT and continue a prompt with it.

Run as a program, this hands over to the command line before TensorFlow is imported, so
``--help`` and argument errors answer at once. Imported, it gives the model:
``from nlp_tutorials.gpt import GPT`` (the lesson itself is :mod:`nlp_tutorials.models.gpt`).
"""
if __name__ == "__main__":
    from nlp_tutorials.cli import main

    raise SystemExit(main("gpt"))

from nlp_tutorials.models.gpt import GPT  # noqa: E402

__all__ = ["GPT"]
