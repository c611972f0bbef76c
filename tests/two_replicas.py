"""Checks that need two logical CPU devices, run in a process of their own by test_distribute.py.

Logical devices can only be made before TensorFlow starts, so this cannot share pytest's
process. ``python tests/two_replicas.py <work dir> <scenario>...`` prints one JSON line of
figures, one entry per scenario named; the assertions live in test_distribute.py, which runs
the scenarios in two processes so that neither takes half a minute.

- ``one_step``: one step of a tiny BERT and GPT on a single device and under ``mirrored`` (2
  CPU replicas), same weights and global batch: the losses and the updated weights; and the
  error ``--jit`` gets with 2 replicas.
- ``resume``: pre-train 6 steps on one device; resume its step-2 checkpoint under ``mirrored``;
  resume that run's step-4 checkpoint (saved under ``mirrored``) on one device again; the
  final weights of the three runs, and the step each began at.
- ``keras_evaluate``: Keras' ``evaluate`` of a tiny BERT under ``mirrored`` against its
  ``step(training=False)`` on one device, same weights and global batch.
"""
import json
import re
import shutil
import sys
from pathlib import Path

from nlp_tutorials.training import distribute

# First, before TensorFlow starts its devices: split the CPU in two.
MIRRORED = distribute.make_strategy("mirrored", cpu_replicas=2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from nlp_tutorials.bert import BERT  # noqa: E402
from nlp_tutorials.models.config import ModelConfig  # noqa: E402
from nlp_tutorials.training.config import TrainConfig
from nlp_tutorials.system.errors import UserError  # noqa: E402
from nlp_tutorials.gpt import GPT  # noqa: E402
from nlp_tutorials.training.optimization import make_optimizer  # noqa: E402
from nlp_tutorials.training.pretraining import pretrain  # noqa: E402

VOCAB = 40


def tiny(model_type):
    return ModelConfig(model_type=model_type, vocab_size=VOCAB, hidden_size=16,
                       num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                       max_position_embeddings=16, hidden_dropout_prob=0.0,
                       attention_probs_dropout_prob=0.0)


def global_batch():
    """8 pairs whose two halves (one per replica) differ in padding and in masked positions:
    the first half has 1 masked token per row, the second 3, so a per-replica mean would weigh
    one of the first half's tokens three times as much as one of the second's."""
    rng = np.random.default_rng(0)
    ids = rng.integers(5, VOCAB, (8, 12)).astype("int32")
    ids[:4, 7:] = 0  # [PAD]
    weights = np.zeros((8, 3), "float32")
    weights[:4, 0] = 1.0
    weights[4:] = 1.0
    return {"input_ids": tf.constant(ids),
            "token_type_ids": tf.constant((np.arange(12) >= 6).astype("int32")[None].repeat(8, 0)),
            "mlm_positions": tf.constant(rng.integers(1, 7, (8, 3)).astype("int32")),
            "mlm_ids": tf.constant(rng.integers(5, VOCAB, (8, 3)).astype("int32")),
            "mlm_weights": tf.constant(weights),
            "nsp_labels": tf.constant(rng.integers(0, 2, 8).astype("int32"))}


def one_step(cls, config, optimizer):
    """Figures comparing one step on one device with one step under MIRRORED."""
    batch = global_batch()
    keras.utils.set_random_seed(1)
    single = cls(config)
    single.compile(optimizer=optimizer())
    with MIRRORED.scope():
        mirrored = cls(config)
        mirrored.compile(optimizer=optimizer())
    for target, source in zip(mirrored.weights, single.weights):
        target.assign(source.numpy())
    before = [w.numpy() for w in single.weights]
    # Independent of nlp_tutorials.training.distribute: the model's own step, one device.
    single_metrics = single.compiled_step(batch)(batch)
    mirrored_metrics = distribute.compiled_step(MIRRORED, mirrored, batch)(batch)
    halves = [single.step({k: v[i:i + 4] for k, v in batch.items()}, training=False)["loss"]
              for i in (0, 4)]
    return {"single_loss": float(single_metrics["loss"]),
            "mirrored_loss": float(mirrored_metrics["loss"]),
            "metric_gap": max(abs(float(single_metrics[k]) - float(mirrored_metrics[k]))
                              for k in single_metrics),
            "mean_of_replica_means": float(np.mean(halves)),
            "weight_gap": max(float(np.abs(a.numpy() - b.numpy()).max())
                              for a, b in zip(single.weights, mirrored.weights)),
            "largest_update": max(float(np.abs(a.numpy() - b).max())
                                  for a, b in zip(single.weights, before)),
            "replica_copies_agree": all(
                all(np.array_equal(c.numpy(), w.value.values[0].numpy())
                    for c in w.value.values) for w in mirrored.weights)}


def scenario_one_step():
    sgd = lambda: keras.optimizers.SGD(learning_rate=1.0)  # noqa: E731
    adamw = lambda: make_optimizer(1e-3, 10)  # noqa: E731
    try:
        distribute.compiled_step(MIRRORED, BERT(tiny("bert")), global_batch(), jit_compile=True)
        jit_error = None
    except UserError as error:
        jit_error = str(error)
    return {"replicas": MIRRORED.num_replicas_in_sync, "jit_error": jit_error,
            "bert_sgd": one_step(BERT, tiny("bert"), sgd),
            "gpt_sgd": one_step(GPT, tiny("gpt"), sgd),
            "bert_adamw": one_step(BERT, tiny("bert"), adamw)}


def scenario_keras_evaluate():
    """Keras' evaluate under mirrored and BERT's step on one device, on the same global batch."""
    keras.utils.set_random_seed(0)
    single = BERT(tiny("bert"))
    batch = global_batch()
    expected = {name: float(value) for name, value in single.step(batch, training=False).items()}
    with MIRRORED.scope():
        model = BERT(tiny("bert"))
        model.set_weights(single.get_weights())
        model.compile(optimizer=keras.optimizers.SGD(0.0))
    result = model.evaluate(tf.data.Dataset.from_tensors(batch), return_dict=True, verbose=0)
    return {"single": expected, "mirrored": {name: float(v) for name, v in result.items()}}


def rewind(source: Path, target: Path, step: int):
    """A copy of run ``source`` whose newest checkpoint is the one of ``step``."""
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("checkpoints", "logs"))
    (target / "checkpoints").mkdir()
    for path in (source / "checkpoints").glob(f"ckpt-{step}.*"):
        shutil.copy(path, target / "checkpoints")
    tf.compat.v1.train.update_checkpoint_state(str(target / "checkpoints"), f"ckpt-{step}")


