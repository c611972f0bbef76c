"""The model's configuration: :class:`ModelConfig` and :class:`BertConfig`.

Both round-trip to JSON. Field names follow HuggingFace's BERT ``config.json`` so a real
checkpoint's config reads directly; Google's original ``bert_config.json`` uses the same names
minus a few optional ones. This module imports no TensorFlow.
"""
import dataclasses
import json
from pathlib import Path

from nlp_tutorials.system.errors import UserError
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.system.json_files import read_json_object
from nlp_tutorials.system.values import (
    check_integer,
    check_number,
    check_text,
    is_integer,
    shown,
)

# How a sentence classifier reads the backbone (models.task_heads.SequenceClassifier's
# pooling, finetune --pooling); the first is the default.
POOLINGS = ("cls", "mean")


CONFIG_NAME = "config.json"


GOOGLE_CONFIG_NAME = "bert_config.json"


MODEL_TYPES = ("transformer", "gpt", "bert")
ACTIVATIONS = ("gelu", "relu")
# The fields that count something, each at least 1.
SIZES = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
         "intermediate_size", "max_position_embeddings", "type_vocab_size")
DROPOUTS = ("hidden_dropout_prob", "attention_probs_dropout_prob")
# The most each size may claim: far beyond any BERT (BERT-large: 30,522 tokens, 1,024 wide,
# 24 layers, 16 heads, 4,096 inner, 512 positions), yet small enough that a config.json
# claiming more is refused before memory is taken for it.
SIZE_LIMITS = {"vocab_size": 1_000_000, "hidden_size": 16_384, "num_hidden_layers": 512,
               "num_attention_heads": 1_024, "intermediate_size": 65_536,
               "max_position_embeddings": 65_536, "type_vocab_size": 1_024}
# The most a config's weights may take in float32: 2 billion weights, 6 times BERT-large's.
MAX_WEIGHT_BYTES = 8_000_000_000


