"""Attention over the paged KV cache: the hooks the jitted step plugs into the decoder's layers
(paged.py: write the new keys/values into their pages, then gather and attend, or attend in place
through the CPU kernel) and the Pallas backends of TPU/GPU (pallas.py, chosen by the engine setting
`attention`). May import cache, model, sample and kernels; never sched, runner, core or serve."""
