"""Attention pickles and their pictures: heatmaps and the "line" view.

``export`` writes a pickle in the original tutorial's format; ``plot`` reads it back and draws it::

    {"model": "bert" | "gpt" | "transformer",
     "src": [[token string per position] per example],    # length step each, padding as "[PAD]"
     "attentions": {"encoder": [float32 array per layer, shape [n, heads, step, step]]}}

The seq2seq Transformer also has ``"tgt"`` (target tokens, same layout as ``"src"``) and two more
attention entries: ``"decoder"`` (self-attention, [n, heads, tgt_step, tgt_step]) and
``"encoder_decoder"`` (cross-attention, [n, heads, tgt_step, src_step]: queries are target
positions, keys are source positions). For GPT, ``"encoder"`` is the causal self-attention stack,
so its upper triangle is zero. In every array, ``[example, head, i, j]`` is how much query position
``i`` attends to key position ``j``.

Exports also hold what the explorer (:mod:`nlp_tutorials.analysis.explorer`) shows in its neuron view,
the queries and keys whose dot products made each attention score, and for GPT/BERT the segment
of every token (optional: older pickles lack them)::

     "queries": {entry: [float32 array per layer, shape [n, heads, query_step, head_size]]},
     "keys":    {entry: [float32 array per layer, shape [n, heads, key_step, head_size]]},
     "segments": [[0 or 1 per position] per example]    # GPT/BERT: first or second sentence

``plot`` reads a pickle with :mod:`nlp_tutorials.system.safe_pickle`, which builds only dicts, lists,
tuples, strings, numbers and numeric numpy arrays and refuses everything else (``os.system``,
``eval``, classes, object arrays) before it runs, so an attention pickle from someone else cannot
run code here. ``pickle.load`` on the same file would run whatever it names: read shared pickles
with this module (or :mod:`nlp_tutorials.system.safe_pickle`), never with ``pickle.load``.

This module never imports TensorFlow, and imports matplotlib only inside the plotting functions,
so the command line stays fast and works without a display.
"""
import io
import pickle
from pathlib import Path

import numpy as np

from nlp_tutorials.analysis.attention_capture import attention_vectors
from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import open_regular, write_bytes_atomic
from nlp_tutorials.system.safe_pickle import ADMITTED, Refused, load_data
from nlp_tutorials.system.values import check_between, check_finite, number_array, shown

PAD = "[PAD]"
# Attention entries each model has, and which token lists label their (query, key) axes.
ENTRIES = {
    "bert": ("encoder",),
    "gpt": ("encoder",),
    "transformer": ("encoder", "decoder", "encoder_decoder"),
}
AXES = {"encoder": ("src", "src"), "decoder": ("tgt", "tgt"), "encoder_decoder": ("tgt", "src")}
ATTENTION_WEIGHTS = "finite attention weights in [0, 1]"
ATTENTION_AXES = ("example", "head", "query", "key")
# The arrays an attention pickle may hold as numbers (numpy kinds): booleans count as 0 and 1,
# as the safe unpickler admits them; complex numbers, which it also admits, are no weights.
PICKLED_NUMBERS = "biuf"
# How far float32 rounding may carry a softmax weight past 0 or 1 (the plots clip it).
WEIGHT_SLACK = 1e-3


def save_attention_pickle(path, model_name, src_tokens, attentions, tgt_tokens=None,
                          queries=None, keys=None, segments=None) -> Path:
    """Check the attention matrices against the tokens and pickle them atomically to ``path``.

    src_tokens: [n][src_step] token strings, padding as "[PAD]".
    attentions: {entry: [array per layer, shape [n, heads, query_step, key_step]]}; arrays may be
        any float type (or tensors numpy can read) and are stored as float32.
    tgt_tokens: [n][tgt_step] target tokens, required for (and only used by) "transformer".
    queries, keys: optional, both or neither: {entry: [array per layer, shape [n, heads,
        query_step or key_step, head_size]]}, the vectors whose scaled dot products (plus the
        mask) are the softmax's input.
    segments: optional [n][src_step] segment ids (GPT/BERT).
    Returns the path written.
    """
    path = Path(path)
    data = attention_data(model_name, src_tokens, attentions, tgt_tokens, queries, keys,
                          segments, where=path)
    write_bytes_atomic(path, pickle.dumps(data, protocol=pickle.HIGHEST_PROTOCOL))
    return path


