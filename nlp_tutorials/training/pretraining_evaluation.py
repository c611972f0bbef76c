"""Scoring a pre-trained GPT or BERT on its text's held-out part, and showing what it predicts.

:func:`~nlp_tutorials.training.pretraining.pretrain` calls :func:`score_on_test` once the run
is over, and now and then while it trains (``--sample-every``) shows an example:
:func:`describe_predictions` (BERT's masked tokens) or :func:`describe_continuation` (GPT's
next words).
"""
import functools
import math

import numpy as np
import tensorflow as tf

from nlp_tutorials.models.decoding import decode, gpt_stepper
from nlp_tutorials.sources.source import HeldOutText, PretrainingText
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


def score_on_test(model, tokenizer, config: TrainConfig, held_out: HeldOutText | None,
                  printer=print, unscored: str = PretrainingText.unscored) -> dict:
    """Masked-token (or next-token) and NSP accuracy on ``held_out``, the run's held-out text
    (MRPC's test split, a corpus' held-out documents), first named in one line; {} and a line
    saying so when the text holds nothing out (``unscored``, the text's own line) or too
    little for one batch.

    Its pairs get the run's vocabulary (words it never saw become [UNK]) and max_len, and one
    fixed masking. Metrics are means over full batches of ``batch_size`` pairs (a last partial
    batch is left out). For BERT it also reports the most-frequent-token baseline: the accuracy
    of always guessing the token most often masked in training.
    """
    if held_out is None:
        printer(unscored)
        return {}
    masked = config.model_type == "bert"
    trim = functools.partial(trim_padding, pad_id=tokenizer.pad_id)
    batches = [trim({name: tf.convert_to_tensor(value) for name, value in batch.items()})
               for batch in held_out.batches(config.batch_size, masked)]
    if not batches:
        printer(f"scored on {held_out.described}: too few pairs for one batch of "
                f"{config.batch_size}; not scored")
        return {}
    printer(f"scored on {held_out.described}: {len(batches)} batches of {config.batch_size}")
    totals = {}
    step_fn = model.compiled_step(batches[0], training=False)
    for batch in batches:
        for name, value in step_fn(batch).items():
            totals[name] = totals.get(name, 0.0) + float(value) / len(batches)
    result = dict(totals)
    if masked:
        result["baseline_accuracy"] = most_frequent_token_baseline(
            batches, held_out.train_masked_ids(config.batch_size))
        printer(f"test masked-token accuracy {result['mlm_accuracy']:.3f} "
                f"(most-frequent-token baseline {result['baseline_accuracy']:.3f}), "
                f"NSP accuracy {result['nsp_accuracy']:.3f}")
    else:
        result["perplexity"] = math.exp(result["lm_loss"])
        printer(f"test next-token accuracy {result['lm_accuracy']:.3f}, perplexity "
                f"{result['perplexity']:.1f}, NSP accuracy {result['nsp_accuracy']:.3f}")
    return result


def most_frequent_token_baseline(test_batches, train_masked_ids) -> float:
    """Accuracy on the test masks of always predicting the token most often masked in training
    (``train_masked_ids``, numpy int [k])."""
    if not train_masked_ids.size:  # a vocabulary that knows no word of the text masks nothing
        return 0.0
    guess = np.bincount(train_masked_ids).argmax()
    hits = total = 0.0
    for batch in test_batches:
        weights = batch["mlm_weights"].numpy()
        hits += float(((batch["mlm_ids"].numpy() == guess) * weights).sum())
        total += float(weights.sum())
    return hits / max(total, 1.0)