@dataclasses.dataclass
class ModelConfig:
    """Sizes and hyper-parameters of a Transformer, GPT or BERT model.

    Attributes:
        model_type: "transformer", "gpt" or "bert".
        vocab_size: number of token ids (source side for the seq2seq Transformer).
        hidden_size: model width, the size of every token vector.
        num_hidden_layers: layers in each stack.
        num_attention_heads: heads per attention layer; must divide ``hidden_size``.
        intermediate_size: inner width of the position-wise feed-forward network.
        hidden_act: "gelu" (exact, erf-based, as BERT) or "relu".
        hidden_dropout_prob: dropout on embeddings and every sub-layer output.
        attention_probs_dropout_prob: dropout on attention probabilities.
        max_position_embeddings: longest sequence the learned positions cover, in tokens.
        type_vocab_size: number of segment ids (2: first and second sentence).
        initializer_range: std of the truncated-normal weight initialiser.
        layer_norm_eps: LayerNorm epsilon (1e-12 as BERT).
        pad_token_id: id of ``[PAD]``; keys with this id are masked out of attention.
        target_vocab_size: the seq2seq Transformer's target vocabulary (0: same as source).
        chunk_size_feed_forward: positions the feed-forward computes at a time (0: all at
            once); smaller chunks hold a smaller [batch, chunk, intermediate] activation.
        pruned_heads: ``{layer: [head, ...]}``, the attention heads removed from each layer
            (numbered as in the unpruned model); see ``GPT.with_heads_pruned``.

    Every field is checked when a config is made (:meth:`check_fields`, then
    :meth:`validate`); ``source``, given only to the constructor, is what an error names: the
    file read (:meth:`from_json_file` passes its path) or, by default, "config".
    """

    model_type: str = "bert"
    vocab_size: int = 30522
    hidden_size: int = 256
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    target_vocab_size: int = 0
    chunk_size_feed_forward: int = 0
    pruned_heads: dict = dataclasses.field(default_factory=dict)
    # Where the values came from, named by every error ("config" when made in Python, the
    # file's path when read by from_json_file); not a field, so never saved or compared.
    source: dataclasses.InitVar[str] = "config"

    def __post_init__(self, source: str):
        self.check_fields(source)
        self.pruned_heads = _pruned_heads(self.pruned_heads, self.num_hidden_layers,
                                          self.num_attention_heads, source)
        self.validate(source)

    def check_fields(self, source: str = "config") -> None:
        """Raise :class:`UserError` naming ``source`` and the first field of the wrong type
        (an integer is never a boolean or a float here), out of range or not finite."""
        check_text(self.model_type, "model_type", source, MODEL_TYPES)
        for name in SIZES:
            check_integer(getattr(self, name), name, source, 1, SIZE_LIMITS[name])
        check_integer(self.target_vocab_size, "target_vocab_size", source, 0,  # 0: the source's
                      SIZE_LIMITS["vocab_size"])
        check_integer(self.chunk_size_feed_forward, "chunk_size_feed_forward", source,
                      minimum=0)  # 0: off
        check_text(self.hidden_act, "hidden_act", source, ACTIVATIONS)
        for name in DROPOUTS:  # a rate of 1 would drop everything
            check_number(getattr(self, name), name, source, 0, 1, high_open=True)
        for name in ("initializer_range", "layer_norm_eps"):
            check_number(getattr(self, name), name, source, 0, low_open=True)
        check_integer(self.pad_token_id, "pad_token_id", source, 0, self.vocab_size - 1)

    def validate(self, source: str = "config") -> None:
        """Raise :class:`UserError` naming ``source`` and the first rule between fields that
        does not hold (the fields themselves passed :meth:`check_fields`)."""
        if self.hidden_size % self.num_attention_heads:
            raise UserError(
                f"{source}: hidden_size {self.hidden_size} is not divisible by "
                f"num_attention_heads {self.num_attention_heads}; expected a multiple")
        if self.pruned_heads and self.model_type == "transformer":
            raise UserError(f"{source}: pruned_heads: only GPT and BERT can prune heads")
        if 4 * self.weight_count() > MAX_WEIGHT_BYTES:
            raise UserError(f"{source}: its sizes make about {self.weight_count():,} weights; "
                            f"expected at most {MAX_WEIGHT_BYTES // 4:,} "
                            f"({MAX_WEIGHT_BYTES // 10**9} GB in float32)")

    def weight_count(self) -> int:
        """About how many weights a model of these sizes holds: embedding tables and each
        layer's attention and feed-forward matrices (a decoder's too, for the Transformer),
        biases and LayerNorms left out."""
        width, inner, layers = self.hidden_size, self.intermediate_size, self.num_hidden_layers
        tables = self.vocab_size + self.target_vocab_size + self.max_position_embeddings \
            + self.type_vocab_size
        stacks = 2 if self.model_type == "transformer" else 1
        return tables * width + stacks * layers * (4 * width * width + 2 * width * inner)

    @property
    def head_size(self) -> int:
        """Width of one attention head: hidden_size / num_attention_heads."""
        return self.hidden_size // self.num_attention_heads

    def kept_heads(self, layer: int) -> list[int]:
        """The heads layer ``layer`` still has after pruning, numbered as unpruned."""
        pruned = self.pruned_heads.get(layer, [])
        return [head for head in range(self.num_attention_heads) if head not in pruned]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict, source: str = "config") -> "ModelConfig":
        """Build from a dict, ignoring keys this project does not use (HF adds many)."""
        known = {f.name for f in dataclasses.fields(cls)}
        _check_supported(values, source)
        return cls(**{k: v for k, v in values.items() if k in known}, source=source)

    def save(self, directory) -> Path:
        """Write ``config.json`` into ``directory`` atomically; return its path."""
        path = Path(directory) / CONFIG_NAME
        write_text_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def load(cls, directory) -> "ModelConfig":
        """Read ``config.json`` (HuggingFace) or ``bert_config.json`` (Google) from a folder."""
        directory = Path(directory)
        for name in (CONFIG_NAME, GOOGLE_CONFIG_NAME):
            path = directory / name
            if path.is_file():
                return cls.from_json_file(path)
        raise UserError(f"{directory}: no {CONFIG_NAME} or {GOOGLE_CONFIG_NAME} found")

    @classmethod
    def from_json_file(cls, path) -> "ModelConfig":
        """Read one config file; without ``model_type`` (Google's has none) it is a BERT."""
        values = read_json_object(path)
        values.setdefault("model_type", "bert")
        return cls.from_dict(values, source=str(path))