def attention_data(model_name, src_tokens, attentions, tgt_tokens=None, queries=None, keys=None,
                   segments=None, where="attention data") -> dict:
    """The checked contents of an attention pickle, as :func:`load_attention_pickle` returns
    them (arguments as :func:`save_attention_pickle`'s); errors name ``where``."""
    data = {"model": model_name, "src": src_tokens, "attentions": attentions}
    optional = {"tgt": tgt_tokens, "queries": queries, "keys": keys, "segments": segments}
    data.update({key: value for key, value in optional.items() if value is not None})
    return _validate(data, where)


def collect_attention(model, tokenizer, n, split="test", pairs=None) -> dict:
    """Run the first ``n`` MRPC pairs of ``split`` (or of ``pairs``, when the caller has read
    them already) through a GPT/BERT; the pickle's contents.

    Pairs are encoded as in training (``[CLS] s1 [SEP] s2 [SEP]``, truncated to the model's
    ``max_position_embeddings``), padded to the longest pair only. Returns the keyword
    arguments of :func:`save_attention_pickle`, queries, keys and segments included.
    """
    from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc

    pairs = (load_mrpc(split) if pairs is None else pairs)[:n]
    encoded = MrpcTask().encode(tokenizer, pairs, model.config.max_position_embeddings)
    # Columns of padding alone carry no attention worth drawing (a model of 512 positions
    # would otherwise export [n, heads, 512, 512] per layer for 50-token pairs).
    longest = int(np.max(np.sum(encoded["input_ids"] != model.config.pad_token_id, axis=1)))
    ids, segments = (encoded[name][:, :max(longest, 1)]
                     for name in ("input_ids", "token_type_ids"))
    found = attention_vectors(model, {"input_ids": ids, "token_type_ids": segments})
    return {"model_name": model.config.model_type,
            "src_tokens": [tokenizer.convert_ids_to_tokens(row) for row in ids],
            "segments": segments.tolist(), **as_numpy(found)}


def as_numpy(found) -> dict:
    """``{"attentions", "queries", "keys"}`` of ``attention_vectors`` as float32 numpy arrays."""
    return {kind: {entry: [np.asarray(layer, np.float32) for layer in layers]
                   for entry, layers in stacks.items()}
            for kind, stacks in found.items()}


def export_attention(model, tokenizer, n, path, split="test", pairs=None) -> Path:
    """Pickle the attention, queries and keys of the first ``n`` MRPC pairs of ``split`` (or
    of ``pairs``; see :func:`collect_attention`). Returns the path written."""
    return save_attention_pickle(path, **collect_attention(model, tokenizer, n, split, pairs))


def collect_date_attention(model, n: int) -> dict:
    """Attention, queries and keys of the first ``n`` held-out dates, the decoder reading the
    target: the keyword arguments of :func:`save_attention_pickle`."""
    import tensorflow as tf

    from nlp_tutorials.tasks import dates

    held_out = dates.split()[1][:n]
    src, tgt = dates.encode_sources(held_out), dates.encode_targets(held_out)[:, :-1]
    found = attention_vectors(model, {"src_ids": tf.constant(src), "tgt_ids": tf.constant(tgt)})
    return {"model_name": "transformer",
            "src_tokens": [[dates.VOCAB[i] for i in row] for row in src],
            "tgt_tokens": [[dates.VOCAB[i] for i in row] for row in tgt], **as_numpy(found)}


def export_date_attention(model, n: int, path) -> Path:
    """Pickle :func:`collect_date_attention` of the first ``n`` held-out dates."""
    return save_attention_pickle(path, **collect_date_attention(model, n))


def load_attention_pickle(path, model_name="bert") -> dict:
    """Load and check an attention pickle; arrays come back as float32 [n, heads, q_step, k_step].

    The file is read with :func:`nlp_tutorials.system.safe_pickle.load_data`: a pickle naming anything
    but data (a function, a class, an object array) is refused in one line naming it, and
    nothing it names is run. ``model_name`` only names the export command to suggest when the
    file is missing.
    """
    path = Path(path)
    if not path.exists():
        raise UserError(
            f"{path}: no attention pickle; run `python -m nlp_tutorials.{model_name} export` first")
    try:
        with open_regular(path) as handle:
            data = load_data(handle)
    except UserError:  # not a regular file: one line already
        raise
    except Refused as refused:
        raise UserError(f"{path}: refused to load {refused.what}: {ADMITTED}") from None
    except OSError as err:
        raise UserError(f"{path}: cannot read the attention pickle ({err.strerror})") from None
    except Exception as err:  # a damaged or foreign file can fail in any of pickle's many ways
        raise UserError(
            f"{path}: not an attention pickle ({type(err).__name__}: {str(err)[:200]}); "
            f"expected one written by `python -m nlp_tutorials.{model_name} export`"
        ) from None
    return _validate(data, path)


