"""Qwen3 (per-head q/k RMSNorm) and Mistral (sliding window): tiny random checkpoints written by
transformers, loaded from their safetensors directories (and Qwen3 as a GGUF), against transformers
on the same weights; the window masks the contiguous and the paged attention paths alike."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from memloop.engine.cache.kv_pages import init_kv_pools
from memloop.engine.model.config import config_from_hf
from memloop.engine.model.decoder import forward, load_model, no_cache_attention
from memloop.engine.model.weights import load_weights
from memloop.engine.runner.step import forward_paged

from tests.engine.gguf_writer import LLAMA_CPP_MATRICES, float32_state, header_writer, put_tensor, write_out
from tests.engine.kernel_gate import kernels_expected
from tests.engine.test_engine_qwen2 import TOKENS, _greedy, _logits, _torch_greedy, _torch_logits, saved

GREEDY = 32
WINDOW = 5  # binding: shorter than the 12-token prompt and the 44-token generation
TINY = dict(  # the size of both checkpoints
    vocab_size=256,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=512,
    tie_word_embeddings=False,
)


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory):
    """A random Qwen3 whose heads are wider than hidden/heads (as in the real ones) and whose q/k norm
    weights are random (transformers initialises them to ones, which would hide a loader that drops them)."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(**TINY, head_dim=64, rms_norm_eps=1e-6, rope_theta=1000000.0)
    model = Qwen3ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
            layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    return saved(model, tmp_path_factory, "tiny_qwen3")


def test_hf_qwen3_directory_matches_transformers(tiny_qwen3):
    model, path = tiny_qwen3
    lm = load_model(path, load_tokenizer=False)
    cfg = lm.config
    assert cfg.architecture == "qwen3" and cfg.qk_norm and not cfg.attention_bias and cfg.head_dim == 64
    assert cfg.sliding_window is None
    np.testing.assert_array_equal(
        load_weights(path)[1]["layers"]["k_norm"][1], model.model.layers[1].self_attn.k_norm.weight.detach().numpy()
    )
    assert np.abs(_logits(lm) - _torch_logits(model)).max() < 2e-3
    assert _greedy(lm, GREEDY) == _torch_greedy(model, GREEDY)


def _write_qwen3_gguf(model, path: Path) -> Path:
    """The model as a qwen3 GGUF with llama.cpp's tensor names (no Q/K permutation: NEOX rotary);
    matrices Q8_0, the embedding and norms F32. The model's weights become the de-quantised values."""
    cfg = model.config
    sd = float32_state(model)
    w = header_writer(model, path, "qwen3", rope_theta=1000000.0)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    new_sd = {}

    def put(name: str, hf_name: str, quantised: bool = False) -> None:
        put_tensor(w, new_sd, name, hf_name, sd[hf_name], "Q8_0" if quantised else "F32")

    put("token_embd.weight", "model.embed_tokens.weight")
    put("output_norm.weight", "model.norm.weight")
    put("output.weight", "lm_head.weight", quantised=True)
    matrices = LLAMA_CPP_MATRICES
    vectors = {
        "attn_norm": "input_layernorm",
        "ffn_norm": "post_attention_layernorm",
        "attn_q_norm": "self_attn.q_norm",
        "attn_k_norm": "self_attn.k_norm",
    }
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for key, name in vectors.items():
            put(f"blk.{i}.{key}.weight", p + name + ".weight")
        for key, name in matrices.items():
            put(f"blk.{i}.{key}.weight", p + name + ".weight", quantised=True)
    return write_out(w, path, model, new_sd)


def test_gguf_qwen3_matches_transformers(tiny_qwen3, tmp_path):
    """llama.cpp's names (`attn_q_norm`/`attn_k_norm`, the `qwen3` entries of gguf's tensor map) and
    `attention.key_length` for the head width; dense and (where the CPU kernel builds) block form."""
    import gguf
    from transformers import Qwen3ForCausalLM

    names = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH.QWEN3]}
    assert {"blk.{bid}.attn_q_norm", "blk.{bid}.attn_k_norm"} <= names
    _, hf_path = tiny_qwen3
    model = Qwen3ForCausalLM.from_pretrained(hf_path).eval()
    path = _write_qwen3_gguf(model, tmp_path / "tiny-qwen3.gguf")
    ref = _torch_logits(model)
    dense = load_model(path, load_tokenizer=False, blocks=False)
    assert dense.config.architecture == "qwen3" and dense.config.qk_norm and dense.config.head_dim == 64
    want = _torch_greedy(model, GREEDY)
    assert_dense_and_blocked_match(path, dense, ref, want, lambda params: params["layers"][0]["wq"])


