"""Qwen2 / Qwen2.5: a tiny random checkpoint written by transformers (HF directory and GGUF with
Q5_0/Q8_0/Q4_K/Q6_K/Q5_K tensors, and one Q5_1) against transformers on the same weights, and the packaged
Qwen2.5-Coder-0.5B- and 1.5B-Instruct GGUFs against transformers (slow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from memloop.engine.model.decoder import forward, load_model, no_cache_attention
from memloop.engine.model.weights import load_weights

from tests.engine.gguf_writer import LLAMA_CPP_MATRICES, float32_state, header_writer, put_tensor, write_out
from tests.engine.kernel_gate import kernels_expected

TOKENS = [[3, 17, 99, 42, 5, 200, 31, 7, 64, 128, 1, 250]]


@pytest.fixture(scope="module")
def tiny_qwen2(tmp_path_factory):
    """A random Qwen2 (untied head, rope theta 1e6, eps 1e-6) with non-zero q/k/v biases (transformers
    initialises them to zero, which would hide a loader that drops them), saved as safetensors."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen2Config(
        vocab_size=256,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-6,
        rope_theta=1000000.0,
        tie_word_embeddings=False,
    )
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, 0.5)
    return saved(model, tmp_path_factory, "tiny_qwen2")


def saved(model: Any, tmp_path_factory: pytest.TempPathFactory, name: str) -> tuple[Any, Path]:
    """`model` saved as safetensors in a new folder `name`: (model, folder)."""
    path = tmp_path_factory.mktemp(name)
    model.save_pretrained(path, safe_serialization=True)
    return model, path


def _logits(lm) -> np.ndarray:
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    return np.asarray(forward(lm.params, lm.config, toks, pos, None, no_cache_attention(pos))[0])


def _torch_logits(model) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.numpy()


def _greedy(lm, n: int) -> list[int]:
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    lm.tokenizer = _IdTokenizer()
    return generate(lm, [TOKENS[0]], SamplingParams(max_tokens=n, stop_token_ids=()))[0].token_ids


def _torch_greedy(model, n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor(TOKENS), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(TOKENS[0]) :].tolist()


def test_hf_qwen2_directory_matches_transformers(tiny_qwen2):
    model, path = tiny_qwen2
    lm = load_model(path, load_tokenizer=False)
    assert lm.config.architecture == "qwen2" and lm.config.attention_bias and not lm.config.tie_word_embeddings
    assert lm.config.rope_theta == 1e6 and lm.config.rms_norm_eps == 1e-6
    assert np.abs(_logits(lm) - _torch_logits(model)).max() < 1e-4
    assert _greedy(lm, 16) == _torch_greedy(model, 16)


def test_qwen2_biases_are_loaded(tiny_qwen2):
    model, path = tiny_qwen2
    _, params = load_weights(path)
    bias = model.model.layers[1].self_attn.k_proj.bias.detach().numpy()
    np.testing.assert_array_equal(params["layers"]["bk"][1], bias)


# ----------------------------------------------------------------------------- GGUF

QUANTS = {
    "attn_q": "Q5_0",
    "attn_k": "Q8_0",
    "attn_v": "Q5_0",
    "attn_output": "Q5_0",
    "ffn_gate": "Q5_0",
    "ffn_up": "Q8_0",
    "ffn_down": "Q4_K",
    "token_embd": "Q5_0",
    "output": "Q8_0",
}


def _kquant_bytes(rng: np.random.Generator, qtype: str, rows: int, cols: int) -> np.ndarray:
    """Valid k-quant bytes (gguf cannot quantise to them): random codes and sub-block scales, small f16
    super-block scales. Q4_K/Q5_K: d, dmin at bytes 0-3 of 144/176; Q6_K: d at bytes 208-209 of 210."""
    import gguf

    block, size = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]
    nb = cols // block
    raw = rng.integers(0, 256, size=(rows, nb, size), dtype=np.uint8)
    scale = (np.abs(rng.standard_normal((rows, nb, 2))) * 1e-3 + 1e-4).astype(np.float16).view(np.uint8)
    if qtype in ("Q4_K", "Q5_K"):
        raw[..., 0:4] = scale.reshape(rows, nb, 4)
    else:
        raw[..., 208:210] = scale[..., 0:2]
    return raw.reshape(rows, nb * size)


