"""The KV cache: the page pool and its budget (kv_cache.py), the pools themselves with every page write
and the reference read, float or int8 (kv_pages.py: `init_kv_pools`, `write_pages`, `read_pages`), and
the radix prefix cache over token ids (radix.py).
May import model, sample and kernels; never attention, sched, runner, core or serve."""