def plot_heatmaps(data, case, output_dir, prefix) -> list[Path]:
    """Write one PNG per attention entry: a grid of layers (rows) x heads (columns) heatmaps.

    data: as returned by :func:`load_attention_pickle`; case: index of the example to draw.
    Files are ``{output_dir}/{prefix}_{entry}_case{case}.png``; padding positions are left out.
    """
    _check_index("--case", case, len(data["src"]), f"the pickle holds {len(data['src'])} examples")
    plt = pyplot()
    paths = []
    for entry, layers in data["attentions"].items():
        (q_keep, q_tokens), (k_keep, k_tokens) = _unpadded(data, entry, case)
        n_layers, n_heads = len(layers), layers[0].shape[1]
        # Panels grow with the token count so ~30 labels per axis stay legible.
        side = max(2.2, 0.11 * max(len(q_tokens), len(k_tokens)) + 0.8)
        fig, axes = plt.subplots(
            n_layers, n_heads, squeeze=False, layout="constrained",
            figsize=(side * n_heads + 1, side * n_layers + 1),
        )
        try:
            for layer, weights in enumerate(layers):
                for head in range(n_heads):
                    ax = axes[layer, head]
                    image = ax.imshow(
                        weights[case, head][np.ix_(q_keep, k_keep)], vmin=0, vmax=1, cmap="viridis"
                    )
                    ax.set_title(f"layer {layer} head {head}", fontsize=8)
                    ax.set_yticks(range(len(q_tokens)), q_tokens, fontsize=5)
                    ax.set_xticks(range(len(k_tokens)), k_tokens, fontsize=5, rotation=90)
            fig.colorbar(image, ax=axes, shrink=0.5)
            fig.suptitle(f"{prefix} {entry} attention, case {case}\ny: queries, x: keys",
                         fontsize=9)
            paths.append(save_figure(fig, Path(output_dir) / f"{prefix}_{entry}_case{case}.png"))
        finally:
            plt.close(fig)
    return paths


def plot_lines(data, case, layer, head, output_dir, prefix, entry="encoder") -> Path:
    """Write the line view of one head: queries on the left, keys on the right, a line per pair.

    A line from query i to key j is as thick and opaque as the weight of i attending to j.
    File: ``{output_dir}/{prefix}_{entry}_lines_case{case}_layer{layer}_head{head}.png``.
    """
    if entry not in data["attentions"]:
        raise UserError(
            f"no {entry!r} attention in this {data['model']} pickle "
            f"(it has: {', '.join(data['attentions'])})"
        )
    layers = data["attentions"][entry]
    _check_index("--case", case, len(data["src"]), f"the pickle holds {len(data['src'])} examples")
    _check_index("--layer", layer, len(layers), f"the {entry} attention has {len(layers)} layers")
    n_heads = layers[0].shape[1]
    _check_index("--head", head, n_heads, f"the {entry} attention has {n_heads} heads")
    (q_keep, q_tokens), (k_keep, k_tokens) = _unpadded(data, entry, case)
    # Clip: float32 softmax can exceed 1 by an ulp, and matplotlib rejects alpha > 1.
    weights = np.clip(layers[layer][case, head][np.ix_(q_keep, k_keep)], 0, 1).ravel()

    plt = pyplot()
    from matplotlib.collections import LineCollection

    rows = max(len(q_tokens), len(k_tokens))
    fig, ax = plt.subplots(figsize=(5, 0.2 * rows + 1.2), layout="constrained")
    try:
        segments = [[(0, -i), (1, -j)] for i in range(len(q_tokens)) for j in range(len(k_tokens))]
        colors = np.zeros((weights.size, 4))
        colors[:, 2], colors[:, 3] = 0.7, weights  # blue, alpha = weight
        ax.add_collection(LineCollection(segments, linewidths=4 * weights, colors=colors))
        for i, token in enumerate(q_tokens):
            ax.text(-0.03, -i, token, ha="right", va="center", fontsize=7)
        for j, token in enumerate(k_tokens):
            ax.text(1.03, -j, token, ha="left", va="center", fontsize=7)
        ax.set_xlim(-0.5, 1.5)
        ax.set_ylim(-rows + 0.5, 1)
        ax.axis("off")
        ax.set_title(f"{prefix} {entry}, case {case}, layer {layer} head {head}\n"
                     "queries (left) attend to keys (right)", fontsize=8)
        name = f"{prefix}_{entry}_lines_case{case}_layer{layer}_head{head}.png"
        return save_figure(fig, Path(output_dir) / name)
    finally:
        plt.close(fig)