def _write_qwen2_gguf(model, path: Path, down: str) -> Path:
    """The model as a qwen2 GGUF (no Q/K permutation: llama.cpp runs Qwen2 with NEOX rotary), with the
    block types of a Q4_K_M file; returns the path. The written tensors replace the model's weights
    with their de-quantised values, so transformers and memloop see the same numbers."""
    cfg = model.config
    rng = np.random.default_rng(7)
    sd = float32_state(model)
    w = header_writer(model, path, "qwen2", rope_theta=1000000.0)
    new_sd = {}

    def put(name: str, hf_name: str, qname: str = "F32") -> None:
        arr = sd[hf_name]
        raw = _kquant_bytes(rng, qname, *arr.shape) if qname.endswith("_K") else None
        put_tensor(w, new_sd, name, hf_name, arr, qname, raw)

    put("token_embd.weight", "model.embed_tokens.weight", QUANTS["token_embd"])
    put("output_norm.weight", "model.norm.weight")
    put("output.weight", "lm_head.weight", QUANTS["output"])
    hf = LLAMA_CPP_MATRICES
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight")
        put(f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight")
        for key, name in hf.items():
            qname = down if (key == "ffn_down" and i % 2) else QUANTS[key]
            if key == "attn_output" and i % 2:
                qname = "Q5_1"  # a type with no block form: loaded dense
            put(f"blk.{i}.{key}.weight", p + name + ".weight", qname)
        for key in ("attn_q", "attn_k", "attn_v"):
            put(f"blk.{i}.{key}.bias", p + hf[key] + ".bias")
    return write_out(w, path, model, new_sd)


@pytest.fixture(scope="module", params=["Q6_K", "Q5_K"])
def tiny_qwen2_gguf(tiny_qwen2, tmp_path_factory, request):
    """Layer 0's ffn_down is Q4_K, layer 1's the parameter (Q6_K as in Q4_K_M files, or Q5_K)."""
    from transformers import Qwen2ForCausalLM

    model, hf_path = tiny_qwen2
    copy = Qwen2ForCausalLM.from_pretrained(hf_path).eval()
    path = _write_qwen2_gguf(
        copy, tmp_path_factory.mktemp("tiny_qwen2_gguf") / f"tiny-{request.param}.gguf", down=request.param
    )
    return copy, path, request.param


def test_gguf_kquants_are_exact_against_gguf_dequantiser(tiny_qwen2_gguf):
    """Q4_K, Q5_K, Q6_K, Q5_0 and Q8_0 tensors load to exactly `gguf`'s de-quantised values (Q/K not permuted)."""
    model, path, _ = tiny_qwen2_gguf
    cfg, params = load_weights(path)
    assert cfg.architecture == "qwen2" and not cfg.family.gguf_qk_permuted
    layers = model.model.layers
    for i, name, ours in [
        (0, "mlp.down_proj", "w_down"),
        (1, "mlp.down_proj", "w_down"),
        (0, "self_attn.q_proj", "wq"),
        (1, "self_attn.k_proj", "wk"),
    ]:
        ref = layers[i].get_submodule(name).weight.detach().numpy()
        np.testing.assert_array_equal(params["layers"][ours][i], ref)
    np.testing.assert_array_equal(params["layers"]["bq"][0], layers[0].self_attn.q_proj.bias.detach().numpy())


def test_gguf_qwen2_matches_transformers_in_block_form_and_dense(tiny_qwen2_gguf, caplog):
    """Block form (Q5_0/Q8_0 and the k-quants through the CPU kernel, the Q5_1 matrix dense, logged) and
    the dense load both reproduce transformers on the de-quantised weights; greedy tokens are identical."""
    import logging

    model, path, down = tiny_qwen2_gguf
    ref = _torch_logits(model)
    dense = load_model(path, load_tokenizer=False, blocks=False)
    assert np.abs(_logits(dense) - ref).max() < 1e-4
    if kernels_expected():
        with caplog.at_level(logging.INFO, logger="memloop.engine.model.weights"):
            blocked = load_model(path, load_tokenizer=False)
        assert type(blocked.params["layers"][0]["wq"]).__name__ == "BlockMatrix"
        assert blocked.params["layers"][0]["wq"].qtype == "Q5_0"
        assert [blocked.params["layers"][i]["w_down"].qtype for i in (0, 1)] == ["Q4_K", down]
        assert "1 Q5_1 matrices have no CPU-kernel block form" in caplog.text
        assert np.abs(_logits(blocked) - ref).max() < 1e-4
        assert _greedy(blocked, 16) == _greedy(dense, 16)
    assert _greedy(dense, 16) == _torch_greedy(model, 16)


class _IdTokenizer:
    """Token ids in and out (the tiny checkpoints have no tokenizer)."""

    eos_token_id = None
    stop_token_ids = ()
    pad_token_id = 0

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))

    def encode(self, text):
        return [int(t) for t in text.split()]


