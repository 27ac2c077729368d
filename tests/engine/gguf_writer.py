"""GGUF files written from a transformers model for the loader tests: the shared header fields."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def header_writer(model: Any, path: Path, arch: str, rope_theta: float) -> Any:
    """A `gguf.GGUFWriter` for `path` with the model's hyper-parameters written (tensors not yet)."""
    import gguf

    cfg = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(float(rope_theta))
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    return w


def write_out(w: Any, path: Path, model: Any = None, state: dict | None = None) -> Path:
    """Write the file; with `state`, load those (de-quantised) values into `model` too, so
    transformers and memloop see the same numbers."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if state is not None:
        import torch

        model.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=True)
    return path
