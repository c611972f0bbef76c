"""nlp_tutorials: a readable TensorFlow/Keras Transformer family (Transformer, GPT, BERT).

Importing the package is cheap: TensorFlow is imported only by the modules that build models
(``transformer``, ``gpt``, ``bert``, ``training``), so command-line help answers at once.
"""

__version__ = "0.1.0"
