"""The decoder from weights to logits: the architecture config (config.py), GGUF/safetensors loading
(weights.py), GGUF block matrices (blocks.py), weight-only int8 (quantize.py), the tensor-parallel mesh
(mesh.py), the tokenizer and chat template (tokenizer.py), and the Flax decoder with `load_model`
(decoder.py). May import kernels only (the quantised matmul); never sample, cache or any floor above."""
