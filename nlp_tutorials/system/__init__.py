"""The process and its files: one-line user errors, atomic writes, the outputs a command may
write and the lock on a model folder, the safe unpickler, and TensorFlow's start-up settings.
Imports nothing else of the package."""
