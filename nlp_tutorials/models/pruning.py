"""Head pruning: a copy of a model whose attention layers lost some heads for good.

A masked head (``head_mask`` 0) still costs its share of every attention product; a pruned one
is gone: the query, key and value projections lose its ``head_size`` columns and the output
projection the matching rows, so the layer computes ``kept / heads`` of the attention work.
Pruning a head gives the same outputs as masking it (tests/models/test_pruning.py checks this).

Keras layers cannot shrink once built, so pruning makes a new model and leaves the one pruned as
it is: ``model = model.with_heads_pruned({0: [1, 3]})`` for a GPT or BERT (:class:`HeadPruning`,
one of their bases), ``head = pruned_head_model(head, {0: [1, 3]})`` for a fine-tuning head.
HuggingFace's ``prune_heads`` changes its model in place instead; here it raises
(models/huggingface.py), so code written for HuggingFace that drops the result cannot go on
with an unpruned model unnoticed.

The heads removed are recorded in ``ModelConfig.pruned_heads`` (numbered as in the unpruned
model, as HuggingFace's ``config.json`` records them), so a saved model, a checkpoint or a
``save_pretrained`` folder is rebuilt with the smaller shapes before its weights are read.
"""
import dataclasses

import keras
import tensorflow as tf


class HeadPruning:
    """``with_heads_pruned``, on GPT and BERT."""

    def with_heads_pruned(self, heads_to_prune: dict):
        """A copy of this model without the attention heads ``{layer: [head, ...]}``.

        Heads are numbered as in the unpruned model; those pruned before stay pruned. The
        pruned heads' columns leave the query, key and value weights and their rows the output
        weights, so the copy computes less, and its config's ``pruned_heads`` records them
        (saving and loading keep them). Its outputs equal this model's with those heads masked
        to 0. This model is left as it is: Keras layers cannot shrink once built.

        Example::

            model = model.with_heads_pruned({0: [1, 3], 5: [2]})
        """
        return pruned_copy(self, heads_to_prune)


def pruned_config(config, heads_to_prune: dict):
    """``config`` with ``heads_to_prune`` ({layer: [head, ...]}) added to its pruned heads.

    Raises UserError (from the config's checks) for a layer or head that does not exist, or
    for a layer that would lose every head.
    """
    wanted = dataclasses.replace(config, pruned_heads=heads_to_prune).pruned_heads
    merged = {layer: set(heads) for layer, heads in config.pruned_heads.items()}
    for layer, heads in wanted.items():
        merged.setdefault(layer, set()).update(heads)
    return dataclasses.replace(config, pruned_heads={layer: sorted(heads)
                                                     for layer, heads in merged.items()})


def pruned_copy(model, heads_to_prune: dict):
    """A GPT or BERT like ``model``, without ``heads_to_prune``, its weights copied over."""
    pruned = type(model)(pruned_config(model.config, heads_to_prune))
    copy_kept_weights(model, pruned, model, pruned)
    return pruned


def pruned_head_model(head, heads_to_prune: dict):
    """A fine-tuning head (``heads.py``) like ``head``, its backbone without those heads."""
    backbone = head.backbone
    smaller = type(backbone)(pruned_config(backbone.config, heads_to_prune))
    pruned = type(head).from_config(
        {**head.get_config(), "backbone": keras.saving.serialize_keras_object(smaller)})
    copy_kept_weights(head, pruned, backbone, pruned.backbone)
    return pruned


def copy_kept_weights(source, target, source_backbone, target_backbone) -> None:
    """Copy every weight of ``source`` into ``target``, the same model with fewer heads.

    Weights of equal shape are copied as they are (both models list their weights in the same
    order); each attention layer then takes the rows and columns of the heads it kept.
    """
    for old, new in zip(source.weights, target.weights, strict=True):
        if old.name != new.name:
            raise ValueError(f"weights out of step: {old.path} against {new.path}")
        if old.shape == new.shape:
            new.assign(old)
    for old, new in zip(source_backbone.encoder.blocks, target_backbone.encoder.blocks,
                        strict=True):
        take_kept_heads(old.attention, new.attention)


def take_kept_heads(source, target) -> None:
    """Give ``target`` (a MultiHeadAttention) ``source``'s weights for the heads it kept."""
    positions = [source.kept_heads.index(head) for head in target.kept_heads]
    size = source.head_size
    columns = [position * size + i for position in positions for i in range(size)]
    for name in ("query", "key", "value"):  # kernel [hidden, heads * head_size]
        old, new = getattr(source, name), getattr(target, name)
        new.kernel.assign(tf.gather(old.kernel, columns, axis=1))
        new.bias.assign(tf.gather(old.bias, columns))
    # output kernel [heads * head_size, hidden]
    target.output_dense.kernel.assign(tf.gather(source.output_dense.kernel, columns, axis=0))
    target.output_dense.bias.assign(source.output_dense.bias)
