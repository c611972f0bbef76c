"""Real pretrained BERT weights: HuggingFace's safetensors and Google's original TF checkpoints.

:meth:`BERT.from_pretrained(path) <nlp_tutorials.bert.BERT.from_pretrained>` reads a folder
holding either

- HuggingFace's ``config.json`` + ``model.safetensors`` (read with the ``safetensors`` package's
  numpy API: no PyTorch needed), or
- Google's ``bert_config.json`` + ``bert_model.ckpt.index`` / ``.data-*`` (read with
  ``tf.train.load_checkpoint``),

plus, optionally, ``vocab.txt``, whose line count must match ``vocab_size``.
:meth:`BERT.save_pretrained(dir) <nlp_tutorials.bert.BERT.save_pretrained>` writes HuggingFace's
format, which transformers' ``BertForPreTraining.from_pretrained`` reads as well.

The architecture is already BERT's, so loading is renaming: the table below pairs each of our
weights with its name in both formats. The masked-LM decoder needs no row: its matrix is the word
embedding table (tied, as in BERT), and only its bias is stored. A checkpoint without the
pre-training heads (sentence encoders such as all-MiniLM-L6-v2 ship none) leaves them freshly
initialised and says so in one line.
"""
from pathlib import Path
from typing import NamedTuple

import numpy as np

from nlp_tutorials.models.config import CONFIG_NAME, BertConfig
from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.files import require_regular, write_bytes_atomic
from nlp_tutorials.system.values import at
from nlp_tutorials.text.tokenization import VOCAB_NAME, read_vocab

SAFETENSORS_NAME = "model.safetensors"
GOOGLE_CHECKPOINT = "bert_model.ckpt"

# (our weight, HuggingFace name, Google name). Our weight is the Keras variable path below the
# model; a LAYER row is repeated for every encoder layer i under the prefixes
# "encoder/layer_{i}/", "bert.encoder.layer.{i}." and "bert/encoder/layer_{i}/".
#
# Layouts: a Keras Dense kernel is [in, out], as Google's TF kernels; torch's Linear weight is
# [out, in], so a HuggingFace "*.weight" that lands on our "*/kernel" is transposed. Google's
# next-sentence "output_weights" is [2, hidden], torch's layout: transposed too. Everything
# else (embedding tables [rows, hidden], biases, LayerNorm gamma/beta) is copied as is.
EMBEDDINGS = (
    ("embeddings/words/embeddings", "bert.embeddings.word_embeddings.weight",
     "bert/embeddings/word_embeddings"),
    ("embeddings/positions/embeddings", "bert.embeddings.position_embeddings.weight",
     "bert/embeddings/position_embeddings"),
    ("embeddings/segments/embeddings", "bert.embeddings.token_type_embeddings.weight",
     "bert/embeddings/token_type_embeddings"),
    ("embeddings/norm/gamma", "bert.embeddings.LayerNorm.weight",
     "bert/embeddings/LayerNorm/gamma"),
    ("embeddings/norm/beta", "bert.embeddings.LayerNorm.bias", "bert/embeddings/LayerNorm/beta"),
)
LAYER = (
    ("attention/query/kernel", "attention.self.query.weight", "attention/self/query/kernel"),
    ("attention/query/bias", "attention.self.query.bias", "attention/self/query/bias"),
    ("attention/key/kernel", "attention.self.key.weight", "attention/self/key/kernel"),
    ("attention/key/bias", "attention.self.key.bias", "attention/self/key/bias"),
    ("attention/value/kernel", "attention.self.value.weight", "attention/self/value/kernel"),
    ("attention/value/bias", "attention.self.value.bias", "attention/self/value/bias"),
    ("attention/output/kernel", "attention.output.dense.weight", "attention/output/dense/kernel"),
    ("attention/output/bias", "attention.output.dense.bias", "attention/output/dense/bias"),
    ("attention_norm/norm/gamma", "attention.output.LayerNorm.weight",
     "attention/output/LayerNorm/gamma"),
    ("attention_norm/norm/beta", "attention.output.LayerNorm.bias",
     "attention/output/LayerNorm/beta"),
    ("ffn/intermediate/kernel", "intermediate.dense.weight", "intermediate/dense/kernel"),
    ("ffn/intermediate/bias", "intermediate.dense.bias", "intermediate/dense/bias"),
    ("ffn/output/kernel", "output.dense.weight", "output/dense/kernel"),
    ("ffn/output/bias", "output.dense.bias", "output/dense/bias"),
    ("ffn_norm/norm/gamma", "output.LayerNorm.weight", "output/LayerNorm/gamma"),
    ("ffn_norm/norm/beta", "output.LayerNorm.bias", "output/LayerNorm/beta"),
)
POOLER = (
    ("pooler/dense/kernel", "bert.pooler.dense.weight", "bert/pooler/dense/kernel"),
    ("pooler/dense/bias", "bert.pooler.dense.bias", "bert/pooler/dense/bias"),
)
HEADS = (
    ("lm_head/transform/kernel", "cls.predictions.transform.dense.weight",
     "cls/predictions/transform/dense/kernel"),
    ("lm_head/transform/bias", "cls.predictions.transform.dense.bias",
     "cls/predictions/transform/dense/bias"),
    ("lm_head/norm/gamma", "cls.predictions.transform.LayerNorm.weight",
     "cls/predictions/transform/LayerNorm/gamma"),
    ("lm_head/norm/beta", "cls.predictions.transform.LayerNorm.bias",
     "cls/predictions/transform/LayerNorm/beta"),
    ("lm_head/bias", "cls.predictions.bias", "cls/predictions/output_bias"),
    ("nsp_head/kernel", "cls.seq_relationship.weight", "cls/seq_relationship/output_weights"),
    ("nsp_head/bias", "cls.seq_relationship.bias", "cls/seq_relationship/output_bias"),
)

