"""The order fine-tuning draws its examples in: random, with batches of similar lengths.

Plain numpy, so that what imports it need not start TensorFlow: a reference run in another
framework (benchmarks/hf_finetune_reference.py) draws the same batches for a seed.
"""
import numpy as np


def length_grouped_order(lengths, batch_size: int, rng, window: int = 32) -> np.ndarray:
    """A random order of ``len(lengths)`` items in which each batch holds items of similar length.

    The items are shuffled, cut into windows of ``window`` batches, sorted by length inside each
    window, cut into batches, and the full batches are shuffled (a partial one goes last). Each
    batch is then trimmed to its longest item, so less of it is padding, while which items meet
    in a batch stays random. Returns int indices [len(lengths)].
    """
    order = rng.permutation(len(lengths))
    span = batch_size * window
    order = np.concatenate([chunk[np.argsort(-lengths[chunk], kind="stable")]
                            for chunk in np.split(order, range(span, len(order), span))])
    groups = np.split(order, range(batch_size, len(order), batch_size))
    full = [g for g in groups if len(g) == batch_size]
    partial = [g for g in groups if len(g) < batch_size]
    return np.concatenate([full[i] for i in rng.permutation(len(full))] + partial)
