"""Which attention heads a fine-tuned BERT needs: importance, entropy, masking, pruning.

After Michel et al. (2019, "Are Sixteen Heads Really Better than One?"): give every head a mask
value xi_h = 1 (``head_mask``, which multiplies the head's attention probabilities); the head's
importance is how much the loss moves with it,

    I_h = sum over examples x of |dL(x) / d xi_h|,

normalised per layer to unit L2 norm. A head whose importance is small can be masked, or pruned
for good (:mod:`nlp_tutorials.models.pruning`), at little cost. The attention entropy of a head (nats,
averaged over the real query tokens) tells how spread out its attention is.

``python -m nlp_tutorials.bert heads --model-dir <fine-tuned model>`` writes
``head_importance.json`` beside the model and draws the two maps; ``--study`` masks heads from
the least important up, 10% of them at a time, against random orders, scoring the test split
of the model's task (MRPC by default); ``--prune 0.4`` writes a model without the least
important 40% of the heads, chosen 10% at a time with the importance measured again after each
tenth (as Michel et al. prune), and ``--recover-epochs 1`` fine-tunes it once more over the
task's train examples.
"""
import json
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from nlp_tutorials.finetuned.folders import (
    MODEL_FILE,
    load_finetuned,
    save_head,
    save_task,
    task_with_data,
)
from nlp_tutorials.finetuned.inference import score_examples
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.progress import ProgressDisplay, shown_steps
from nlp_tutorials.tasks import get_task
from nlp_tutorials.tasks.base import reported
from nlp_tutorials.training.config import RANDOM_ORDERS, FinetuneConfig
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.outputs import Output, writing
from nlp_tutorials.training.finetuning import compile_for_epochs, train_epochs
from nlp_tutorials.models.pruning import pruned_head_model
from nlp_tutorials.analysis.visual import pyplot, save_figure

IMPORTANCE_FILE = "head_importance.json"
STUDY_FILE = "head_masking_study.json"
STUDY_SHARES = [step / 10 for step in range(10)]  # 0%, 10%, ..., 90% of the heads masked


def attention_grid(head) -> tuple[int, int]:
    """(layers, attention heads per layer as unpruned) of the backbone under a task head."""
    config = head.backbone.config
    return config.num_hidden_layers, config.num_attention_heads


def kept_heads(head) -> list[list[int]]:
    """Per layer, the heads the backbone still has (numbered as unpruned)."""
    return [block.attention.kept_heads for block in head.backbone.encoder.blocks]


def one_by_one(head, arrays: dict):
    """The encoded examples of ``arrays`` one at a time, each trimmed to its own length.

    ``arrays``: those the head reads (``task.shape.for_model``'s): the inputs and the
    shape's answers. Those with one value per token (``input_ids``,
    ``token_type_ids``, a tagging task's ``tag_ids`` and ``tag_weights``) are cut to the
    example's real tokens (a multiple-choice example's longest choice); the others (``labels``,
    ``start_positions``) keep their row. Yields dicts of [1, (choices,) length] and [1] arrays.
    """
    ids = arrays["input_ids"]  # [n, max_len] or [n, choices, max_len]
    per_token = [name for name, value in arrays.items() if value.shape == ids.shape]
    real = np.count_nonzero(ids != head.backbone.config.pad_token_id, axis=-1)
    for row, length in enumerate(real.reshape(len(ids), -1).max(axis=1)):
        yield {name: value[row:row + 1, ..., :length] if name in per_token
               else value[row:row + 1] for name, value in arrays.items()}


def one_by_one_shown(work, head, arrays: dict, display: ProgressDisplay | None):
    """``work(example)`` for each of :func:`one_by_one`'s examples, as they are asked for, the
    pass's progress shown on ``display`` (None: not)."""
    return shown_steps((work(example) for example in one_by_one(head, arrays)),
                       len(arrays["input_ids"]), display, unit="example", batch_size=1)