def _pruned_heads(value, layers: int, heads: int, source: str = "config") -> dict:
    """``{layer: sorted heads}`` from a dict whose keys may be strings (as JSON writes them).

    Refuses anything but whole numbers (``1.0``, ``true`` or ``"1"`` as a head), a layer or head
    that does not exist, and pruning every head of a layer (the layer's attention would have no
    output: remove the layer instead).
    """
    if not isinstance(value, dict):
        raise UserError(f"{source}: pruned_heads is {shown(value)}; expected "
                        f"{{layer: [head, ...]}}")
    pruned = {}
    for key, chosen in value.items():
        # A layer number written as JSON writes keys; more digits than any layer has are kept
        # as text (refused below), not converted at a cost that grows with their length.
        layer = int(key) if isinstance(key, str) and key.isdecimal() and len(key) < 10 else key
        if not (is_integer(layer) and isinstance(chosen, (list, tuple))
                and all(is_integer(head) for head in chosen)):
            raise UserError(f"{source}: pruned_heads {shown(key)}: {shown(chosen)}: expected a "
                            f"layer number and a list of head numbers")
        layer, chosen = int(layer), sorted({int(head) for head in chosen})
        if not 0 <= layer < layers:
            raise UserError(f"{source}: pruned_heads: layer {layer} does not exist; expected 0 "
                            f"to {layers - 1}")
        if any(not 0 <= head < heads for head in chosen):
            raise UserError(f"{source}: pruned_heads: layer {layer} heads {chosen}: expected "
                            f"head numbers 0 to {heads - 1}")
        if len(chosen) == heads:
            raise UserError(f"{source}: pruned_heads: layer {layer} would lose all {heads} "
                            f"heads; keep at least one")
        if chosen:
            pruned[layer] = chosen
    return dict(sorted(pruned.items()))


# Values real checkpoints may hold that this project's layers do not implement, with the ones
# they do: refusing them beats loading weights into a model that computes something else.
SUPPORTED_VALUES = {"hidden_act": ("gelu", "relu"), "position_embedding_type": ("absolute",)}


def _check_supported(values: dict, source: str) -> None:
    for key, supported in SUPPORTED_VALUES.items():
        if key in values and values[key] not in supported:
            raise UserError(f"{source}: {key} {values[key]!r} is not supported; expected "
                            f"{' or '.join(repr(v) for v in supported)}")


# HuggingFace's BertConfig fields this project reads and writes (Google's bert_config.json has
# the same names, without layer_norm_eps and pad_token_id).
HF_BERT_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_act", "hidden_dropout_prob",
                  "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                  "initializer_range", "layer_norm_eps", "pad_token_id",
                  "chunk_size_feed_forward", "pruned_heads")


@dataclasses.dataclass
class BertConfig(ModelConfig):
    """A BERT's :class:`ModelConfig` as HuggingFace's ``config.json`` spells it.

    Reads HuggingFace's ``config.json`` or Google's ``bert_config.json``
    (:meth:`from_json_file`, or :meth:`load` on a folder) and writes HuggingFace's
    (:meth:`to_json_file`), with ``"architectures": ["BertForPreTraining"]`` so transformers
    knows which class the weights fit.
    """

    def validate(self, source: str = "config") -> None:
        super().validate(source)
        if self.model_type != "bert":
            raise UserError(f"{source}: model_type is {self.model_type!r}; expected 'bert'")

    def to_hf_dict(self) -> dict:
        return {"architectures": ["BertForPreTraining"], "model_type": "bert",
                **{name: getattr(self, name) for name in HF_BERT_FIELDS}}

    def to_json_file(self, path) -> Path:
        """Write HuggingFace's ``config.json`` fields to ``path`` atomically; return it."""
        write_text_atomic(path, json.dumps(self.to_hf_dict(), indent=2, sort_keys=True) + "\n")
        return Path(path)
