"""The attention explorer: one self-contained HTML page to browse a model's attention.

``python -m nlp_tutorials.bert explore`` (or ``gpt``, ``transformer``) writes a page with three
views of the attention of a few examples: the *head view* (tokens in two columns, a line from
each query to each key as opaque as its weight), the *model view* (every layer x head as a small
picture) and the *neuron view* (the query and key vectors, and their element-wise products,
that sum to each attention score). See docs/explorer.md.

The page is one file, scripts, styles and numbers inside, so it opens from disk with no network.
Numbers are stored compactly (the page says so too):

- attention weights (in [0, 1]) as ``round(255 * weight)`` bytes: the page reads back
  ``byte / 255``, at most :data:`WEIGHT_ERROR` = 1/510 from the exported float;
- query and key vectors as signed bytes, one scale per (example, stack, layer, head):
  ``round(127 * v / max|v|)``, read back within half a scale step (:func:`vector_error`);
- each example's bytes deflate-compressed (zlib), then base64; the browser inflates them with
  its built-in ``DecompressionStream``.

Padding is left out: every example keeps its real tokens only. This module never imports
TensorFlow; the command line collects the numbers (:func:`nlp_tutorials.analysis.visual.collect_attention`)
or reads an exported pickle, and hands them here.
"""
import base64
import json
import os
import shutil
import zlib
from importlib import resources
from pathlib import Path

import numpy as np

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.json_files import read_json_object
from nlp_tutorials.system.values import check_between, check_finite, number_array, required
from nlp_tutorials.analysis.visual import AXES, PAD, _check_index

WEIGHT_LEVELS = 255  # attention weights are stored as bytes 0..255 = weight 0..1
WEIGHT_ERROR = 0.5 / WEIGHT_LEVELS  # the most a stored weight can differ from the exported one
VECTOR_LEVELS = 127  # query/key components are stored as signed bytes -127..127
VIEWS = ("head", "model", "neuron")
DEFAULT_EXAMPLES = 8  # examples run through a model: each one costs page size
NOTE = ("Numbers in this file are stored compactly: each attention weight as one byte "
        "(weight = byte / 255, within 1/510 ≈ 0.002 of the model's), each query and key "
        "component as a signed byte with one scale per example, layer and head (within half a "
        "step, max|v| / 254), deflate-compressed and base64-encoded inside the page. Padding is "
        "left out; lines of weight under 3/255 (about 1%) are not drawn.")
IMPORTANCE_FILE = "head_importance.json"  # written by `bert heads` (nlp_tutorials.analysis.bertology)
TEMPLATE_FILES = ("template.html", "explorer.css", "explorer.js")


def quantize_weights(weights) -> np.ndarray:
    """Attention weights in [0, 1] (any shape) -> uint8 ``round(255 * w)`` of the same shape."""
    return np.clip(np.rint(np.asarray(weights, np.float64) * WEIGHT_LEVELS), 0,
                   WEIGHT_LEVELS).astype(np.uint8)


def quantize_vectors(vectors):
    """Vectors [heads, step, size] -> (int8 of the same shape, float scale per head [heads]).

    Component ``v`` of head h is stored as ``round(v / scale[h])`` with ``scale[h] = max|v| /
    127`` over that head, so the page reads back ``byte * scale[h]`` (:func:`vector_error`).
    """
    vectors = np.asarray(vectors, np.float64)
    peak = np.max(np.abs(vectors), axis=(1, 2))  # [heads]
    scale = np.where(peak > 0, peak / VECTOR_LEVELS, 1.0)
    stored = np.rint(vectors / scale[:, None, None]).astype(np.int8)
    return stored, scale


def vector_error(scale) -> float:
    """The most a stored component can differ from the exported one: half a scale step."""
    return 0.5 * float(scale)


def unpadded_positions(tokens) -> list[int]:
    """Positions of real tokens (all positions if every one is padding)."""
    return [i for i, token in enumerate(tokens) if token != PAD] or list(range(len(tokens)))


def pack(arrays) -> str:
    """Concatenate byte arrays, deflate them and return base64 text (the page inflates it)."""
    raw = b"".join(np.ascontiguousarray(array).tobytes() for array in arrays)
    return base64.b64encode(zlib.compress(raw, 9)).decode("ascii")