def example_signature(arrays: dict):
    """The tf.function input signature of one :func:`one_by_one` example of ``arrays``: the
    token axis (the last of the per-token arrays) may have any length."""
    ids_shape = arrays["input_ids"].shape
    return {name: tf.TensorSpec([1, *value.shape[1:-1], None] if value.shape == ids_shape
                                else [1, *value.shape[1:]], tf.as_dtype(value.dtype))
            for name, value in arrays.items()}


def importance(head, arrays: dict, head_mask=None,
               display: ProgressDisplay | None = None) -> np.ndarray:
    """Each head's importance over ``arrays``, normalised per layer: [layers, heads] float64.

    ``arrays``: encoded examples with their answers, the arrays the head reads
    (``task.shape.for_model``'s: ``labels``, ``tag_ids``, or ``start_positions`` ...). Examples
    go one at a time, so the absolute value is taken per example (per window, for tasks that
    cut long inputs into windows). ``head_mask`` [layers, heads]
    (default: ones) is the point the gradient is taken at. A pruned head has importance 0.
    The pass over the examples shows its progress on ``display`` if given.
    """
    layers, heads = attention_grid(head)
    head_mask = tf.constant(np.ones([layers, heads]) if head_mask is None else head_mask,
                            tf.float32)

    @tf.function(input_signature=[example_signature(arrays)])
    def gradient_at(example):
        with tf.GradientTape() as tape:
            tape.watch(head_mask)
            loss, _ = head.loss_and_metrics({**example, "head_mask": head_mask})
        return tape.gradient(loss, head_mask)

    total = sum(np.abs(gradient.numpy())
                for gradient in one_by_one_shown(gradient_at, head, arrays, display))
    norms = np.linalg.norm(total, axis=1, keepdims=True)
    return total / np.where(norms > 0, norms, 1.0)


def entropy(head, arrays: dict, display: ProgressDisplay | None = None) -> np.ndarray:
    """Each head's attention entropy (nats), averaged over the real query tokens of each of
    ``arrays``' examples (all its choices' for a multiple-choice example) and then over the
    examples: [layers, heads] float64, NaN for a pruned head. The pass shows its progress on
    ``display`` if given."""
    layers, heads = attention_grid(head)

    @tf.function(input_signature=[example_signature(arrays)])
    def entropies(example):
        step = tf.shape(example["input_ids"])[-1]
        inputs = {name: tf.reshape(example[name], [-1, step])  # [sequences, step]
                  for name in ("input_ids", "token_type_ids")}
        real = tf.cast(head.is_real(inputs["input_ids"]), tf.float32)[:, tf.newaxis]
        attentions = head.backbone(inputs)["attentions"]["encoder"]
        # Per layer: each query's entropy [sequences, kept heads, step], averaged over the
        # real queries (a shorter choice's padding is left out) -> [kept heads].
        return [tf.reduce_sum(-tf.reduce_sum(p * tf.math.log(p + 1e-12), -1) * real, [0, 2])
                / tf.reduce_sum(real) for p in [tf.cast(a, tf.float32) for a in attentions]]

    total, count = np.zeros([layers, heads]), 0
    for per_layer in one_by_one_shown(entropies, head, arrays, display):
        for layer, (kept, values) in enumerate(zip(kept_heads(head), per_layer)):
            total[layer, kept] += values.numpy()
        count += 1
    mean = total / max(count, 1)
    for layer, kept in enumerate(kept_heads(head)):
        mean[layer, [h for h in range(heads) if h not in kept]] = np.nan
    return mean


