"""One worker's first epoch of ``train --data`` batches, as the training loop reads them.

Run with TF_CONFIG naming this process's place in a cluster (tests/support.run_local_workers):

    python tests/shard_epoch.py DATA_DIR OUTPUT_DIR

It builds the run's data source the way ``train --strategy multiworker`` does
(``training.pretraining_data``, which picks this worker's shards from TF_CONFIG), reads one
epoch of global batches of 2 (one row from each of two workers, so an epoch is every pair of
this worker's shards) through ``training.training_batches``, and writes the rows it read to
``OUTPUT_DIR/worker-<input pipeline index>.json``: ``{"pipeline": [count, index], "rows":
[[input_ids, token_type_ids, nsp_label], ...]}``, each row without its padding. GPT's batches are used because they are not masked.
"""
import json
import sys
from pathlib import Path

from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.system.files import write_text_atomic
from nlp_tutorials.text.tokenization import load_tokenizer
from nlp_tutorials.training.pretraining import pretraining_data, training_batches


def unpadded(ids, types, length) -> list:
    return [ids[:length].tolist(), types[:length].tolist()]


def main(data_dir: str, output_dir: str) -> None:
    config = TrainConfig(model_type="gpt", data=data_dir, strategy="multiworker", batch_size=2)
    data = pretraining_data(config, load_tokenizer(data_dir), None)
    batches = training_batches(data, config, start=0)
    rows = []
    for _ in range(data.steps_per_epoch(config.batch_size)):
        batch = {name: value.numpy() for name, value in next(batches).items()}
        for ids, types, label in zip(batch["input_ids"], batch["token_type_ids"],
                                     batch["nsp_labels"]):
            length = int((ids != 0).sum())
            rows.append(unpadded(ids, types, length) + [int(label)])
    output = Path(output_dir) / f"worker-{data.pipeline_id}.json"
    write_text_atomic(output, json.dumps({"pipeline": [data.pipelines, data.pipeline_id],
                                          "rows": rows}))


if __name__ == "__main__":
    main(*sys.argv[1:])