def example_blob(data, case) -> dict:
    """One example's tokens and packed numbers, as the page reads them.

    Per stack (entry) the packed bytes are, in order: the weights of every layer, uint8
    [layers, heads, q_len, k_len]; then, when the data has vectors, every layer's queries, int8
    [layers, heads, q_len, size], and every layer's keys, int8 [layers, heads, k_len, size].
    The float scales of the vectors go beside them as ``query_scales``/``key_scales``
    [layers][heads]. A fine-tuned model's answer to the example (``data["answers"]``, see
    :meth:`~nlp_tutorials.tasks.base.Task.shown_answer`) goes as ``answer``.
    """
    keep = {axis: unpadded_positions(data[axis][case]) for axis in ("src", "tgt") if axis in data}
    example = {axis: [data[axis][case][i] for i in kept] for axis, kept in keep.items()}
    if "segments" in data:
        example["segments"] = [data["segments"][case][i] for i in keep["src"]]
    if data.get("answers") is not None:  # a task model's answer (Task.shown_answer)
        example["answer"] = data["answers"][case]
    example["entries"] = {}
    for entry, layers in data["attentions"].items():
        rows, cols = (keep[axis] for axis in AXES[entry])
        arrays = [quantize_weights(layer[case][:, rows][:, :, cols]) for layer in layers]
        packed = {"size": 0}
        if "queries" in data:
            queries = [quantize_vectors(layer[case][:, rows]) for layer in data["queries"][entry]]
            keys = [quantize_vectors(layer[case][:, cols]) for layer in data["keys"][entry]]
            packed = {"size": int(data["queries"][entry][0].shape[-1]),
                      "query_scales": [scale.tolist() for _, scale in queries],
                      "key_scales": [scale.tolist() for _, scale in keys]}
            arrays += [stored for stored, _ in queries] + [stored for stored, _ in keys]
        example["entries"][entry] = {"bytes": pack(arrays), **packed}
    return example


def page_data(data, importance=None, initial=None, title="") -> dict:
    """Everything the page needs, ready for JSON: shapes, examples, importance, start view."""
    attentions = data["attentions"]
    first = next(iter(attentions.values()))
    return {
        "title": title or f"{data['model']} attention",
        "model": data["model"],
        "entries": list(attentions),
        "axes": {entry: AXES[entry] for entry in attentions},
        "layers": len(first),
        "heads": int(first[0].shape[1]),
        "has_vectors": "queries" in data,
        "examples": [example_blob(data, case) for case in range(len(data["src"]))],
        "importance": importance,
        # Causal stacks: a query sees only keys up to itself (the neuron view's softmax).
        "causal": {entry: entry == "decoder" or data["model"] == "gpt" for entry in attentions},
        "note": NOTE,
        "weight_levels": WEIGHT_LEVELS,
        "vector_levels": VECTOR_LEVELS,
        "initial": initial or {},
    }


def read_importance(path, layers: int, heads: int):
    """``importance`` [layers][heads] of a head_importance.json: numbers of the model's shape,
    finite and not negative (the page draws each as a bar); a UserError naming the file and
    what is wrong (a value, and where it is) when they are not."""
    expected = (f"[{layers}, {heads}] finite numbers >= 0 (layers x heads of this model), as "
                f"`bert heads` writes")
    values = required(read_json_object(path), "importance", path, expected)
    array = number_array(values, "'importance'", path, expected)
    if array.shape != (layers, heads):
        raise UserError(f"{path}: 'importance' holds shape {list(array.shape)}; expected "
                        f"{expected}")
    check_finite(array, "'importance'", path, expected, ("layer", "head"))
    return check_between(array, "'importance'", path, 0, None, expected,
                         ("layer", "head")).tolist()


def importance_beside(folder, data):
    """The head importance in ``folder``/head_importance.json if there is one, else None.

    Only the first stack ("encoder") is scored by `bert heads`.
    """
    path = Path(folder) / IMPORTANCE_FILE
    if not path.is_file():
        return None
    layers = data["attentions"]["encoder"]
    return read_importance(path, len(layers), layers[0].shape[1])


def check_initial(data, example: int, layer: int, head: int, view: str) -> dict:
    """The view the page opens on; a UserError names any index out of range."""
    first = next(iter(data["attentions"].values()))
    n = len(data["src"])
    _check_index("--example", example, n, f"the data holds {n} examples")
    _check_index("--layer", layer, len(first), f"the model has {len(first)} layers")
    heads = first[0].shape[1]
    _check_index("--head", head, heads, f"the model has {heads} heads")
    if view not in VIEWS:
        raise UserError(f"--view {view!r}: expected one of {', '.join(VIEWS)}")
    return {"example": example, "layer": layer, "head": head, "view": view}