def masking_study(head, task, examples, arrays: dict, importance: np.ndarray,
                  random_orders: int = RANDOM_ORDERS, seed: int = 0, printer=print,
                  display: ProgressDisplay | None = None) -> dict:
    """The task's scores on ``examples`` (encoded as ``arrays``) with the least important 0%,
    10%, ..., 90% of the heads masked, and the same shares masked in ``random_orders`` random
    orders (the control; their mean is reported). The passes done out of all are shown on
    ``display`` if given, each share's line then printed below its bar."""
    layers, heads = importance.shape
    least_first = np.argsort(importance.ravel(), kind="stable")
    rng = np.random.default_rng(seed)
    randoms = [rng.permutation(layers * heads) for _ in range(random_orders)]
    result = {"shares": STUDY_SHARES, "importance_order": [], "random_order": []}
    metric, printed = task.metrics[0]
    progress = display and display.start(len(STUDY_SHARES) * (1 + random_orders), unit="pass",
                                         batch_size=len(examples))
    passes = 0
    for share in STUDY_SHARES:
        scored = []
        for order in [least_first] + randoms:
            mask = mask_of(order[:round(share * layers * heads)], layers, heads)
            scored.append(score_examples(head, task, examples, arrays, head_mask=mask))
            passes += 1
            if progress:
                progress.update(passes)
        result["importance_order"].append(scored[0])
        result["random_order"].append(
            {name: float(np.mean([s[name] for s in scored[1:]])) for name in scored[0]})
        (progress.note if progress else printer)(
            f"{share:4.0%} of the heads masked: {printed} "
            f"{reported(metric, scored[0][metric])} (least important first), "
            f"{reported(metric, result['random_order'][-1][metric])} "
            f"(random order, mean of {random_orders})")
    return result


def mask_of(masked: np.ndarray, layers: int, heads: int) -> np.ndarray:
    """[layers, heads] of ones with the flat head indices ``masked`` set to 0."""
    mask = np.ones(layers * heads, np.float32)
    mask[masked] = 0.0
    return mask.reshape(layers, heads)


def iterative_heads_to_prune(head, arrays: dict, share: float, step: float = 0.1,
                             display: ProgressDisplay | None = None) -> dict:
    """``{layer: [head, ...]}``: ``share`` of all heads chosen as Michel et al. prune, ``step``
    of them at a time, the importance measured again on ``arrays`` with the heads chosen so far
    masked (a head can matter more once another is gone), each pass shown on ``display`` if
    given. Each layer keeps one head."""
    layers, heads = attention_grid(head)
    mask = np.zeros([layers, heads], np.float32)
    for layer, kept in enumerate(kept_heads(head)):
        mask[layer, kept] = 1.0
    already = {(layer, h) for layer in range(layers) for h in range(heads) if not mask[layer, h]}
    reached = 0.0
    while reached < share:
        reached = min(share, reached + step)
        measured = importance(head, arrays, mask, display and display.named(
            f"pruning to {reached:.0%}"))
        kept = [[h for h in range(heads) if mask[layer, h]] for layer in range(layers)]
        for layer, chosen in heads_to_prune(measured, reached, kept).items():
            mask[layer, chosen] = 0.0
    return {layer: chosen for layer in range(layers)
            if (chosen := [h for h in range(heads) if not mask[layer, h]
                           and (layer, h) not in already])}


def recover(head, tokenizer, epochs: int, learning_rate: float, batch_size: int,
            max_len: int | None = None, seed: int = FinetuneConfig.seed, printer=print,
            task=None, display: ProgressDisplay | None = None) -> None:
    """Fine-tune a pruned ``head`` again for ``epochs`` passes over all train examples of
    ``task`` (default: MRPC's) in batches of ``batch_size``, encoded ``max_len`` tokens long
    (default: the task's length; never more than the model's positions).

    Pruning removes what the remaining heads had learnt to work with; a short second
    fine-tuning with fine-tuning's own optimizer at a low ``learning_rate`` (``heads``
    passes :data:`~nlp_tutorials.training.config.RECOVERY_LEARNING_RATE` unless told) lets
    them adjust. The optimizer is dropped afterwards, as ``finetune`` drops it before saving.
    Each epoch's progress is shown on ``display`` if given.
    """
    task = task or get_task(FinetuneConfig.task)
    max_len = min(max_len or task.max_len, head.backbone.config.max_position_embeddings)
    train = task.shape.for_model(task.encode(tokenizer, task.read("train"), max_len))
    keras.utils.set_random_seed(seed)
    compile_for_epochs(head, train, epochs, batch_size, learning_rate)
    train_epochs(head, train, epochs, batch_size, np.random.default_rng(seed),
                 tf.distribute.get_strategy(), lambda epoch, metrics: printer(
                     f"recovery epoch {epoch}: train loss {metrics['loss']:.3f}"), display)
    head.optimizer = None


