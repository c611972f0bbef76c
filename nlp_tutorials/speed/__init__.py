"""Code that changes only how fast something is computed, each piece tested against the plain
operation it replaces (``tests/speed/test_kernels.py``) and timed against it
(``benchmarks/kernel_speed.py``); :mod:`~nlp_tutorials.speed.compiled` compiles a served
model's call with XLA (``tests/speed/test_compiled.py``, ``benchmarks/serving_speed.py``)."""
