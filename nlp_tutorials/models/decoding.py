"""Decoding: turn a model's next-token logits into a sequence, one token at a time.

Every model is driven through one interface, a *stepper*: ``step(ids, state)`` feeds new ids
[batch, new] and returns ``(logits [batch, new, vocab], state)``. The cached steppers keep the
keys and values of every position seen (``model.decode_step``), so a new token costs one
position's work; the uncached ones keep the prefix itself and run the whole model on it again,
which is the reference the cached ones must match.

Choosing the next token is separate: :func:`greedy` takes the most likely one,
:func:`sampler` draws it at a ``temperature`` from the ``top_k`` most likely, with a seed.
:func:`continue_text` is ``python -m nlp_tutorials.gpt generate``.
"""
import numpy as np
import tensorflow as tf

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.text.tokenization import CLS, SEP


def greedy(logits):
    """The most likely token of each row: logits [batch, vocab] -> ids [batch]."""
    return np.argmax(logits, axis=-1)


def sampler(temperature: float = 1.0, top_k: int | None = None, seed: int = 0):
    """A chooser that samples from softmax(logits / temperature) over the top_k tokens.

    Below 1 the temperature sharpens the distribution towards greedy, above 1 it flattens it;
    ``top_k`` (None: the whole vocabulary) cuts the long tail of unlikely tokens. The same seed
    draws the same tokens.
    """
    rng = np.random.default_rng(seed)

    def choose(logits):
        scaled = np.asarray(logits, np.float64) / temperature  # [batch, vocab]
        if top_k is not None and top_k < scaled.shape[-1]:
            kth = np.sort(scaled, axis=-1)[:, -top_k][:, None]
            scaled = np.where(scaled >= kth, scaled, -np.inf)
        probs = np.exp(scaled - scaled.max(axis=-1, keepdims=True))
        probs /= probs.sum(axis=-1, keepdims=True)
        return np.array([rng.choice(len(row), p=row) for row in probs])

    return choose


def decode(step, state, prompt_ids, max_new_tokens: int, choose=greedy, stop_id=None,
           pad_id: int = 0):
    """Extend ``prompt_ids`` [batch, prompt] by up to ``max_new_tokens`` chosen tokens.

    A row stops after it emits ``stop_id`` (that token is kept); later positions of a stopped
    row are ``pad_id``. Decoding ends early once every row has stopped.
    Returns (new ids [batch, n], the logits each was chosen from [batch, n, vocab]), n <=
    max_new_tokens.
    """
    logits, state = step(tf.constant(prompt_ids, tf.int32), state)
    chosen, chosen_logits = [], []
    stopped = np.zeros(len(prompt_ids), bool)
    for i in range(max_new_tokens):
        last = logits[:, -1].numpy()  # [batch, vocab]
        ids = np.where(stopped, pad_id, choose(last)).astype(np.int32)
        chosen.append(ids)
        chosen_logits.append(last)
        if stop_id is not None:
            stopped |= ids == stop_id
        if stopped.all() or i == max_new_tokens - 1:
            break
        logits, state = step(tf.constant(ids[:, None]), state)
    return np.stack(chosen, axis=1), np.stack(chosen_logits, axis=1)


def gpt_stepper(model, batch: int, cached: bool = True, compiled: bool = True):
    """(step, initial state) for a GPT: cached, or re-running the whole prefix each token.

    ``compiled``: run each step as a ``tf.function`` traced once (False: eagerly, which is
    quicker for a handful of tokens from a tiny model, as in the tests).
    """
    if cached:
        # An empty prompt of ``batch`` rows: GPT's cache starts from the batch size alone, and
        # the prompt itself goes through decode_step like every later token.
        cache = model.start_cache({"input_ids": tf.zeros([batch, 0], tf.int32)})
        return _compile(model.decode_step, compiled, _IDS, cache), cache

    def full_run(prefix):
        sequence = model({"input_ids": prefix}, training=False)["sequence_output"]
        return model.lm_head(sequence, model.embeddings.word_embeddings)

    return _uncached(full_run, batch, compiled)


def seq2seq_stepper(model, src_ids, cached: bool = True, compiled: bool = True):
    """(step, initial state) for the encoder-decoder Transformer translating ``src_ids``."""
    src_ids = tf.constant(src_ids, tf.int32)
    if cached:
        cache = model.start_cache({"src_ids": src_ids})
        return _compile(model.decode_step, compiled, _IDS, cache), cache

    def full_run(prefix):
        return model({"src_ids": src_ids, "tgt_ids": prefix}, training=False)["logits"]

    return _uncached(full_run, src_ids.shape[0], compiled)


def _uncached(full_run, batch: int, compiled: bool):
    """A stepper whose state is the prefix so far: every step runs ``full_run`` on all of it."""
    run = _compile(full_run, compiled, _IDS)

    def step(ids, prefix):
        prefix = tf.concat([prefix, ids], axis=1)  # [batch, step]
        return run(prefix)[:, -ids.shape[1]:], prefix

    return step, tf.zeros([batch, 0], tf.int32)


# Token ids [batch, step]: both axes vary from call to call.
_IDS = tf.TensorSpec([None, None], tf.int32)


def _compile(function, compiled: bool, *arguments):
    """``function`` as a tf.function traced once, for arguments shaped like ``arguments``.

    Each argument is a TensorSpec, or a (nested) example whose tensors keep only their last
    axis (head_size; the source length of a mask) and leave the batch and length axes open.
    """
    if not compiled:
        return function
    signature = [spec if isinstance(spec, tf.TensorSpec) else tf.nest.map_structure(
        lambda t: tf.TensorSpec([None] * (t.shape.rank - 1) + [t.shape[-1]], t.dtype), spec)
        for spec in arguments]
    return tf.function(function, input_signature=signature)


def continue_text(model, tokenizer, prompt: str, max_new_tokens: int, choose=greedy) -> str:
    """GPT continues ``prompt`` after ``[CLS]`` until it writes ``[SEP]`` or the limit.

    Stops earlier if the model's positions run out. Returns the prompt's words followed by the
    new ones (as the tokenizer splits and lower-cases them; ``[SEP]`` left out).
    """
    tokens = tokenizer.tokenize(prompt)
    ids = tokenizer.convert_tokens_to_ids([CLS] + tokens)
    if not tokens:
        raise UserError(f"--prompt {prompt!r} holds no words; expected some text, e.g. "
                        f"--prompt \"the company said\"")
    if all(i == tokenizer.unk_id for i in ids[1:]):
        raise UserError(f"--prompt {prompt!r}: none of its words is in the model's "
                        f"{tokenizer.vocab_size}-token vocabulary; expected English news words, "
                        f"e.g. --prompt \"the company said\"")
    positions = model.config.max_position_embeddings
    if len(ids) > positions:
        raise UserError(f"--prompt has {len(tokens)} tokens; this model reads at most "
                        f"{positions - 1} (and [CLS])")
    # The last new token is chosen, never fed back, so it needs no position of its own.
    room = positions - len(ids) + 1
    step, cache = gpt_stepper(model, 1)
    new, _ = decode(step, cache, np.array([ids], np.int32), min(max_new_tokens, room), choose,
                    stop_id=tokenizer.sep_id)
    words = [token for token in tokenizer.convert_ids_to_tokens(ids[1:] + list(new[0]))
             if token != SEP]
    return " ".join(words)
