"""Logits to tokens: the request parser and the batched sampler (sampling.py; the settings themselves are
`memloop.sampling.SamplingParams`, the one type every layer shares) and grammar constraints for JSON output
(constrained.py). Beside the model, not on it: may import kernels only; never model, cache or any floor above."""
