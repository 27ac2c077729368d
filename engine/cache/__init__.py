"""The KV cache: the page pool and its budget (kv_cache.py), every page write and the reference read,
float or int8 (kv_pages.py), and the radix prefix cache over token ids (radix.py).
May import model, sample and kernels; never attention, sched or serve."""