def checkpoint_gap(a: Path, b: Path) -> float:
    """Largest difference between any two tensors of the newest checkpoints of runs a and b."""
    readers = [tf.train.load_checkpoint(str(run / "checkpoints")) for run in (a, b)]
    names = [n for n in readers[0].get_variable_to_shape_map() if n.startswith("model/")]
    assert names and set(names) <= set(readers[1].get_variable_to_shape_map()), names
    return max(float(np.abs(readers[0].get_tensor(n) - readers[1].get_tensor(n)).max())
               for n in names)


def scenario_resume(work):
    # Batches of 32 only to make the test-split evaluation at the end of each run short.
    config = TrainConfig(dim=32, layers=1, heads=2, max_len=32, batch_size=32, steps=6,
                         checkpoint_every=2, sample_every=100, dropout=0.0)
    started_at = []

    def run(name, strategy, resume):
        printed = []
        pretrain(TrainConfig(**{**vars(config), "model_dir": str(work / name),
                                "strategy": strategy,
                                "cpu_replicas": 2 if strategy == "mirrored" else 0}),
                 resume=resume, printer=printed.append)
        # "steps 2 -> 6": where the run began. Seeded and without dropout, a resume that
        # ignored its checkpoint would start over and still end at the same weights.
        started_at.append(int(re.search(r"steps (\d+) -> 6", "\n".join(printed))[1]))

    run("single", "default", False)
    rewind(work / "single", work / "to_mirrored", 2)
    run("to_mirrored", "mirrored", True)
    rewind(work / "to_mirrored", work / "back_to_single", 4)
    run("back_to_single", "default", True)
    return {"mirrored_resume_vs_single": checkpoint_gap(work / "single", work / "to_mirrored"),
            "single_resume_vs_single": checkpoint_gap(work / "single", work / "back_to_single"),
            "steps": [int(tf.train.latest_checkpoint(str(work / n / "checkpoints")).split("-")[-1])
                      for n in ("single", "to_mirrored", "back_to_single")],
            "started_at": started_at}


# Each takes the work folder; only the resume writes runs into it.
SCENARIOS = {"one_step": lambda work: scenario_one_step(), "resume": scenario_resume,
             "keras_evaluate": lambda work: scenario_keras_evaluate()}

if __name__ == "__main__":
    work = Path(sys.argv[1])
    print(json.dumps({name: SCENARIOS[name](work) for name in sys.argv[2:]}))
