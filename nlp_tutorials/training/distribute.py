"""Where the training step runs (one device, several GPUs, several machines, a TPU) and in
which precision, through TensorFlow's own ``tf.distribute`` and Keras mixed precision.

The models need no change to run on several replicas: :func:`compiled_step` hands each replica
its rows of the global batch and runs the model's own ``step()`` there. Two things make the
sums right:

- every loss is (sum over this replica's examples) / (weight of the *global* batch)
  (:func:`nlp_tutorials.models.losses.global_sum`), so the replicas' losses and gradients add up
  to the single-device ones;
- the Keras optimizer all-reduces gradients by SUM across replicas before applying them.

Flags are checked (:func:`check_flags`, :func:`parse_tf_config`) before TensorFlow is imported,
so this module imports it only inside the functions that need it. ``--precision auto`` is
resolved once TensorFlow has started (:func:`resolve_precision`: it asks about the GPUs).
"""
import functools
import json
import os
from pathlib import Path
from typing import NamedTuple

from nlp_tutorials.system.errors import UserError, first_line
from nlp_tutorials.system.hardware import CPUINFO, bfloat16_instructions
from nlp_tutorials.system.json_files import parse_json
from nlp_tutorials.system.settings import positive_int, setting
from nlp_tutorials.system.values import is_integer

STRATEGIES = ("default", "mirrored", "multiworker", "tpu")
AUTO = "auto"  # --precision: mixed_bfloat16 where the hardware has bfloat16, else float32
PRECISIONS = (AUTO, "float32", "mixed_float16", "mixed_bfloat16")
# NVIDIA GPUs compute in bfloat16 from this compute capability on (Ampere).
BFLOAT16_GPU_CAPABILITY = (8, 0)
TF_CONFIG_EXAMPLE = ('{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                     '"task": {"type": "worker", "index": 0}}')



# Where and how the step runs (docs/scaling.md): the same three settings for train and finetune.

def strategy_setting():
    return setting("default", "where the step runs: 'default' (one device), 'mirrored' (every "
                              "local GPU, or --cpu-replicas logical CPUs), 'multiworker' (the "
                              "cluster in TF_CONFIG), 'tpu'; --batch-size is the global batch, "
                              "split across replicas", choices=STRATEGIES)


def cpu_replicas_setting():
    # 0: not given (mirrored uses the GPUs, or the CPU as one replica).
    return setting(0, "with --strategy mirrored on a machine without GPUs: split the CPU into "
                      "this many logical devices, one replica each", kind=positive_int,
                   default_help="1")


def precision_setting():
    return setting(AUTO, "'auto' (mixed_bfloat16 where the CPU or GPU computes in bfloat16, "
                         "else float32), 'float32', or Keras mixed precision: 'mixed_float16' "
                         "(with loss scaling; GPUs) or 'mixed_bfloat16' (TPUs, recent GPUs "
                         "and CPUs)",
                   choices=PRECISIONS)


def deterministic_setting():
    return setting(False, "TensorFlow's op determinism: kernels that sum in a fixed order (for "
                          "GPUs; on a CPU the seed alone repeats a run, at the same thread "
                          "count)")


def check_flags(strategy: str, cpu_replicas: int) -> None:
    """Refuse flag combinations that cannot work, before TensorFlow loads.

    ``cpu_replicas`` 0 means the flag was not given. (TF_CONFIG, which multiworker needs, is
    read by :func:`parse_tf_config`.)
    """
    if cpu_replicas and strategy != "mirrored":
        raise UserError(f"--cpu-replicas {cpu_replicas}: only --strategy mirrored runs on "
                        f"logical CPU devices (got --strategy {strategy}); add --strategy "
                        f"mirrored or drop --cpu-replicas")