def render_html(page: dict) -> str:
    """The page: the template with its style, script and ``page`` (as JSON) written inside."""
    folder = resources.files(__package__)
    html, css, js = (folder.joinpath(name).read_text(encoding="utf-8")
                     for name in TEMPLATE_FILES)
    # "</" would end the <script> element early if a token contained "</script>".
    payload = json.dumps(page, separators=(",", ":")).replace("</", "<\\/")
    title = page["title"].replace("&", "&amp;").replace("<", "&lt;")
    return (html.replace("{{TITLE}}", title).replace("/*{{CSS}}*/", css)
            .replace("/*{{JS}}*/", js).replace("{{DATA}}", payload))


def write_explorer(path, data, importance=None, initial=None, title="") -> Path:
    """Write the explorer page for ``data`` (an attention pickle's contents) to ``path``.

    Written atomically: a failure leaves no half-written page. An output path that cannot be
    written is a one-line UserError.
    """
    path = Path(path)
    html = render_html(page_data(data, importance, initial, title))
    try:
        write_text_atomic(path, html)
    except OSError as err:
        raise UserError(f"{path}: cannot write the explorer page ({err.strerror or err}); "
                        f"expected a writable file path") from None
    return path


def collect_from_model(model_name: str, model_dir, n: int, data_dir=None) -> dict:
    """Run the model in ``model_dir`` on ``n`` examples; the contents of an attention pickle.

    ``transformer``: the date model ``transformer train`` saves, on held-out dates. ``bert`` /
    ``gpt``: a pre-trained model folder (checkpoints, from ``train``), on MRPC test pairs, or
    a fine-tuned one (``model.keras``, from ``bert finetune``: its BERT backbone) on its
    task's examples (see :func:`collect_task_attention`), with its answers (``answers``).
    Loads TensorFlow.
    """
    from nlp_tutorials.analysis.visual import attention_data

    found = run_model(model_name, model_dir, n, data_dir)
    answers = found.pop("answers", None)
    data = attention_data(**found, where=model_dir)
    return {**data, "answers": answers} if answers is not None else data


def run_model(model_name: str, model_dir, n: int, data_dir=None) -> dict:
    """:func:`collect_from_model`'s numbers, as keyword arguments of ``attention_data`` (and
    a fine-tuned model's ``answers``)."""
    from nlp_tutorials.system.startup import start_tensorflow

    start_tensorflow()
    if model_name == "transformer":
        from nlp_tutorials.analysis.visual import collect_date_attention
        from nlp_tutorials.training.seq2seq import load

        return collect_date_attention(load(model_dir), n)
    from nlp_tutorials.finetuned.folders import MODEL_FILE
    from nlp_tutorials.analysis.visual import collect_attention

    if (Path(model_dir) / MODEL_FILE).is_file():
        from nlp_tutorials.finetuned.folders import load_finetuned

        return collect_task_attention(*load_finetuned(model_dir), n, model_dir, data_dir)
    from nlp_tutorials.training.checkpoints import restore_model

    model, tokenizer = restore_model(model_dir, model_name)
    return collect_attention(model, tokenizer, n)


