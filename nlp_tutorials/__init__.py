"""nlp_tutorials: a readable TensorFlow/Keras Transformer family (Transformer, GPT, BERT).

Importing the package is cheap: TensorFlow is imported only by the modules that build, train
or run models (``transformer``, ``gpt``, ``bert``, ``training``, ``optimization``,
``checkpoints``, ...), which the command line loads after checking its arguments, so help
answers at once.
"""

__version__ = "0.1.0"