def heads_to_prune(importance: np.ndarray, share: float, kept=None) -> dict:
    """``{layer: [head, ...]}``: the least important ``share`` of all heads, each layer keeping
    at least one. ``kept``: per layer the heads the model still has (default: all); heads
    already pruned count towards the share."""
    layers, heads = importance.shape
    kept = kept or [list(range(heads))] * layers
    left = {layer: len(kept[layer]) for layer in range(layers)}
    wanted = round(share * layers * heads) - (layers * heads - sum(left.values()))
    chosen = {}
    for flat in np.argsort(importance.ravel(), kind="stable"):
        layer, head = divmod(int(flat), heads)
        if wanted <= 0:
            break
        if head in kept[layer] and left[layer] > 1:
            chosen.setdefault(layer, []).append(head)
            left[layer] -= 1
            wanted -= 1
    return {layer: sorted(chosen_heads) for layer, chosen_heads in sorted(chosen.items())}


def plot_importance(importance_map, entropy_map, path) -> Path:
    """Two layers x heads heatmaps side by side: importance and attention entropy."""
    plt = pyplot()
    layers, heads = importance_map.shape
    fig, axes = plt.subplots(1, 2, figsize=(2 + 0.9 * heads, 1.2 + 0.5 * layers))
    for axis, values, title in ((axes[0], importance_map, "importance (normalised per layer)"),
                                (axes[1], entropy_map, "attention entropy (nats)")):
        image = axis.imshow(values, cmap="viridis", aspect="auto")
        axis.set(title=title, xlabel="head", ylabel="layer", xticks=range(heads),
                 yticks=range(layers))
        fig.colorbar(image, ax=axis)
    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def plot_study(study: dict, path, task, split: str = "test") -> Path:
    """The task's first score on ``split`` (test accuracy for MRPC) against the share of heads
    masked: importance order and random order."""
    metric, printed = task.metrics[0]
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(6, 4))
    shares = [100 * share for share in study["shares"]]
    for key, label in (("importance_order", "least important first"),
                       ("random_order", "random order (mean)")):
        axis.plot(shares, [100 * s[metric] for s in study[key]], marker="o", label=label)
    axis.set(xlabel="heads masked (%)", ylabel=f"{task.title} {split} {printed} (%)",
             title="Masking attention heads")
    axis.grid(alpha=0.3)
    axis.legend()
    fig.tight_layout()
    try:
        return save_figure(fig, path)
    finally:
        plt.close(fig)


def heads_command(settings, printer=print) -> dict:
    """``bert heads``: importance and entropy on the task's dev examples, then the study and
    pruning (and, given ``recover_epochs``, the pruned model's recovery at
    ``recover_learning_rate`` in batches of ``recover_batch_size``).

    ``settings`` is the command's :class:`~nlp_tutorials.cli.settings.HeadsSettings`, whose
    fields say what each does and their defaults. The dev examples are the task's dev file,
    read from ``settings.data`` (a task other than the shipped MRPC needs it, its folder is not
    saved with the model); a task with no dev file (MRPC's shipped copy) holds out its last
    ``dev_size`` train examples, as ``finetune`` did. Before any work, the folders it writes
    are checked and held (:func:`~nlp_tutorials.system.outputs.writing`): ``output_dir`` and
    ``pruned_dir`` (default ``<model_dir>_pruned<percent>``) may be neither ``model_dir`` nor
    inside it, and ``model_dir`` (which gets ``head_importance.json``) and ``pruned_dir`` are
    locked.
    """
    model_dir, prune = settings.model_dir, settings.prune
    outputs = [Output("--model-dir", model_dir, folder=True, lock=True,
                      results=(IMPORTANCE_FILE,)),
               Output("--output-dir", settings.output_dir, folder=True)]
    pruned_dir = None
    if prune is not None:
        pruned_dir = Path(settings.pruned_dir or f"{Path(model_dir)}_pruned{round(100 * prune)}")
        outputs.append(Output("--pruned-dir", pruned_dir, folder=True, lock=True,
                              results=(MODEL_FILE,)))
    with writing(outputs, {"--model-dir": model_dir, "--data": settings.data}):
        return score_heads(settings, pruned_dir, printer)


