"""GGUF files written from a transformers model for the loader tests: the shared header fields, llama.cpp's
names of a layer's matrices, and tensors written so that transformers and memloop see the same numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

# llama.cpp's name of each matrix of a decoder layer, and the transformers module it comes from.
LLAMA_CPP_MATRICES = {
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def float32_state(model: Any) -> dict[str, np.ndarray]:
    """The model's weights by their transformers names, as float32 arrays."""
    return {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}


def put_tensor(
    w: Any,
    read_back: dict[str, np.ndarray],
    name: str,
    hf_name: str,
    arr: np.ndarray,
    qname: str = "F32",
    raw: np.ndarray | None = None,
) -> None:
    """Add `arr` (the model's `hf_name`) to the GGUF as `name` in type `qname`, quantised by gguf unless its
    bytes `raw` are given (types gguf cannot quantise to); `read_back[hf_name]` becomes the values a loader
    reads, the de-quantised ones, for `write_out` to load into the model."""
    if qname == "F32":
        w.add_tensor(name, arr)
        read_back[hf_name] = arr
        return
    import gguf
    from gguf.quants import dequantize, quantize

    qtype = gguf.GGMLQuantizationType[qname]
    raw = quantize(arr, qtype) if raw is None else raw
    w.add_tensor(name, raw, raw_dtype=qtype)
    read_back[hf_name] = np.asarray(dequantize(raw, qtype), np.float32).reshape(arr.shape)


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