def plot_all(pickle_path, output_dir, case: int, layer=None, head=None,
             model_name="bert") -> list[Path]:
    """Load a pickle and write heatmaps of every entry plus each entry's line view.

    Example ``case`` is drawn; the line view shows ``layer`` (default: the last) and ``head``
    (default: 0). Files are prefixed with the model name stored in the pickle. Returns the
    paths written.
    """
    data = load_attention_pickle(pickle_path, model_name)
    prefix = data["model"]
    # Line views first: they check --layer and --head before any heatmap is written.
    lines = [
        plot_lines(data, case, len(layers) - 1 if layer is None else layer,
                   0 if head is None else head, output_dir, prefix, entry)
        for entry, layers in data["attentions"].items()
    ]
    return plot_heatmaps(data, case, output_dir, prefix) + lines


def _validate(data, path) -> dict:
    """Return ``data`` with float32 arrays, or raise UserError naming ``path`` and what is wrong."""
    if not isinstance(data, dict):
        raise UserError(f"{path}: expected a dict with 'model', 'src' and 'attentions', "
                        f"got {type(data).__name__}")
    model = data.get("model")
    if not isinstance(model, str) or model not in ENTRIES:
        raise UserError(f"{path}: 'model' is {shown(model)}; expected one of {', '.join(ENTRIES)}")
    checked = {"model": model}
    for key in sorted({axis for entry in ENTRIES[model] for axis in AXES[entry]}):  # src, tgt
        checked[key] = _check_tokens(data.get(key), key, path)
    if "tgt" in checked and len(checked["tgt"]) != len(checked["src"]):
        raise UserError(f"{path}: 'tgt' has {len(checked['tgt'])} examples but 'src' has "
                        f"{len(checked['src'])}; expected one target per source")

    attentions = data.get("attentions")
    if not isinstance(attentions, dict) or set(attentions) != set(ENTRIES[model]):
        found = sorted(attentions, key=repr) if isinstance(attentions, dict) \
            else type(attentions).__name__
        raise UserError(f"{path}: 'attentions' holds {found}; a {model} pickle expects a dict "
                        f"with exactly {', '.join(ENTRIES[model])}")
    checked["attentions"] = {}
    for entry in ENTRIES[model]:
        queries, keys = (checked[axis] for axis in AXES[entry])
        checked["attentions"][entry] = _check_layers(
            attentions[entry], entry, (len(queries), len(queries[0]), len(keys[0])), path)
    checked.update(_check_vectors(data, checked, path))
    if data.get("segments") is not None:
        checked["segments"] = _check_segments(data["segments"], checked["src"], path)
    return checked


def _check_vectors(data, checked, path) -> dict:
    """The optional queries and keys of ``data``, checked against the attention they made."""
    if data.get("queries") is None and data.get("keys") is None:
        return {}
    vectors = {}
    for kind, axis in (("queries", 2), ("keys", 3)):
        stacks = data.get(kind)
        if not isinstance(stacks, dict) or set(stacks) != set(checked["attentions"]):
            raise UserError(f"{path}: {kind!r} must be a dict with exactly "
                            f"{', '.join(checked['attentions'])} (queries and keys go together)")
        vectors[kind] = {}
        for entry, attention in checked["attentions"].items():
            n, heads = attention[0].shape[:2]
            step = attention[0].shape[axis]
            layers = stacks[entry]
            if not isinstance(layers, (list, tuple)) or len(layers) != len(attention):
                raise UserError(f"{path}: {kind}[{entry!r}] must be a list of "
                                f"{len(attention)} arrays, one per layer")
            vectors[kind][entry] = [
                _check_vector_layer(layer, f"{kind}[{entry!r}] layer {index}", (n, heads, step),
                                    path) for index, layer in enumerate(layers)]
    for entry in checked["attentions"]:  # the page reads every layer's bytes with one size
        sizes = sorted({array.shape[3] for kind in vectors for array in vectors[kind][entry]})
        if len(sizes) > 1:
            raise UserError(f"{path}: queries and keys of {entry!r} have head sizes {sizes}; "
                            f"expected one head_size for every layer")
    return vectors


