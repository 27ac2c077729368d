"""Logits to tokens: the sampling settings and the batched sampler (sampling.py) and grammar
constraints for JSON output (constrained.py). Beside the model, not on it: may import kernels only;
never model, cache or any floor above."""
