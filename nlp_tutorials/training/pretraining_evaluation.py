"""Scoring a pre-trained GPT or BERT on MRPC's test split, and showing what it predicts.

:func:`~nlp_tutorials.training.pretraining.pretrain` calls :func:`evaluate` once the run is
over, and now and then while it trains (``--sample-every``) shows an example:
:func:`describe_predictions` (BERT's masked tokens) or :func:`describe_continuation` (GPT's
next words).
"""
import functools
import math

import numpy as np
import tensorflow as tf

from nlp_tutorials.models.decoding import decode, gpt_stepper
from nlp_tutorials.sources.mrpc import MrpcPretrainingData
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.text.packing import trim_padding
from nlp_tutorials.training.config import TrainConfig


def describe_predictions(model, tokenizer, batch, row: int = 0) -> str:
    """One example: the masked words and what the model predicts there, as two lines."""
    single = {k: v[row:row + 1] for k, v in batch.items()}
    outputs = model(single, training=False)
    chosen = tf.gather(outputs["sequence_output"], single["mlm_positions"], batch_dims=1)
    logits, _ = model.pretraining_heads(chosen, outputs["pooled_output"])
    real = single["mlm_weights"].numpy()[0] > 0
    targets = tokenizer.convert_ids_to_tokens(single["mlm_ids"].numpy()[0][real])
    predicted = tokenizer.convert_ids_to_tokens(np.argmax(logits.numpy()[0], -1)[real])
    return f"  target:    {' '.join(targets)}\n  predicted: {' '.join(predicted)}"


def describe_continuation(model, tokenizer, batch, row: int = 0, prompt_words: int = 6,
                          new_tokens: int = 10) -> str:
    """One example of what a GPT has learnt: the first ``prompt_words`` tokens of a training
    sequence and its greedy continuation of them (up to ``new_tokens``, or [SEP]), as two
    lines. Decoded eagerly: a few tokens now and then are not worth compiling a step."""
    ids = batch["input_ids"].numpy()[row]
    words = ids[1:][ids[1:] != tokenizer.pad_id][:prompt_words]  # after [CLS]
    prompt = np.concatenate([ids[:1], words])[None].astype(np.int32)
    room = model.config.max_position_embeddings - prompt.shape[1] + 1  # the last is not fed
    step, cache = gpt_stepper(model, 1, compiled=False)
    new, _ = decode(step, cache, prompt, min(new_tokens, room), stop_id=tokenizer.sep_id)
    return (f"  prompt:    {' '.join(tokenizer.convert_ids_to_tokens(words))}\n"
            f"  continued: {' '.join(tokenizer.convert_ids_to_tokens(new[0]))}")


def score_on_test(model, tokenizer, config: TrainConfig, printer=print, train_pairs=None,
                  test_pairs=None) -> dict:
    """Masked-token (or next-token) and NSP accuracy on the MRPC test split.

    Test pairs get the same vocabulary (test-only words become [UNK]), the same max_len
    (longer pairs are truncated longest-first) and one fixed masking (seed + 1000). Metrics
    are means over full batches of ``batch_size`` pairs (the last partial batch, under
    ``batch_size`` of the 1,725 pairs, is left out). For BERT it also reports the
    most-frequent-token baseline: the accuracy of always guessing the token most often masked
    in train (``train_pairs``, ``test_pairs``: MRPC's pairs when the run has read them already).
    """
    masked = config.model_type == "bert"
    test = MrpcPretrainingData(tokenizer, test_pairs or load_mrpc("test"),
                               max_len=config.max_len, nsp_mode=config.nsp_mode,
                               seed=config.seed + 1000)
    totals = {}
    trim = functools.partial(trim_padding, pad_id=tokenizer.pad_id)
    batches = list(test.dataset(config.batch_size, masked=masked, repeat=False).map(trim))
    step_fn = model.compiled_step(batches[0], training=False)
    for batch in batches:
        for name, value in step_fn(batch).items():
            totals[name] = totals.get(name, 0.0) + float(value) / len(batches)
    result = dict(totals)
    if masked:
        result["baseline_accuracy"] = most_frequent_token_baseline(
            tokenizer, config, batches, train_pairs or load_mrpc("train"))
        printer(f"test masked-token accuracy {result['mlm_accuracy']:.3f} "
                f"(most-frequent-token baseline {result['baseline_accuracy']:.3f}), "
                f"NSP accuracy {result['nsp_accuracy']:.3f}")
    else:
        result["perplexity"] = math.exp(result["lm_loss"])
        printer(f"test next-token accuracy {result['lm_accuracy']:.3f}, perplexity "
                f"{result['perplexity']:.1f}, NSP accuracy {result['nsp_accuracy']:.3f}")
    return result


def most_frequent_token_baseline(tokenizer, config: TrainConfig, test_batches,
                                 train_pairs) -> float:
    """Accuracy on the test masks of always predicting the token most often masked in
    ``train_pairs`` (MRPC's train split)."""
    train = MrpcPretrainingData(tokenizer, train_pairs, max_len=config.max_len,
                                seed=config.seed).epoch(0)
    chosen = train["mlm_ids"][train["mlm_weights"] > 0]
    if not chosen.size:  # a vocabulary that knows no MRPC word masks nothing
        return 0.0
    guess = np.bincount(chosen).argmax()
    hits = total = 0.0
    for batch in test_batches:
        weights = batch["mlm_weights"].numpy()
        hits += float(((batch["mlm_ids"].numpy() == guess) * weights).sum())
        total += float(weights.sum())
    return hits / max(total, 1.0)
