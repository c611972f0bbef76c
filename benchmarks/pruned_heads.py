"""MRPC test scores and predict throughput of a fine-tuned model with its heads pruned.

    python benchmarks/pruned_heads.py --model-dir visual/models/minilm_mrpc [--shares 0,0.2,0.4,0.6]

For each share, the least important heads are chosen as ``bert heads --prune`` chooses them (10%
at a time, importance on the 408 dev pairs measured again after each tenth, each layer keeping
one) and pruned (``nlp_tutorials.models.pruning``), with ``--recover-epochs`` fine-tuned again as
``bert heads --recover-epochs`` does, and the pruned model is scored on the
1,725 MRPC test pairs and timed on them through ``predict``'s path
(``finetuned.inference.class_probabilities``, batches of 64 pairs trimmed to their longest). The
models are timed in turn, round after round (median of ``--rounds``), so machine noise hits
each alike; pairs/s are also given as a ratio to the unpruned model's.
"""
import argparse
import os
import platform
import statistics
import time

os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.analysis.bertology import (
    iterative_heads_to_prune,
    kept_heads,
    recover,
)
from nlp_tutorials.tasks.base import split_train_dev
from nlp_tutorials.tasks.mrpc import MrpcTask, load_mrpc
from nlp_tutorials.finetuned.folders import load_finetuned
from nlp_tutorials.finetuned.inference import class_probabilities
from nlp_tutorials.tasks.metrics import accuracy, f1_score  # noqa: E402
from nlp_tutorials.models.pruning import pruned_head_model  # noqa: E402
from nlp_tutorials.training.config import RECOVERY_BATCH_SIZE, RECOVERY_LEARNING_RATE


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-dir", required=True, help="fine-tuned model folder")
    parser.add_argument("--shares", default="0,0.2,0.4,0.6", help="shares of heads to prune")
    parser.add_argument("--rounds", type=int, default=5, help="timed passes per model")
    parser.add_argument("--recover-epochs", type=int, default=0,
                        help="fine-tune each pruned model again for this many epochs, as "
                             "`bert heads` does by default")
    args = parser.parse_args(argv)
    head, tokenizer, _ = load_finetuned(args.model_dir)
    max_len = head.backbone.config.max_position_embeddings
    test = MrpcTask().encode(tokenizer, load_mrpc("test"), max_len)
    dev = MrpcTask().encode(tokenizer, split_train_dev(load_mrpc("train"), 408)[1], max_len)
    shares = [float(s) for s in args.shares.split(",")]
    models = {share: pruned_head_model(head, iterative_heads_to_prune(head, dev, share))
              for share in shares}
    for share, model in models.items():
        if share and args.recover_epochs:
            recover(model, tokenizer, args.recover_epochs, RECOVERY_LEARNING_RATE,
                    RECOVERY_BATCH_SIZE, printer=lambda line: None)
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, {platform.platform()}; "
          f"TensorFlow {tf.__version__}; {len(test['labels'])} MRPC test pairs")
    times = {share: [] for share in shares}
    scores = {}
    for share, model in models.items():  # scores, and the first (tracing) pass untimed
        predictions = (class_probabilities(model, test)[:, 1] > 0.5).astype(np.int32)
        scores[share] = (accuracy(test["labels"], predictions), f1_score(test["labels"],
                                                                         predictions))
    for _ in range(args.rounds):
        for share, model in models.items():
            start = time.perf_counter()
            class_probabilities(model, test)
            times[share].append(time.perf_counter() - start)
    base = len(test["labels"]) / statistics.median(times[shares[0]])
    for share in shares:
        rate = len(test["labels"]) / statistics.median(times[share])
        heads_left = sum(len(k) for k in kept_heads(models[share]))
        print(f"pruned {share:4.0%} ({heads_left} heads left): accuracy "
              f"{100 * scores[share][0]:.1f}%, F1 {100 * scores[share][1]:.1f}; {rate:.0f} "
              f"pairs/s = {rate / base:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