def parse_tf_config(text: str | None = None) -> dict:
    """The cluster description of ``--strategy multiworker``: the TF_CONFIG variable, checked.

    Expected (every worker gets the same cluster and its own task)::

        {"cluster": {"worker": ["host1:12345", "host2:12345"]},
         "task": {"type": "worker", "index": 0}}

    ``text`` defaults to the environment's TF_CONFIG. Returns the parsed dict.
    """
    text = os.environ.get("TF_CONFIG", "") if text is None else text
    if not text.strip():
        raise UserError(f"--strategy multiworker needs the TF_CONFIG environment variable, "
                        f"e.g. TF_CONFIG='{TF_CONFIG_EXAMPLE}'")
    try:
        config = parse_json(text, "TF_CONFIG")
    except UserError as err:
        raise UserError(f"{err}; expected e.g. {TF_CONFIG_EXAMPLE}") from None
    cluster = config.get("cluster") if isinstance(config, dict) else None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(cluster, dict) or not isinstance(task, dict):
        raise UserError(f"TF_CONFIG needs a \"cluster\" object and a \"task\" object; expected "
                        f"e.g. {TF_CONFIG_EXAMPLE}")
    for role, addresses in cluster.items():
        if (not isinstance(addresses, list) or not addresses
                or not all(isinstance(a, str) and ":" in a for a in addresses)):
            raise UserError(f"TF_CONFIG cluster {role!r}: expected a list of \"host:port\" "
                            f"addresses, got {json.dumps(addresses)}")
    role, index = task.get("type"), task.get("index")
    if role not in cluster:
        raise UserError(f"TF_CONFIG task type {json.dumps(role)}: expected one of the cluster's "
                        f"roles ({', '.join(cluster)})")
    if not is_integer(index) or not 0 <= index < len(cluster[role]):
        raise UserError(f"TF_CONFIG task index {json.dumps(index)}: expected 0 to "
                        f"{len(cluster[role]) - 1} (the cluster has {len(cluster[role])} "
                        f"{role} address(es))")
    return config


def is_chief(strategy: str) -> bool:
    """Whether this process writes the run's results: always, except a multi-worker non-chief.

    The chief is the "chief" task if the cluster has one, else worker 0 (TensorFlow's rule).
    """
    if strategy != "multiworker":
        return True
    config = parse_tf_config()
    chief_role = "chief" if "chief" in config["cluster"] else "worker"
    return config["task"]["type"] == chief_role and config["task"]["index"] == 0


def input_pipeline(strategy: str) -> tuple[int, int]:
    """(input pipelines, this process's index): one per worker of a multi-worker run (chief
    first, then the workers in TF_CONFIG's order), else (1, 0)."""
    if strategy != "multiworker":
        return 1, 0
    config = parse_tf_config()
    tasks = [(role, index) for role in ("chief", "worker")
             for index in range(len(config["cluster"].get(role, [])))]
    task = (config["task"]["type"], config["task"]["index"])
    if task not in tasks:
        raise UserError(f"TF_CONFIG task type {json.dumps(task[0])}: only chief and worker "
                        f"tasks train and read data")
    return len(tasks), tasks.index(task)


def worker_dir(directory, strategy: str) -> Path:
    """Where this process writes: ``directory`` for the chief, a sub-folder for other workers.

    Every worker of a multi-worker run saves checkpoints (TensorFlow asks all of them to take
    part), so on a shared file system the others must not overwrite the chief's files.
    """
    if is_chief(strategy):
        return Path(directory)
    task = parse_tf_config()["task"]
    return Path(directory) / "workers" / f"{task['type']}-{task['index']}"


@functools.cache
def make_strategy(name: str, cpu_replicas: int = 0):
    """The ``tf.distribute.Strategy`` called ``name`` (one of :data:`STRATEGIES`).

    Call it before TensorFlow runs anything else: logical CPU devices and the multi-worker
    runtime can only be set up in a fresh process. A process gets one strategy per name (the
    same object on every call), as strategies set up process-wide state: the logical CPU
    devices are made once, a multi-worker cluster starts once, TPU initialisation wipes the TPU.

    - ``default``: the one device TensorFlow picks (no distribution).
    - ``mirrored``: a replica per local GPU; without GPUs, ``cpu_replicas`` logical devices
      carved out of the CPU (0 or 1: the CPU itself), which is how it is tested here.
    - ``multiworker``: one cluster over several processes or machines, described by TF_CONFIG.
    - ``tpu``: the TPU named by the TPU_NAME variable, or the local one on a TPU VM.
    """
    import tensorflow as tf

    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_physical_devices("GPU")
        if gpus and cpu_replicas:
            raise UserError(f"--cpu-replicas {cpu_replicas}: this machine has {len(gpus)} "
                            f"GPU(s), which --strategy mirrored uses; drop --cpu-replicas")
        if gpus:
            return tf.distribute.MirroredStrategy()
        # Logical CPUs share one memory, so summing on one of them is as good as a collective
        # all-reduce, and it avoids TensorFlow's collective ops, which mixed up the gradients
        # of a second model trained in the same process (tensorflow/tensorflow#62790).
        return tf.distribute.MirroredStrategy(cpu_devices(max(cpu_replicas, 1)),
                                              tf.distribute.ReductionToOneDevice())
    if name == "multiworker":
        parse_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "tpu":
        return tpu_strategy()
    raise UserError(f"--strategy {name!r}: expected one of {', '.join(STRATEGIES)}")