# Stored names that are not weights of their own: a position-index buffer, and the MLM decoder,
# a second copy of the word embeddings and of cls.predictions.bias.
HF_SKIPPED = ("bert.embeddings.position_ids", "cls.predictions.decoder.weight",
              "cls.predictions.decoder.bias")
# Google's checkpoints may also hold the step counter and Adam's moment estimates.
GOOGLE_SKIPPED_SUFFIXES = ("global_step", "/adam_m", "/adam_v")

HF, GOOGLE = "HuggingFace", "Google"


def backbone_rows(num_layers: int) -> list[tuple[str, str, str]]:
    """The table's rows for embeddings, every encoder layer and the pooler."""
    return [*EMBEDDINGS, *(layer_row(i, row) for i in range(num_layers) for row in LAYER),
            *POOLER]


def layer_row(layer: int, row: tuple) -> tuple[str, str, str]:
    """A LAYER row's names for encoder layer ``layer``."""
    ours, hf, google = row
    return (f"encoder/layer_{layer}/{ours}", f"bert.encoder.layer.{layer}.{hf}",
            f"bert/encoder/layer_{layer}/{google}")


def is_transposed(fmt: str, ours: str, stored: str) -> bool:
    """Whether the stored tensor is the transpose of our weight (see the layouts above)."""
    if fmt == HF:
        return ours.endswith("/kernel")
    return stored.endswith("/output_weights")


# ----------------------------------------------------------------------------- reading


def read_config(path) -> BertConfig:
    """The folder's ``config.json`` or ``bert_config.json``, checked against its ``vocab.txt``."""
    directory = Path(path)
    if not directory.is_dir():
        raise UserError(f"{directory}: not a folder; expected a pretrained BERT folder "
                        f"(config.json + model.safetensors, or bert_config.json + "
                        f"{GOOGLE_CHECKPOINT}.*)")
    config = BertConfig.load(directory)
    vocab_path = directory / VOCAB_NAME
    if vocab_path.is_file():
        tokens = len(read_vocab(vocab_path))
        if tokens != config.vocab_size:
            raise UserError(f"{vocab_path} has {tokens} tokens but the config's vocab_size is "
                            f"{config.vocab_size}")
    return config


def read_checkpoint(directory: Path) -> tuple[str, dict]:
    """(format, {stored name: numpy array}) of the folder's weights, skipped names left out."""
    if (directory / SAFETENSORS_NAME).is_file():
        return HF, read_safetensors(directory / SAFETENSORS_NAME)
    if (directory / f"{GOOGLE_CHECKPOINT}.index").is_file():
        return GOOGLE, read_google_checkpoint(directory / GOOGLE_CHECKPOINT)
    raise no_weights_error(directory)


def no_weights_error(directory: Path) -> UserError:
    """The error for a folder holding neither format's weights."""
    return UserError(f"{directory}: no {SAFETENSORS_NAME} (HuggingFace) or "
                     f"{GOOGLE_CHECKPOINT}.index (Google) found; PyTorch .bin files are not read")