# ----------------------------------------------------------------------------- the packaged model (slow)

CHATS = [
    [{"role": "user", "content": "Write a Python function that reverses a string."}],
    [
        {"role": "system", "content": "You summarise text in one sentence."},
        {"role": "user", "content": "The meeting moved from Tuesday to Thursday because the projector broke."},
    ],
    [{"role": "user", "content": "List three prime numbers as a JSON array."}],
]


def packaged_model(name: str) -> Path:
    """The packaged model's GGUF (joined on first use). Only slow tests use it, and `make test-slow`
    installs the part packages first (`make models`): a missing one fails with what to install."""
    from memloop.engine.assets import MODELS, resolve_model
    from memloop.engine.errors import ModelNotFoundError

    try:
        return resolve_model(name)
    except ModelNotFoundError as exc:
        pytest.fail(f"{exc}; run `make models` ({MODELS[name].install})")


@pytest.fixture(scope="module", params=["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def qwen_gguf(request):
    return packaged_model(request.param)


def _dense_matrices(lm) -> list[str]:
    """Names of the weight matrices held as dense arrays rather than GGUF blocks."""
    from memloop.engine.model.blocks import BlockMatrix

    named = [("embed", lm.params["embed"]), ("lm_head", lm.params.get("lm_head"))]
    named += [(f"{name}.{i}", w) for i, layer in enumerate(lm.params["layers"]) for name, w in layer.items()]
    return [name for name, w in named if w is not None and not isinstance(w, BlockMatrix) and w.ndim == 2]


@pytest.mark.slow
def test_qwen25_coder_gguf_matches_transformers(qwen_gguf):
    """The real Q4_K_M files (0.5B: Q5_0, Q8_0, Q4_K, Q6_K tensors; 1.5B: Q4_K, Q6_K), every matrix in
    block form where the CPU kernels run: logits within 2e-3 and 200 greedy tokens identical to
    transformers on the same GGUF, with the checkpoint's own chat template. memloop's numbers are
    computed before transformers loads (its f32 copy of the 1.5B model is 6 GB)."""
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    lm = load_model(qwen_gguf)
    assert lm.config.architecture == "qwen2" and lm.config.attention_bias
    if kernels_expected():
        assert lm.per_layer and _dense_matrices(lm) == []
    ours_logits = []
    for chat in CHATS:
        ids = lm.tokenizer.chat_ids(chat)
        assert ids[0] == lm.tokenizer.hf.convert_tokens_to_ids("<|im_start|>")  # no BOS prepended
        toks = jnp.asarray([ids], jnp.int32)
        pos = jnp.arange(len(ids), dtype=jnp.int32)[None]
        ours_logits.append(np.asarray(forward(lm.params, lm.config, toks, pos, None, no_cache_attention(pos))[0]))
    n = 200
    gens = generate(lm, CHATS, SamplingParams(max_tokens=n, stop_token_ids=()))
    hf = AutoModelForCausalLM.from_pretrained(
        str(qwen_gguf.parent), gguf_file=qwen_gguf.name, dtype=torch.float32
    ).eval()
    for chat, ours, g in zip(CHATS, ours_logits, gens):
        ids = lm.tokenizer.chat_ids(chat)
        with torch.no_grad():
            ref = hf(torch.tensor([ids])).logits.numpy()
            out = hf.generate(
                torch.tensor([ids]),
                max_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=lm.tokenizer.pad_token_id,
            )
        assert np.abs(ours - ref).max() < 2e-3
        assert g.token_ids == out[0, len(ids) :].tolist()