def score_heads(settings, pruned_dir, printer=print) -> dict:
    """The work of :func:`heads_command`, its folders checked (``pruned_dir``: where the pruned
    model goes, with ``settings.prune``)."""
    model_dir, output_dir = settings.model_dir, settings.output_dir
    head, tokenizer, task = load_finetuned(model_dir)
    task = task_with_data(task, model_dir, settings.data, settings.dev_size)
    max_len = task.max_len  # load_finetuned fitted it to the model's positions
    dev = task.examples("dev")
    if not dev:
        raise UserError(f"--dev-size {task.held_out()}: importance needs dev pairs; expected 1 "
                        f"or more")
    dev_arrays = task.shape.for_model(task.encode(tokenizer, dev, max_len))
    display = ProgressDisplay(printer)
    importance_map = importance(head, dev_arrays, display=display.named("importance"))
    entropy_map = entropy(head, dev_arrays, display.named("entropy"))
    path = Path(model_dir) / IMPORTANCE_FILE
    write_text_atomic(path, json.dumps({
        "importance": importance_map.tolist(), "entropy": np.where(
            np.isnan(entropy_map), None, entropy_map).tolist(), "dev_pairs": len(dev),
        "kept_heads": kept_heads(head)}, indent=1) + "\n")
    picture = plot_importance(importance_map, entropy_map, Path(output_dir) / "head_importance.png")
    noun = task.shape.example_noun(task, dev)  # pairs, sentences or examples
    printer(f"head importance of {len(dev)} dev {noun} written to {path}; picture {picture}")
    result = {"importance": importance_map, "entropy": entropy_map}
    if settings.study:
        result["study"] = study_split(head, tokenizer, task, max_len, importance_map,
                                      settings.random_orders, model_dir, output_dir, printer,
                                      display.named("study"))
    if settings.prune is not None:
        spec = iterative_heads_to_prune(head, dev_arrays, settings.prune, display=display)
        pruned = pruned_head_model(head, spec)
        if settings.recover_epochs:
            recover(pruned, tokenizer, settings.recover_epochs, settings.recover_learning_rate,
                    settings.recover_batch_size, max_len=max_len, printer=printer, task=task,
                    display=display.named("recovery"))
        save_head(pruned, pruned_dir)
        tokenizer.save(pruned_dir)
        save_task(pruned_dir, task)
        printer(f"pruned {sum(map(len, spec.values()))} heads {spec}: model written to "
                f"{pruned_dir}")
        result["pruned"] = spec
    return result


def study_split(head, tokenizer, task, max_len: int, importance_map, random_orders: int,
                model_dir, output_dir, printer=print,
                display: ProgressDisplay | None = None) -> dict:
    """``--study``: the masking study on the task's test split, or on dev when the task has no
    test file (GLUE's test labels are not public); written beside the model and drawn, both
    naming the split; its passes shown on ``display`` if given."""
    split = "test" if task.examples("test") else "dev"
    examples = task.examples(split)
    if split == "dev":
        printer(f"{task.title} has no test file: the study scores the dev split")
    arrays = task.encode(tokenizer, examples, max_len)
    study = masking_study(head, task, examples, arrays, importance_map, random_orders,
                          printer=printer, display=display)
    study["split"] = split
    write_text_atomic(Path(model_dir) / STUDY_FILE, json.dumps(study, indent=1) + "\n")
    picture = plot_study(study, Path(output_dir) / "head_masking_study.png", task, split)
    printer(f"study written to {Path(model_dir) / STUDY_FILE}; picture {picture}")
    return study