def stored_names(directory: Path) -> tuple[str, set]:
    """(format, the stored tensors' names) of the folder's weights, without reading the tensors.

    HuggingFace names are normalised as :func:`read_safetensors` does.
    """
    if (directory / SAFETENSORS_NAME).is_file():
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(directory / SAFETENSORS_NAME, framework="numpy") as stored:
                return HF, {hf_name(key) for key in stored.keys()}
        except (OSError, SafetensorError, TypeError, ValueError) as err:
            raise UserError(f"{directory / SAFETENSORS_NAME}: not a readable safetensors file "
                            f"({err})") from None
    if (directory / f"{GOOGLE_CHECKPOINT}.index").is_file():
        import tensorflow as tf

        check_google_files(directory / GOOGLE_CHECKPOINT)
        try:
            reader = tf.train.load_checkpoint(str(directory / GOOGLE_CHECKPOINT))
        except Exception as err:  # as read_google_checkpoint
            raise UserError(f"{directory / GOOGLE_CHECKPOINT}: not a readable TF checkpoint "
                            f"({first_line(err)})") from None
        return GOOGLE, set(reader.get_variable_to_shape_map())
    raise no_weights_error(directory)


def read_safetensors(path: Path) -> dict:
    """HuggingFace tensors under BertForPreTraining's names, whatever class saved them."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    try:
        tensors = load_file(path)
    except (OSError, SafetensorError, TypeError, ValueError) as err:
        raise UserError(f"{path}: not a readable safetensors file ({err})") from None
    named = {hf_name(key): value for key, value in tensors.items()}
    return {key: value for key, value in named.items() if key not in HF_SKIPPED}


def hf_name(key: str) -> str:
    """BertModel saves without the "bert." prefix BertForPreTraining adds; checkpoints converted
    from TF long ago still say LayerNorm gamma/beta for weight/bias."""
    if key.startswith(("embeddings.", "encoder.", "pooler.")):
        key = "bert." + key
    if key.endswith(".gamma"):
        return key.removesuffix(".gamma") + ".weight"
    if key.endswith(".beta"):
        return key.removesuffix(".beta") + ".bias"
    return key


def check_google_files(prefix: Path) -> None:
    """UserError for a checkpoint file that is a named pipe, device or folder: TensorFlow's
    reader would wait on a pipe, or read a device, for ever."""
    for part in sorted(prefix.parent.glob(f"{prefix.name}.*")):
        require_regular(part)


def read_google_checkpoint(prefix: Path) -> dict:
    """Google's variables by name, optimizer state left out."""
    import tensorflow as tf

    check_google_files(prefix)
    try:
        reader = tf.train.load_checkpoint(str(prefix))
        names = [name for name in reader.get_variable_to_shape_map()
                 if not name.endswith(GOOGLE_SKIPPED_SUFFIXES)]
        # A damaged data file shows only when a tensor is read.
        return {name: reader.get_tensor(name) for name in names}
    except Exception as err:  # TF maps its C++ reader's errors to OpError, IndexError, ...
        raise UserError(f"{prefix}: not a readable TF checkpoint ({first_line(err)})") from None


# ----------------------------------------------------------------------------- loading


class StoredWeight(NamedTuple):
    """One of the checkpoint's tensors, matched to one of our weights."""

    ours: str  # our weight, the table's first column
    name: str  # its name in the checkpoint
    value: np.ndarray  # as stored
    transposed: bool  # stored as the transpose of our layout


def read_weights(path, config: BertConfig, printer=print) -> list[StoredWeight]:
    """The folder's weights, matched by name to a BERT of ``config``; the model is not needed yet.

    Raises UserError listing every missing or unexpected name. A checkpoint with none of the
    pre-training heads gets a one-line note through ``printer`` instead.
    """
    fmt, tensors = read_checkpoint(Path(path))
    column = 1 if fmt == HF else 2
    check_sizes(path, config, column, tensors)
    rows = backbone_rows(config.num_hidden_layers)
    if {row[column] for row in HEADS} & tensors.keys():
        rows += HEADS
    else:
        printer(f"note: {path} has no pre-training heads (masked-LM, next-sentence); "
                f"they keep their fresh random initialisation")
    check_names(path, {row[column] for row in rows}, tensors.keys())
    weights = [StoredWeight(row[0], row[column], tensors[row[column]],
                            is_transposed(fmt, row[0], row[column])) for row in rows]
    check_values(path, weights)
    return weights


