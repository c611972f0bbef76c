"""Fine-tune BERT on MRPC paraphrase detection, and predict with the result.

The recipe (BERT paper, section 4.1): the pooled ``[CLS]`` vector feeds a 2-way classifier
(:class:`~nlp_tutorials.heads.SequenceClassifier`); the whole network trains with AdamW, linear
warm-up over 10% of the steps, then linear decay. MRPC has no official dev split in the original
files, so the last ``dev_size`` (default 408, GLUE's dev size) train pairs are held out: the epoch
with the best dev accuracy is kept, and only that model is scored on the test split. With
``dev_size`` 0 every train pair trains and the last epoch is kept: the usual second stage once
a recipe (its number of epochs above all) has been chosen on dev.

``--init-from DIR`` starts instead from real pretrained weights (see :mod:`nlp_tutorials.pretrained`).

Files in ``output_dir``: ``model.keras`` (head + backbone), ``vocab.txt`` +
``tokenizer_config.json``, ``results.json``.
"""
import dataclasses
import functools
import json
import zipfile
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from nlp_tutorials.training import distribute
from nlp_tutorials.training.checkpoints import build_model, latest_checkpoint, restore_model
from nlp_tutorials.training.config import FinetuneConfig, TrainConfig
from nlp_tutorials.training.loop import Hook, epoch_batches, train_steps
from nlp_tutorials.text.packing import encode_pairs, longest_pair_length, trim_padding
from nlp_tutorials.tasks.mrpc import load_mrpc
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import save_atomic, write_text_atomic
from nlp_tutorials.models.heads import SequenceClassifier
from nlp_tutorials.tasks.metrics import accuracy, f1_score, mean_std
from nlp_tutorials.training.optimization import make_optimizer
from nlp_tutorials.text.tokenization import WordTokenizer, load_tokenizer

MODEL_FILE = "model.keras"
RESULTS_FILE = "results.json"


def split_train_dev(pairs, dev_size: int):
    """(train, dev): the last ``dev_size`` pairs are dev, as GLUE's 3,668 / 408 split; with
    ``dev_size`` 0, every pair trains and dev is empty."""
    if not 0 <= dev_size < len(pairs):
        raise UserError(f"--dev-size {dev_size}: expected 0 to {len(pairs) - 1}")
    return pairs[:len(pairs) - dev_size], pairs[len(pairs) - dev_size:]


def backbone_and_tokenizer(config: FinetuneConfig):
    """The backbone to fine-tune and its tokenizer.

    A real pretrained BERT from ``init_from`` (with its own WordPiece vocabulary), else the
    checkpoint ``train`` left in ``model_dir``, else (``from_scratch``) a fresh model of the
    default pre-training size.
    """
    if config.init_from:
        from nlp_tutorials.models.bert import BERT

        return BERT.from_pretrained(config.init_from), load_tokenizer(config.init_from)
    if not config.from_scratch:
        if not latest_checkpoint(config.model_dir):
            raise UserError(f"{config.model_dir}: no pre-trained checkpoint; run `python -m "
                            f"nlp_tutorials.bert train` first, or pass --from-scratch")
        return restore_model(config.model_dir)
    train = load_mrpc("train")
    tokenizer = WordTokenizer.build([s for p in train for s in (p.s1, p.s2)])
    model_config = TrainConfig().model_config(tokenizer.vocab_size,
                                              longest_pair_length(tokenizer, train))
    return build_model(model_config, config.seed), tokenizer


def encode(tokenizer, pairs, max_len: int, swap: bool = False) -> dict:
    """Encoded pairs; with ``swap`` also each pair in the other order (a paraphrase either way)."""
    arrays = encode_pairs(tokenizer, pairs, max_len)
    if not swap:
        return arrays
    swapped = encode_pairs(tokenizer, [dataclasses.replace(p, s1=p.s2, s2=p.s1) for p in pairs],
                           max_len)
    return {k: np.concatenate([arrays[k], swapped[k]]) for k in arrays}


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


