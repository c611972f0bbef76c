"""The process and its files: one-line user errors, atomic writes, the safe unpickler, and
TensorFlow's start-up settings. Imports nothing else of the package."""
