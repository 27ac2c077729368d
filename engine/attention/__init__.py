"""Attention over the paged KV cache: the backends (pallas.py: JAX's Pallas kernels on TPU/GPU, chosen
by the engine setting `attention`) and the jitted paged step (paged.py) that writes pages, attends
(gather, the CPU kernel in place, or Pallas) and samples, plugged into the decoder's layers.
May import cache, model, sample and kernels; never sched or serve."""