def batches(arrays: dict, batch_size: int, rng=None, drop_remainder: bool = False):
    """A tf.data pipeline of dict batches trimmed to their longest pair.

    Given ``rng`` the order is random and length-grouped (:func:`length_grouped_order`), else
    the pairs keep their order.
    """
    if rng is None:
        order = slice(None)
    else:
        lengths = np.count_nonzero(arrays["input_ids"], axis=1)  # [PAD] is 0
        order = length_grouped_order(lengths, batch_size, rng)
    data = tf.data.Dataset.from_tensor_slices({k: v[order] for k, v in arrays.items()})
    return (data.batch(batch_size, drop_remainder=drop_remainder).map(trim_padding)
            .prefetch(tf.data.AUTOTUNE))


@functools.lru_cache(maxsize=4)
def _paraphrase_forward(head, masked: bool = False):
    """One traced inference function per head (and with or without a head mask), so repeated
    evaluations do not retrace."""
    signature = {name: tf.TensorSpec([None, None], tf.int32)
                 for name in ("input_ids", "token_type_ids")}
    if masked:
        config = head.backbone.config
        signature["head_mask"] = tf.TensorSpec(
            [config.num_hidden_layers, config.num_attention_heads], tf.float32)
    # Logits may be float16 under mixed precision; the probabilities are float32.
    return tf.function(
        lambda b: tf.nn.softmax(tf.cast(head(b, training=False), tf.float32))[:, 1],
        input_signature=[signature])


def paraphrase_probabilities(head, arrays: dict, batch_size: int = 64,
                             head_mask=None) -> np.ndarray:
    """P(paraphrase) for every encoded pair: [n] float32; ``head_mask`` [layers, heads] is
    passed to the backbone when given."""
    forward = _paraphrase_forward(head, head_mask is not None)
    inputs = {k: arrays[k] for k in ("input_ids", "token_type_ids")}
    inputs["labels"] = np.zeros(len(arrays["input_ids"]), np.int32)
    extra = {} if head_mask is None else {"head_mask": tf.constant(head_mask, tf.float32)}
    return np.concatenate([
        forward({**{k: b[k] for k in ("input_ids", "token_type_ids")}, **extra}).numpy()
        for b in batches(inputs, batch_size)])


def scores(head, arrays, head_mask=None) -> dict:
    """Accuracy and F1 of ``head`` on encoded pairs (under ``head_mask`` when given)."""
    predictions = (paraphrase_probabilities(head, arrays, head_mask=head_mask) > 0.5).astype(
        np.int32)
    return {"accuracy": accuracy(arrays["labels"], predictions),
            "f1": f1_score(arrays["labels"], predictions)}


