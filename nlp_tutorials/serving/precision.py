"""A fine-tuned head copied into bfloat16 for serving (``export-model --precision bfloat16``).

bfloat16 keeps float32's 8 exponent bits and 7 of its 23 mantissa bits: the weights take half
the bytes, and a CPU with AVX512_BF16 or AMX multiplies them in hardware, more multiply-adds
per instruction than in float32. A CPU without those instructions converts the products to
float32 in software, so there the model runs slower than in float32: export in bfloat16 for
the CPUs it will be served on. What the model answers moves a little (docs/serving.md#speed
gives MRPC's accuracy both ways); LayerNorm, the attention's softmax and the outputs stay
float32.
"""
from nlp_tutorials.system.model_files import SERVED_PRECISIONS as PRECISIONS


def in_precision(head, precision: str):
    """``head`` itself for float32; for bfloat16 a copy built under Keras' ``bfloat16`` policy
    (weights stored and computed in bfloat16), its weights rounded from ``head``'s."""
    import keras

    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision == "float32":
        return head
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(precision)
    try:
        copy = type(head).from_config(head.get_config())  # its weights exist on return
    finally:
        keras.mixed_precision.set_global_policy(previous)
    copy.set_weights(head.get_weights())  # each cast to the copy's weight dtype on assignment
    return copy


SLOW_HERE_NOTE = ("note: this CPU has no bfloat16 instructions (AVX512_BF16 or AMX): the "
                  "bfloat16 model runs slower than float32 here; serve it on a CPU that has them")