def collect_task_attention(head, tokenizer, task, n: int, model_dir, data_dir=None) -> dict:
    """A fine-tuned model's attention on the first ``n`` examples of its task, and its answer
    to each: the keyword arguments of ``attention_data`` with ``answers`` (one JSON value per
    example, :meth:`~nlp_tutorials.tasks.base.Task.shown_answer`; None for a shape that shows
    none yet).

    The examples are the task's test split, or its dev split when it has no test file, read
    from ``data_dir`` (a task other than the shipped MRPC needs it). They are encoded as
    ``predict`` encodes, to the task's length; the page shows one row per example: the
    chosen ending's for a multiple-choice example, the first window's for a long one.
    """
    from nlp_tutorials.analysis.attention_capture import attention_vectors
    from nlp_tutorials.analysis.visual import as_numpy
    from nlp_tutorials.finetuned.folders import task_with_data
    from nlp_tutorials.finetuned.inference import head_outputs

    task = task_with_data(task, model_dir, data_dir, task.dev_size)
    examples = (task.examples("test") or task.examples("dev"))[:n]
    if not examples:
        raise UserError(f"{model_dir}: {task.title} has no test or dev examples to show; "
                        f"expected a test or dev file in --data")
    arrays = task.encode(tokenizer, examples, task.max_len)
    predictions = task.predictions(head_outputs(head, arrays), arrays, examples)
    rows = task.shape.shown_rows(arrays, predictions)  # (row, choice or None) per example
    ids = np.stack([arrays["input_ids"][row][choice] if choice is not None
                    else arrays["input_ids"][row] for row, choice in rows])  # [n, max_len]
    segments = np.stack([arrays["token_type_ids"][row][choice] if choice is not None
                         else arrays["token_type_ids"][row] for row, choice in rows])
    pad = head.backbone.config.pad_token_id
    # Columns of padding alone carry no attention worth drawing.
    longest = max(int(np.max(np.sum(ids != pad, axis=1))), 1)
    ids, segments = ids[:, :longest], segments[:, :longest]
    found = attention_vectors(head.backbone, {"input_ids": ids, "token_type_ids": segments})
    return {"model_name": head.backbone.config.model_type,
            "src_tokens": [tokenizer.convert_ids_to_tokens(row) for row in ids],
            "segments": segments.tolist(), **as_numpy(found),
            "answers": [shown_answer(task, e, p, {name: value[row] for name, value in
                                                  arrays.items()})
                        for e, p, (row, _) in zip(examples, predictions, rows)]}


def shown_answer(task, example, prediction, row: dict):
    """The task's answer to show beside ``example``, or None where its shape shows none yet."""
    try:
        return task.shown_answer(example, prediction, row)
    except NotImplementedError:
        return None


def first_examples(data: dict, n: int) -> dict:
    """``data`` (an attention pickle's contents) cut to its first ``n`` examples."""
    cut = {key: data[key][:n] for key in ("src", "tgt", "segments", "answers")
           if data.get(key) is not None}
    for kind in ("attentions", "queries", "keys"):
        if kind in data:
            cut[kind] = {entry: [layer[:n] for layer in layers]
                         for entry, layers in data[kind].items()}
    return {**data, **cut}


def explore(settings) -> Path:
    """``explore``: collect (or read) the attention, check the start view, write the page.

    ``settings`` is the command's :class:`~nlp_tutorials.cli.settings.ExploreSettings`. From
    its ``input`` pickle (an export) all its examples, or the first ``n``; else from its
    ``model_dir``, ``n`` examples (default 8): a fine-tuned model's from its task's files in
    ``data`` (default: the shipped MRPC), its answer beside each. The head importance comes
    from the ``importance`` file, else from a head_importance.json beside the model or pickle.
    """
    model_name, pickle_path, model_dir = settings.model_type, settings.input, settings.model_dir
    n, importance_path = settings.n, settings.importance
    if pickle_path:
        from nlp_tutorials.analysis.visual import load_attention_pickle

        data = load_attention_pickle(pickle_path, model_name)
        if data["model"] != model_name:
            raise UserError(f"{pickle_path}: holds {data['model']} attention; expected "
                            f"{model_name} (use `python -m nlp_tutorials.{data['model']} "
                            f"explore`)")
        data = first_examples(data, n or len(data["src"]))
        folder, source = Path(pickle_path).parent, pickle_path
    else:
        data = collect_from_model(model_name, model_dir, n or DEFAULT_EXAMPLES, settings.data)
        folder, source = model_dir, model_dir
    initial = check_initial(data, settings.example, settings.layer, settings.head, settings.view)
    if importance_path:
        encoder = data["attentions"]["encoder"]
        importance = read_importance(importance_path, len(encoder), encoder[0].shape[1])
    else:
        importance = importance_beside(folder, data)
    return write_explorer(settings.output, data, importance, initial,
                          title=f"{model_name} attention: {Path(source).name}")


def find_chromium():
    """The Chromium the tests and benchmarks/explorer_speed.py drive, or None: the file named by
    ``NLP_TUTORIALS_CHROMIUM``, else ``chromium`` or ``chromium-browser`` on the PATH."""
    named = os.environ.get("NLP_TUTORIALS_CHROMIUM")
    if named:
        return named if Path(named).is_file() else None
    return shutil.which("chromium") or shutil.which("chromium-browser")
