"""nlp_tutorials: a readable TensorFlow/Keras Transformer family (Transformer, GPT, BERT).

The folders are the architecture, each importing only from the ones listed after it:

- ``cli``: the command line (``python -m nlp_tutorials.bert|gpt|transformer`` land here);
- ``serving``, ``analysis``: exporting a model; pictures, the explorer, heads, baselines;
- ``training``: one training loop, pre-training, fine-tuning, checkpoints, ``tf.distribute``;
- ``tasks``, ``sources``: downstream tasks (GLUE, CoNLL-2003, SQuAD, multiple choice, a
  user's own table, dates; a registry new ones join) and pre-training text;
- ``models``: the lesson (masks, Transformer, GPT, BERT, heads, the model config);
- ``text``, ``speed``, ``system``: tokenizers and pair packing; fast kernels; files, errors and
  the settings machinery (fields that are also flags).

Importing the package is cheap: TensorFlow is imported only by the modules that build, train
or run models, which the command line loads after checking its arguments, so help answers at
once. ``bert``, ``gpt``, ``transformer``, ``config``, ``heads``, ``tokenization`` and
``baseline`` at the top are the public names users import and run (docs/contributing.md, "Where
the code is").
"""

__version__ = "0.1.0"