def assert_dense_and_blocked_match(
    path: Path, dense: Any, ref: np.ndarray, want: list[int], block_matrix: Callable[[dict], Any]
) -> None:
    """The GGUF at `path` loaded dense (`dense`) reproduces transformers: logits within 2e-3 of `ref`, its GREEDY
    greedy tokens `want`; where the CPU kernel builds, loaded in block form too: `block_matrix` of its params
    is a BlockMatrix, its logits are within 2e-3 of `ref` and its greedy tokens are the dense load's."""
    assert np.abs(_logits(dense) - ref).max() < 2e-3
    assert _greedy(dense, GREEDY) == want
    if kernels_expected():
        blocked = load_model(path, load_tokenizer=False)
        assert type(block_matrix(blocked.params)).__name__ == "BlockMatrix"
        assert np.abs(_logits(blocked) - ref).max() < 2e-3
        assert _greedy(blocked, GREEDY) == _greedy(dense, GREEDY)


# ----------------------------------------------------------------------------- Mistral


def _mistral(tmp_path_factory, window: int | None, name: str):
    from transformers import MistralConfig, MistralForCausalLM

    torch.manual_seed(1)
    cfg = MistralConfig(**TINY, rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=window)
    return saved(MistralForCausalLM(cfg).eval(), tmp_path_factory, name)


@pytest.fixture(scope="module")
def tiny_mistral(tmp_path_factory):
    return _mistral(tmp_path_factory, WINDOW, "tiny_mistral")


def test_hf_mistral_with_binding_window_matches_transformers(tiny_mistral):
    model, path = tiny_mistral
    lm = load_model(path, load_tokenizer=False)
    assert lm.config.architecture == "mistral" and lm.config.sliding_window == WINDOW
    ours = _logits(lm)
    ref = _torch_logits(model)
    assert np.abs(ours - ref).max() < 2e-3
    # The window changes the result, so a decoder that ignored it would fail above.
    unbounded = dataclasses.replace(lm.config, sliding_window=None)
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    full = np.asarray(forward(lm.params, unbounded, toks, pos, None, no_cache_attention(pos))[0])
    assert np.abs(full - ref).max() > 1e-2
    assert _greedy(lm, GREEDY) == _torch_greedy(model, GREEDY)


def test_mistral_window_masks_the_paged_path(tiny_mistral):
    """A prompt prefilled in chunks into pages, then decoded token by token: every step's logits
    equal transformers' at that position (the window crosses page and chunk boundaries)."""
    model, path = tiny_mistral
    assert_paged_matches(load_model(path, load_tokenizer=False), _torch_logits(model)[0])


def assert_paged_matches(lm, ref: np.ndarray) -> None:
    """TOKENS prefilled in a 7-token chunk into 4-token pages, then decoded one by one through the
    serving forward: each step's last logits within 2e-3 of `ref` [T, V] at that position."""
    cfg = lm.config
    page, n = 4, len(TOKENS[0])
    pages = -(-n // page)
    cache = init_kv_pools(cfg, pages + 1, page, lm.dtype, per_layer=lm.per_layer)  # page 0: scratch
    table = jnp.arange(1, pages + 1, dtype=jnp.int32)[None]
    for start, stop in [(0, 7)] + [(p, p + 1) for p in range(7, n)]:
        positions = jnp.arange(start, stop, dtype=jnp.int32)[None]
        tokens = jnp.asarray([TOKENS[0][start:stop]], jnp.int32)
        logits, cache = forward_paged(
            cfg,
            lm.params,
            cache,
            tokens,
            positions,
            1 + positions // page,
            positions % page,
            table,
            jnp.asarray([stop - start - 1], jnp.int32),
        )
        assert np.abs(np.asarray(logits[0]) - ref[stop - 1]).max() < 2e-3, stop


def test_mistral_window_longer_than_context_is_a_no_op(tmp_path_factory):
    """A window no served context can exceed is dropped from the config (plain causal attention), and
    the model still matches transformers."""
    model, path = _mistral(tmp_path_factory, 512, "tiny_mistral_wide")
    lm = load_model(path, load_tokenizer=False)
    assert lm.config.architecture == "mistral" and lm.config.sliding_window is None
    assert np.abs(_logits(lm) - _torch_logits(model)).max() < 2e-3
    cfg = config_from_hf(
        {
            "architectures": ["MistralForCausalLM"],
            "vocab_size": 8,
            "hidden_size": 8,
            "intermediate_size": 8,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "max_position_embeddings": 32768,
            "sliding_window": 4096,
        },
        "test",
    )
    assert cfg.sliding_window == 4096


def test_qwen_sliding_window_is_refused_by_name():
    from memloop.engine.errors import ModelFormatError

    with pytest.raises(ModelFormatError, match="sliding-window"):
        config_from_hf(
            {
                "architectures": ["Qwen3ForCausalLM"],
                "vocab_size": 8,
                "hidden_size": 8,
                "intermediate_size": 8,
                "num_hidden_layers": 1,
                "num_attention_heads": 2,
                "use_sliding_window": True,
                "sliding_window": 4,
            },
            "test",
        )