def _check_vector_layer(layer, field: str, shape: tuple, path) -> np.ndarray:
    """One layer of queries or keys as float32 [n, heads, step, head_size], finite."""
    expected = f"[{', '.join(map(str, shape))}, head_size] finite numbers"
    array = number_array(layer, field, path, expected, np.float32, PICKLED_NUMBERS)
    if array.ndim != 4 or array.shape[:3] != shape or not array.shape[3]:
        raise UserError(f"{path}: {field} has shape {array.shape}; expected "
                        f"[{', '.join(map(str, shape))}, head_size]")
    return check_finite(array, field, path, expected, ("example", "head", "position", "unit"))


def _check_segments(segments, src, path) -> list:
    """``segments`` as [n][src_step] non-negative ints, or a UserError."""
    shape = (len(src), len(src[0]))
    try:
        array = np.asarray(segments)
    except (TypeError, ValueError, MemoryError, RecursionError):
        array = None
    if array is None or array.shape != shape or array.dtype.kind not in "iub":
        raise UserError(f"{path}: 'segments' must be [n, step] = {list(shape)} integers, "
                        f"one segment id per source token")
    expected = "segment ids >= 0, one per source token"
    return check_between(array.astype(int), "'segments'", path, 0, None, expected,
                         ("example", "position")).tolist()


def _check_tokens(tokens, key, path) -> list:
    """Check ``tokens`` is [n][step] strings with n >= 1 and one step for all examples."""
    ok = isinstance(tokens, (list, tuple)) and len(tokens) > 0 and all(
        isinstance(seq, (list, tuple)) and all(isinstance(t, str) for t in seq) for seq in tokens)
    if not ok:
        raise UserError(f"{path}: {key!r} must be a non-empty list of token-string lists")
    steps = sorted({len(seq) for seq in tokens})
    if len(steps) != 1 or steps[0] == 0:
        raise UserError(f"{path}: {key!r} token lists have lengths {steps}; expected one "
                        f"non-zero step for every example (padding included, as {PAD!r})")
    return [list(seq) for seq in tokens]


def _check_layers(layers, entry, expected, path) -> list:
    """Check ``layers`` is a non-empty list of [n, heads, q_step, k_step] arrays, all one shape."""
    n, q_step, k_step = expected
    if not isinstance(layers, (list, tuple)) or not layers:
        raise UserError(f"{path}: attentions[{entry!r}] must be a non-empty list, "
                        "one array per layer")
    arrays = []
    for index, layer in enumerate(layers):
        field = f"attentions[{entry!r}] layer {index}"
        where = f"{path}: {field}"
        array = number_array(layer, field, path, ATTENTION_WEIGHTS, np.float32, PICKLED_NUMBERS)
        if array.ndim != 4:
            raise UserError(f"{where} has shape {array.shape}; expected 4-D "
                            f"[n, heads, query_step, key_step] = [{n}, heads, {q_step}, {k_step}]")
        heads = arrays[0].shape[1] if arrays else max(array.shape[1], 1)
        if array.shape != (n, heads, q_step, k_step):
            raise UserError(f"{where} has shape {array.shape}; expected [n, heads, query_step, "
                            f"key_step] = [{n}, {heads}, {q_step}, {k_step}] "
                            f"to match the token lists and layer 0")
        check_finite(array, field, path, ATTENTION_WEIGHTS, ATTENTION_AXES)
        arrays.append(check_between(array, field, path, -WEIGHT_SLACK, 1 + WEIGHT_SLACK,
                                    ATTENTION_WEIGHTS, ATTENTION_AXES))
    return arrays


def _unpadded(data, entry, case):
    """Return ((kept query positions, their tokens), (kept key positions, their tokens))."""
    axes = []
    for axis in AXES[entry]:
        tokens = data[axis][case]
        # An all-padding row keeps every position rather than drawing an empty plot.
        keep = [i for i, token in enumerate(tokens) if token != PAD] or list(range(len(tokens)))
        axes.append((keep, [tokens[i] for i in keep]))
    return axes


def _check_index(flag, value, count, holds):
    """Raise UserError unless 0 <= value < count, naming the valid range 0..count-1."""
    if not 0 <= value < count:
        raise UserError(f"{flag} {value} is out of range: {holds} (valid: 0..{count - 1})")


def pyplot():
    """Import pyplot on the Agg backend: no display needed, and no cost until something is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path) -> Path:
    """Render ``fig`` as PNG at a fixed dpi (so pixels follow figsize) and write it atomically."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    write_bytes_atomic(path, buffer.getvalue())
    return path