def check_sizes(path, config: BertConfig, column: int, tensors: dict) -> None:
    """UserError where the config claims far more than the weights hold: more layers, or
    sizes that make more than twice the weights stored. Checked before a name is listed or a
    weight built, so a config.json claiming millions of layers or positions takes no memory;
    a smaller difference is a shape :func:`assign_weights` names, tensor by tensor."""
    stored_layers = 0
    while layer_row(stored_layers, LAYER[-1])[column] in tensors:
        stored_layers += 1
    if config.num_hidden_layers > stored_layers:
        raise UserError(f"{path}: the config's num_hidden_layers is {config.num_hidden_layers}, "
                        f"but the weights are those of {stored_layers} layers")
    stored = sum(tensor.size for tensor in tensors.values())
    if config.weight_count() > 2 * stored:
        raise UserError(f"{path}: the config's sizes make about {config.weight_count():,} "
                        f"weights, but the checkpoint holds {stored:,}")


def check_names(path, expected: set, stored) -> None:
    """UserError naming the weights the checkpoint lacks and those nobody here would read."""
    missing, unexpected = sorted(expected - set(stored)), sorted(set(stored) - expected)
    problems = []
    if missing:
        problems.append(f"missing {listing(missing)}")
    if unexpected:
        problems.append(f"unexpected {listing(unexpected)}")
    if problems:
        raise UserError(f"{path}: weights do not match a BERT of this config: "
                        f"{'; '.join(problems)}")


def check_values(path, weights: list[StoredWeight]) -> None:
    """UserError naming every tensor that is not floating point or holds a NaN or an infinity
    (with the first such value and where it is): loaded, one would make every output NaN."""
    bad = []
    for weight in weights:
        if weight.value.dtype.kind != "f":
            bad.append(f"{weight.name} ({weight.value.dtype})")
        elif not np.isfinite(weight.value).all():
            index = tuple(np.argwhere(~np.isfinite(weight.value))[0])
            bad.append(f"{weight.name} ({weight.value[index]} at {at(index)})")
    if bad:
        raise UserError(f"{path}: tensors that are not finite floating-point numbers: "
                        f"{listing(bad)}")


def assign_weights(model, weights: list[StoredWeight], path) -> None:
    """Copy ``weights`` into ``model``; UserError listing every tensor of the wrong shape
    (in the checkpoint's layout) before any weight changes."""
    variables = our_variables(model)
    wrong = []
    for weight in weights:
        expected = tuple(variables[weight.ours].shape)
        if weight.transposed:
            expected = expected[::-1]
        if weight.value.shape != expected:
            wrong.append(f"{weight.name} {list(weight.value.shape)} (expected {list(expected)})")
    if wrong:
        raise UserError(f"{path}: tensors of the wrong shape: {listing(wrong)}")
    for weight in weights:
        value = weight.value.T if weight.transposed else weight.value
        variables[weight.ours].assign(np.asarray(value, variables[weight.ours].dtype))


def our_variables(model) -> dict:
    """{our weight name (the table's first column): Keras variable}.

    Keras paths start with the model's name ("bert", "bert_1", ...) except for weights a layer
    creates outside the model's name scope (the heads'); both forms are reduced to the same key.
    """
    return {v.path.removeprefix(f"{model.name}/"): v for v in model.weights}


def listing(names, limit: int = 8) -> str:
    """Comma-separated names, the first ``limit`` of them and how many more."""
    shown = ", ".join(names[:limit])
    return shown if len(names) <= limit else f"{shown} and {len(names) - limit} more"


# ----------------------------------------------------------------------------- saving


def save_pretrained(model, directory) -> Path:
    """Write ``config.json`` and ``model.safetensors`` as HuggingFace's BertForPreTraining.

    Tensors get HuggingFace's names and torch's layouts; each file is written atomically.
    Returns the folder.
    """
    from safetensors.numpy import save

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    variables = our_variables(model)
    tensors = {}
    for ours, hf, _ in backbone_rows(model.config.num_hidden_layers) + list(HEADS):
        value = np.asarray(variables[ours].numpy(), np.float32)
        tensors[hf] = np.ascontiguousarray(value.T if is_transposed(HF, ours, hf) else value)
    # transformers reads the "format" entry to know the tensors are torch's.
    write_bytes_atomic(directory / SAFETENSORS_NAME, save(tensors, metadata={"format": "pt"}))
    BertConfig(**model.config.to_dict()).to_json_file(directory / CONFIG_NAME)
    return directory