def cpu_devices(count: int) -> list:
    """Names of ``count`` logical CPU devices, splitting the CPU into them if need be."""
    import tensorflow as tf

    if count > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        configured = tf.config.get_logical_device_configuration(cpu) or []
        if len(configured) < count:
            try:
                tf.config.set_logical_device_configuration(
                    cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
            except RuntimeError:
                raise UserError(f"--cpu-replicas {count}: TensorFlow already started its "
                                f"devices in this process; logical CPU devices can only be "
                                f"made in a fresh one") from None
    return [device.name for device in tf.config.list_logical_devices("CPU")[:count]]


def tpu_strategy():
    """A TPUStrategy on the TPU TensorFlow finds (TPU_NAME, or the local TPU VM)."""
    import tensorflow as tf

    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, tf.errors.OpError) as err:
        raise UserError(f"--strategy tpu: no TPU found ({first_line(err)}); run on a TPU VM or set "
                        f"TPU_NAME to the TPU's name or grpc:// address") from None
    return tf.distribute.TPUStrategy(resolver)


def check_batch_size(batch_size: int, strategy) -> None:
    """The global batch is split evenly across replicas, so it must divide."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise UserError(f"--batch-size {batch_size} is not divisible by the {replicas} replicas; "
                        f"the global batch is split evenly across them, so use a multiple of "
                        f"{replicas}")


def set_op_determinism(on: bool) -> None:
    """With ``on``, make every TensorFlow op of this process deterministic from now on
    (``tf.config.experimental.enable_op_determinism``): kernels whose sums would follow thread
    or GPU scheduling take a fixed order, and an op with no such kernel raises an error rather
    than run. Off leaves TensorFlow as it is; TensorFlow has no public way back."""
    if on:
        import tensorflow as tf

        tf.config.experimental.enable_op_determinism()


class Precision(NamedTuple):
    """The precision a run computes in (never "auto") and, for ``--precision auto``, why."""

    name: str
    reason: str = ""

    def line(self) -> str:
        """The run's first line: ``precision: mixed_bfloat16 (auto: this CPU has AMX)``."""
        return f"precision: {self.name}" + (f" ({self.reason})" if self.reason else "")


def resolve_precision(name: str, cpuinfo: Path | None = None,
                      gpus: list | None = None) -> Precision:
    """``--precision name`` as the run computes: ``name`` itself, or for "auto" what this
    machine's hardware computes fast (:func:`auto_precision`).

    ``cpuinfo``: where the CPU's flags are read (None: :data:`~nlp_tutorials.system.hardware.
    CPUINFO`). ``gpus``: each GPU's compute capability, as (major, minor) or None where
    unknown; None asks TensorFlow (:func:`gpu_capabilities`), so call it once TensorFlow may
    start.
    """
    if name not in PRECISIONS:
        raise UserError(f"--precision {name!r}: expected one of {', '.join(PRECISIONS)}")
    if name != AUTO:
        return Precision(name)
    return auto_precision(bfloat16_instructions(CPUINFO if cpuinfo is None else cpuinfo),
                          gpu_capabilities() if gpus is None else gpus)


def auto_precision(cpu_instructions: list | None, gpus: list) -> Precision:
    """What "auto" picks: mixed_bfloat16 on GPUs that all compute in bfloat16 (compute
    capability 8.0 or more), or, without a GPU, on a CPU with bfloat16 instructions
    (``cpu_instructions``: their names, [] for none, None where unknown); else float32.

    With a GPU the step runs there, so the CPU's instructions do not count.
    """
    if gpus:
        shown = ", ".join("unknown" if capability is None else
                          ".".join(map(str, capability)) for capability in gpus)
        least = ".".join(map(str, BFLOAT16_GPU_CAPABILITY))
        if all(capability is not None and tuple(capability) >= BFLOAT16_GPU_CAPABILITY
               for capability in gpus):
            these = "this GPU computes" if len(gpus) == 1 else f"these {len(gpus)} GPUs compute"
            return Precision("mixed_bfloat16", f"auto: {these} in bfloat16 (compute capability "
                                               f"{shown})")
        these = "this GPU has no" if len(gpus) == 1 else "not every GPU has"
        return Precision("float32", f"auto: {these} bfloat16 (compute capability {shown}; "
                                    f"bfloat16 needs {least} or more)")
    if cpu_instructions:
        return Precision("mixed_bfloat16",
                         f"auto: this CPU has {' and '.join(cpu_instructions)}")
    if cpu_instructions is None:
        return Precision("float32", "auto: no GPU, and no /proc/cpuinfo to read this CPU's "
                                    "instructions from")
    return Precision("float32", "auto: no bfloat16 instructions on this CPU or GPU")