def train_epochs(head, train: dict, epochs: int, batch_size: int, rng, strategy,
                 end_of_epoch) -> None:
    """``epochs`` passes over the encoded ``train`` pairs in random length-grouped batches (the
    last partial one dropped), through the training loop; ``end_of_epoch(epoch, metrics)``
    after each (epoch from 1, the metrics of its last step). Ctrl-C stops after the current
    step and raises KeyboardInterrupt."""
    steps_per_epoch = len(train["labels"]) // batch_size
    every_epoch = epoch_batches(
        lambda: batches(train, batch_size, rng, drop_remainder=True), epochs)
    hook = Hook(steps_per_epoch,
                lambda step, batch, metrics: end_of_epoch(step // steps_per_epoch, metrics))
    if train_steps(head, every_epoch, 1, epochs * steps_per_epoch, strategy=strategy,
                   hooks=(hook,)):
        raise KeyboardInterrupt


def finetune_once(config: FinetuneConfig, seed: int, strategy, printer=print):
    """Fine-tune one head with ``seed``; returns (head, tokenizer, dev scores, test scores).

    The epoch with the best dev accuracy is kept; without dev pairs (``dev_size`` 0) the last
    epoch is, and the dev scores are None. The head trains under ``strategy`` (its variables
    live on every replica); scoring runs on one device.
    """
    with strategy.scope():
        backbone, tokenizer = backbone_and_tokenizer(dataclasses.replace(config, seed=seed))
    max_len = min(config.max_len, backbone.config.max_position_embeddings)
    train_pairs, dev_pairs = split_train_dev(load_mrpc("train"), config.dev_size)
    train = encode(tokenizer, train_pairs, max_len, swap=config.swap_augment)
    dev = encode(tokenizer, dev_pairs, max_len) if dev_pairs else None
    test = encode(tokenizer, load_mrpc("test"), max_len)
    keras.utils.set_random_seed(seed)
    steps_per_epoch = len(train["labels"]) // config.batch_size
    with strategy.scope():
        head = SequenceClassifier(backbone, num_labels=2, pooling=config.pooling)
        head.compile(optimizer=make_optimizer(config.learning_rate,
                                              config.epochs * steps_per_epoch))
    best = (-1.0, None, None)

    def end_of_epoch(epoch, metrics):
        nonlocal best
        report = f"seed {seed} epoch {epoch}: train loss {metrics['loss']:.3f}"
        if dev is None:
            printer(report)
            return
        dev_scores = scores(head, dev)
        printer(f"{report}, dev accuracy {dev_scores['accuracy']:.3f} "
                f"F1 {dev_scores['f1']:.3f}")
        if dev_scores["accuracy"] > best[0]:
            best = (dev_scores["accuracy"], [w.numpy() for w in head.weights], dev_scores)

    train_epochs(head, train, config.epochs, config.batch_size, np.random.default_rng(seed),
                 strategy, end_of_epoch)
    if dev is not None:
        for weight, value in zip(head.weights, best[1]):
            weight.assign(value)
    # Training is over (and the loop's compiled step with it). Dropping AdamW (two slots the
    # size of every weight) frees that memory for scoring and saving, and keeps it out of
    # model.keras, which only prediction reads: the file is a third of the size.
    head.optimizer = None
    test_scores = scores(head, test)
    kept = "last epoch (no dev pairs)" if dev is None else f"best dev accuracy {best[0]:.3f}"
    printer(f"seed {seed}: {kept}; test accuracy {test_scores['accuracy']:.3f} "
            f"F1 {test_scores['f1']:.3f}")
    return head, tokenizer, best[2], test_scores


def finetune(config: FinetuneConfig, printer=print) -> dict:
    """Fine-tune with ``seeds`` seeds; save the best-on-dev head (the first seed's without dev
    pairs); return the test summary.

    Under ``--strategy multiworker`` the workers other than the chief write into a sub-folder
    of ``output_dir`` (see :func:`nlp_tutorials.distribute.worker_dir`).
    """
    # First: logical CPU devices and the multi-worker runtime need a TensorFlow not yet started.
    strategy = distribute.make_strategy(config.strategy, config.cpu_replicas)
    distribute.check_batch_size(config.batch_size, strategy)
    distribute.set_precision(config.precision)
    runs = []
    kept = None
    for seed in range(config.seed, config.seed + config.seeds):
        head, tokenizer, dev, test = finetune_once(config, seed, strategy, printer)
        runs.append({"seed": seed, "dev": dev, "test": test})
        dev_accuracy = -1.0 if dev is None else dev["accuracy"]
        if kept is None or dev_accuracy > kept[2]:
            kept = (head, tokenizer, dev_accuracy)
    summary = {name: mean_std([run["test"][name] for run in runs]) for name in ("accuracy", "f1")}
    printer(f"MRPC test over {len(runs)} seed(s): accuracy {100 * summary['accuracy'][0]:.1f} "
            f"± {100 * summary['accuracy'][1]:.1f}%, F1 {100 * summary['f1'][0]:.1f} "
            f"± {100 * summary['f1'][1]:.1f}")
    output_dir = distribute.worker_dir(config.output_dir, config.strategy)
    save_head(kept[0], output_dir)
    kept[1].save(output_dir)
    save_results(output_dir, config, runs, summary)
    printer(f"fine-tuned model written to {output_dir / MODEL_FILE}")
    return {"runs": runs, "test_mean_std": summary}


def save_results(output_dir, config: FinetuneConfig, runs: list, summary: dict) -> Path:
    """Write ``results.json`` (the config, every seed's scores, the test mean and std)
    atomically; return its path."""
    path = Path(output_dir) / RESULTS_FILE
    write_text_atomic(path, json.dumps(
        {"config": dataclasses.asdict(config), "runs": runs, "test_mean_std": summary},
        indent=2) + "\n")
    return path


def save_head(head, output_dir: Path) -> Path:
    """``head.save`` through a temporary file and a rename, so a crash never leaves half a file."""
    return save_atomic(Path(output_dir) / MODEL_FILE, head.save)


def load_finetuned(output_dir):
    """(head, tokenizer) written by :func:`finetune`.

    ``model.keras`` is loaded with Keras' ``safe_mode`` on, always: a ``.keras`` file is a
    zip of a JSON config and HDF5 weights, and safe mode refuses the one part that would be
    code (a ``Lambda`` layer's Python bytecode) and lookup tables read from other files.
    Whatever Keras refuses or cannot read, or a model other than a
    :class:`SequenceClassifier`, is one line.
    """
    path = Path(output_dir) / MODEL_FILE
    if not path.is_file():
        raise UserError(f"{path}: no fine-tuned model; run `python -m nlp_tutorials.bert "
                        f"finetune` first")
    if not zipfile.is_zipfile(path):  # Keras would call it "File not found"
        raise UserError(f"{path}: damaged or not a .keras file (not a whole zip archive); "
                        f"fine-tune again, or copy the file back whole")
    import nlp_tutorials.models.bert  # noqa: F401  (registers BERT and GPT with Keras for loading)

    try:
        head = keras.models.load_model(path, compile=False, safe_mode=True)
    except Exception as err:  # Keras reports a foreign or damaged file in many exception types
        # The first sentence says what; the rest is Keras' advice, safe_mode=False among it.
        reason = " ".join(str(err).split()).split(". ")[0][:200]
        raise UserError(f"{path}: not a model `finetune` wrote ({type(err).__name__}: "
                        f"{reason})") from None
    if not isinstance(head, SequenceClassifier):
        raise UserError(f"{path}: holds a {type(head).__name__}; expected the "
                        f"SequenceClassifier `python -m nlp_tutorials.bert finetune` writes")
    return head, load_tokenizer(output_dir)


def parse_pair_lines(lines, source: str):
    """Sentence pairs from TSV lines: ``s1<TAB>s2``, or MRPC rows (5 columns; header skipped).

    Yields (line number, s1, s2); a malformed line raises UserError naming it, after the pairs
    before it have been yielded.
    """
    for number, line in enumerate(lines, start=1):
        line = line.rstrip("\r\n")
        if not line.strip() or line.startswith("Quality\t"):
            continue
        fields = line.split("\t")
        if len(fields) == 5:
            fields = fields[3:]
        if len(fields) != 2 or not all(f.strip() for f in fields):
            raise UserError(f"{source}, line {number}: expected two tab-separated sentences "
                            f"(or an MRPC row of 5 columns), got {len(fields)} field(s)")
        yield number, fields[0], fields[1]


def predict(head, tokenizer, lines, source: str, printer=print, chunk: int = 64) -> int:
    """Print ``label<TAB>P(paraphrase)<TAB>s1<TAB>s2`` per pair; returns the pairs predicted.

    Pairs are predicted in chunks as they are read, so an error on a late line comes after
    every earlier pair's answer has been printed.
    """
    from nlp_tutorials.tasks.mrpc import Pair

    max_len = head.backbone.config.max_position_embeddings
    pending, done = [], 0

    def flush():
        nonlocal done
        if pending:
            arrays = encode_pairs(tokenizer, pending, max_len)
            for pair, p in zip(pending, paraphrase_probabilities(head, arrays)):
                printer(f"{int(p > 0.5)}\t{p:.3f}\t{pair.s1}\t{pair.s2}")
            done += len(pending)
            pending.clear()

    try:
        for number, s1, s2 in parse_pair_lines(lines, source):
            pending.append(Pair(0, str(number), str(number), s1, s2))
            if len(pending) == chunk:
                flush()
    finally:
        flush()
    return done

