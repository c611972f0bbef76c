"""The training-speed reference: HuggingFace transformers' BertForPreTraining, on this machine.

    /path/to/torch-venv/bin/python benchmarks/hf_reference_throughput.py [--steps 50]

Runs in a separate virtual environment with ``torch==2.13.0`` (CPU) and ``transformers``; the
project itself does not need either. The model has the reference shape (256 wide, 4 layers,
4 heads, feed-forward 1024, vocabulary 19,500) and trains as the reference figures were
measured: batch 16 x 63 tokens, 2 threads, AdamW, masked-LM at 15% of the positions (logits at
every position, the others ignored by label -100) + next-sentence prediction. Prints seconds
per step (median and inter-quartile range over ``--steps`` timed steps after warm-up), tokens/s
and peak RSS, in the format of ``train_throughput.py`` so the two can be run one after the
other and compared: the target is 3x this reference on the same machine. ``--precision
bfloat16`` runs the forward pass and the loss under ``torch.autocast("cpu",
dtype=torch.bfloat16)``, HuggingFace's mixed precision on a CPU (weights and AdamW stay
float32), to set beside ``train_throughput.py --precisions mixed_bfloat16``.
"""
import argparse
import contextlib
import resource
import statistics
import time

import torch
from transformers import BertConfig, BertForPreTraining

SHAPE = dict(hidden=256, layers=4, heads=4, ffn=1024, batch=16, seq=63, vocab=19500)


def synthetic_batch(generator):
    """Random ids with 15% of positions carrying a masked-LM label, and random NSP labels."""
    batch, seq, vocab = SHAPE["batch"], SHAPE["seq"], SHAPE["vocab"]
    ids = torch.randint(5, vocab, (batch, seq), generator=generator)
    labels = torch.full((batch, seq), -100)
    chosen = torch.rand((batch, seq), generator=generator) < 0.15
    labels[chosen] = ids[chosen]
    return {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
            "attention_mask": torch.ones_like(ids), "labels": labels,
            "next_sentence_label": torch.randint(0, 2, (batch,), generator=generator)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="timed steps")
    parser.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2, help="torch.set_num_threads")
    parser.add_argument("--precision", choices=("float32", "bfloat16"), default="float32",
                        help="bfloat16: the forward pass under torch.autocast (default float32)")
    args = parser.parse_args(argv)

    def mixed():  # a fresh context for each step
        if args.precision == "bfloat16":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=SHAPE["vocab"], hidden_size=SHAPE["hidden"],
                        num_hidden_layers=SHAPE["layers"], num_attention_heads=SHAPE["heads"],
                        intermediate_size=SHAPE["ffn"], max_position_embeddings=SHAPE["seq"])
    model = BertForPreTraining(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    generator = torch.Generator().manual_seed(0)
    batches = [synthetic_batch(generator) for _ in range(8)]
    times = []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        with mixed():
            loss = model(**batches[i % len(batches)]).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    q1, _, q3 = statistics.quantiles(times, n=4)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"torch {torch.__version__}, {args.threads} threads")
    name = "hf-reference" + ("" if args.precision == "float32" else f" [{args.precision}]")
    print(f"{name}: {median:.3f} s/step (IQR {q1:.3f}-{q3:.3f}), "
          f"{SHAPE['batch'] * SHAPE['seq'] / median:.0f} tokens/s, peak RSS {rss_mb:.0f} MB")


if __name__ == "__main__":
    main()