def gpu_capabilities() -> list:
    """The compute capability of each GPU TensorFlow sees, (major, minor), None where it gives
    none (a GPU that is not NVIDIA's)."""
    import tensorflow as tf

    return [tf.config.experimental.get_device_details(gpu).get("compute_capability")
            for gpu in tf.config.list_physical_devices("GPU")]


def set_precision(name: str) -> None:
    """Make models built from now on compute in ``name`` (one of :data:`PRECISIONS`; "auto"
    is resolved first, :func:`resolve_precision`).

    ``mixed_*`` keeps the weights in float32 and computes in float16 or bfloat16. Softmax and
    losses stay float32 in the models. Under ``mixed_float16``, ``Model.compile`` wraps the
    optimizer in ``keras.optimizers.LossScaleOptimizer``, whose ``scale_loss`` (called by the
    models' ``apply_gradients``) multiplies the loss so small float16 gradients do not
    underflow, and which skips a step whose gradients overflow. bfloat16 has float32's range
    and needs no scaling.
    """
    import keras

    keras.mixed_precision.set_global_policy(resolve_precision(name).name)


def compiled_step(strategy, model, batch, jit_compile: bool = False, training: bool = True,
                  input_pipelines: int = 1):
    """``model.step`` over a global batch, each replica running it on its own rows.

    ``batch``: an example global batch, a dict of tensors [global_batch, ...]; as in
    ``TrainableModel.compiled_step``, its dtypes and batch size fix the signature and the other
    axes stay open, so batches trimmed to different lengths share one trace. Every worker of a
    multi-worker run feeds the same global batches (the data pipeline is seeded), and each of
    its replicas keeps the rows with its global replica index. With ``input_pipelines`` > 1
    (one per worker, reading its own shards), each worker feeds only its share instead,
    [global_batch / input_pipelines, ...], split among its own replicas.

    Returns a function: global batch -> dict of scalar metrics of the global batch (each
    replica's metric is its share of a global mean, so the shares are summed).
    """
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    local_replicas = replicas // input_pipelines  # the replicas one batch is split among
    check_batch_size(int(next(iter(batch.values())).shape[0]) * input_pipelines, strategy)
    if jit_compile and replicas > 1:
        # XLA compiles the whole step for one device and cannot reach the other replicas'
        # variables (measured on 2 CPU replicas: "Trying to access resource ... located in
        # device CPU:1 from device CPU:0").
        raise UserError(f"--jit compiles the step for one device; with {replicas} replicas "
                        f"drop --jit, or use --strategy default")
    if training:
        # The optimizer's slots are made now, as distributed variables: inside the first trace
        # they would force a second one.
        with strategy.scope():
            model.optimizer.build(model.trainable_variables)

    # model.step is called directly, not through its own tf.function: the all-reduces inside
    # it (loss weights, gradients) cannot sit in a tf.function nested in strategy.run.
    def run(batch):
        index = tf.distribute.get_replica_context().replica_id_in_sync_group % local_replicas
        return model.step(local_share(batch, index, local_replicas), training=training)

    def global_step(batch):
        metrics = strategy.run(run, args=(batch,))
        return {name: strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
                for name, value in metrics.items()}

    from nlp_tutorials.models.trainable import batch_signature

    return tf.function(global_step, input_signature=[batch_signature(batch)],
                       jit_compile=jit_compile)


def local_share(batch, index, replicas: int) -> dict:
    """Replica ``index``'s rows of a global batch: [global, ...] -> [global / replicas, ...]."""
    if replicas == 1:
        return batch
    import tensorflow as tf

    def rows(value):
        size = value.shape[0] // replicas
        share = value[index * size:(index + 1) * size]
        return tf.ensure_shape(share, [size] + value.shape[1:])

    return {name: rows(value) for name, value in batch.items()}
