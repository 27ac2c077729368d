"""Weight loading: a tiny random Llama through both loaders against transformers, and bad files."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from memloop.engine.errors import ModelFormatError, ModelNotFoundError
from memloop.engine.model.decoder import forward, load_model, no_cache_attention
from memloop.engine.model.weights import load_weights

from tests.engine.gguf_writer import header_writer, write_out

TOKENS = [[3, 17, 99, 42, 5, 200, 31, 7, 64, 128, 1, 250]]


def _tiny_config(**extra):
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=256,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        **extra,
    )


@pytest.fixture(scope="module")
def tiny_hf(tmp_path_factory):
    """A random Llama-3-style model (untied head, llama3 rope scaling) saved as safetensors."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    cfg = _tiny_config(
        tie_word_embeddings=False,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
    )
    model = LlamaForCausalLM(cfg).eval()
    path = tmp_path_factory.mktemp("tiny_hf")
    model.save_pretrained(path, safe_serialization=True)
    return model, path


def _ours(path):
    lm = load_model(path, load_tokenizer=False)
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    return np.asarray(forward(lm.params, lm.config, toks, pos, None, no_cache_attention(pos))[0])


def _torch_logits(model):
    with torch.no_grad():
        return model(torch.tensor(TOKENS)).logits.numpy()


def test_hf_directory_matches_transformers(tiny_hf):
    model, path = tiny_hf
    assert np.abs(_ours(path) - _torch_logits(model)).max() < 1e-4


def _llamacpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter permutation of Q/K rows (what real GGUF files contain)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _write_gguf(model, path: Path, quant: str = "F32", arch: str = "llama", raw_type=None) -> Path:
    import gguf
    from gguf.quants import quantize

    cfg = model.config
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w = header_writer(
        model,
        path,
        arch,
        rope_theta=cfg.rope_theta if hasattr(cfg, "rope_theta") else cfg.rope_parameters["rope_theta"],
    )
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)

    def put(name, arr, matrix=True):
        qtype = gguf.GGMLQuantizationType[quant] if matrix else gguf.GGMLQuantizationType.F32
        if raw_type is not None and matrix:  # bytes of a type the loader must refuse
            block, size = gguf.GGML_QUANT_SIZES[raw_type]
            raw = np.random.default_rng(0).integers(
                0, 255, (arr.shape[0], arr.shape[1] // block * size), dtype=np.uint8
            )
            w.add_tensor(name, raw, raw_dtype=raw_type)
            return
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, arr)
        else:
            w.add_tensor(name, quantize(arr, qtype), raw_dtype=qtype)

    put("token_embd.weight", sd["model.embed_tokens.weight"])
    put("output_norm.weight", sd["model.norm.weight"], matrix=False)
    if not cfg.tie_word_embeddings:
        put("output.weight", sd["lm_head.weight"])
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"], matrix=False)
        put(f"blk.{i}.attn_q.weight", _llamacpp_permute(sd[p + "self_attn.q_proj.weight"], cfg.num_attention_heads))
        put(f"blk.{i}.attn_k.weight", _llamacpp_permute(sd[p + "self_attn.k_proj.weight"], cfg.num_key_value_heads))
        put(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"], matrix=False)
        put(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    return write_out(w, path)


@pytest.fixture(scope="module")
def tiny_tied():
    from transformers import LlamaForCausalLM

    torch.manual_seed(1)
    return LlamaForCausalLM(_tiny_config(tie_word_embeddings=True, rope_theta=10000.0)).eval()


def test_gguf_f32_with_llamacpp_permutation_matches_transformers(tiny_tied, tmp_path):
    path = _write_gguf(tiny_tied, tmp_path / "tiny.gguf")
    assert np.abs(_ours(path) - _torch_logits(tiny_tied)).max() < 1e-4


@pytest.mark.parametrize("quant, tol", [("Q8_0", 0.05), ("Q4_0", 0.5), ("Q4_1", 0.5), ("F16", 2e-3)])
def test_gguf_quantised_tensors_dequantise_close(tiny_tied, tmp_path, quant, tol):
    path = _write_gguf(tiny_tied, tmp_path / f"tiny-{quant}.gguf", quant=quant)
    cfg, params = load_weights(path)
    ref = tiny_tied.model.layers[0].mlp.gate_proj.weight.detach().numpy()  # [out, in], as we store it
    err = np.abs(params["layers"]["w_gate"][0] - ref).max()
    assert 0 < err < tol * np.abs(ref).max() or (quant == "F16" and err < 1e-3)
    assert np.abs(_ours(path) - _torch_logits(tiny_tied)).max() < tol * 4


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ModelNotFoundError, match="does not exist"):
        load_model(tmp_path / "nope.gguf", load_tokenizer=False)


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_weights(tmp_path)


def test_truncated_gguf(smollm2_gguf, tmp_path):
    bad = tmp_path / "truncated.gguf"
    with smollm2_gguf.open("rb") as src, bad.open("wb") as dst:
        dst.write(src.read(smollm2_gguf.stat().st_size // 3))
    with pytest.raises(ModelFormatError, match="corrupt or truncated|truncated"):
        load_weights(bad)


def test_corrupt_gguf_header(tmp_path):
    bad = tmp_path / "corrupt.gguf"
    bad.write_bytes(b"NOTAGGUF" + bytes(4096))
    with pytest.raises(ModelFormatError, match="not a readable GGUF"):
        load_weights(bad)


def test_unsupported_architecture(tiny_tied, tmp_path):
    path = _write_gguf(tiny_tied, tmp_path / "gpt2.gguf", arch="gpt2")
    with pytest.raises(ModelFormatError, match="'gpt2' model"):
        load_weights(path)


def test_unsupported_quantisation(tiny_tied, tmp_path):
    import gguf

    path = _write_gguf(tiny_tied, tmp_path / "iq4.gguf", raw_type=gguf.GGMLQuantizationType.IQ4_NL)
    with pytest.raises(ModelFormatError, match="quantisation IQ4_NL"):
        load_weights(path)


def test_unsupported_hf_architecture(tmp_path):
    (tmp_path / "config.json").write_text('{"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"}')
    with pytest.raises(ModelFormatError, match="GPT2LMHeadModel"):
        load_weights(tmp_path)


def test_bf16_compute_dtype_on_tiny_model(tiny_hf):
    """The accelerator dtype (bf16 weights and activations, f32 norms/softmax/logits) stays close to f32."""
    model, path = tiny_hf
    lm = load_model(path, dtype=jnp.bfloat16, load_tokenizer=False)
    assert _layer(lm.params, "wq").dtype == jnp.bfloat16
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    logits, _ = forward(lm.params, lm.config, toks, pos, None, no_cache_attention(pos))
    assert logits.dtype == jnp.float32
    ref = _torch_logits(model)
    assert np.abs(np.asarray(logits) - ref).max() < 0.05 * np.abs(ref).max() + 0.05


@pytest.mark.parametrize("quant", ["Q4_1", "Q8_0", "Q4_0"])
def test_packed_layers_equal_dense(tiny_tied, tmp_path, quant):
    """Packed block matrices de-quantise in the graph to exactly the dense values."""
    path = _write_gguf(tiny_tied, tmp_path / f"tiny-{quant}.gguf", quant=quant)
    dense = load_model(path, load_tokenizer=False)
    packed = load_model(path, load_tokenizer=False, packed=True)
    assert isinstance(_layer(packed.params, "wq"), dict) and _layer(packed.params, "wq")["q"].dtype == jnp.int8
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    a = forward(dense.params, dense.config, toks, pos, None, no_cache_attention(pos))[0]
    b = forward(packed.params, packed.config, toks, pos, None, no_cache_attention(pos))[0]
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-5)


def _layer(params, key):
    """Layer 0's `key` from either weight layout (per-layer list or stacked)."""
    layers = params["layers"]
    return layers[0][key] if isinstance(layers, list) else layers[key]


@pytest.mark.parametrize("packed", [False, True])
def test_unrolled_and_scanned_layers_agree(tiny_tied, tmp_path, packed):
    """Per-layer weights under a Python loop (CPU default) and stacked weights under lax.scan give the
    same logits, and generate the same greedy tokens through each layout's KV cache."""
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    path = _write_gguf(tiny_tied, tmp_path / "tiny-q8.gguf", quant="Q8_0")
    loop = load_model(path, load_tokenizer=False, packed=packed, unroll=True)
    scan = load_model(path, load_tokenizer=False, packed=packed, unroll=False)
    assert (
        loop.per_layer
        and isinstance(loop.params["layers"], list)
        and len(loop.params["layers"]) == loop.config.num_layers
    )
    assert not scan.per_layer
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    a = forward(loop.params, loop.config, toks, pos, None, no_cache_attention(pos))[0]
    b = forward(scan.params, scan.config, toks, pos, None, no_cache_attention(pos))[0]
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-5)
    prompts = [[int(t) for t in TOKENS[0][:5]], [int(t) for t in TOKENS[0]]]
    sp = SamplingParams(max_tokens=12, stop_token_ids=())
    for lm in (loop, scan):
        lm.tokenizer = _IdTokenizer()
    assert [g.token_ids for g in generate(loop, prompts, sp)] == [g.token_ids for g in generate(scan, prompts, sp)]


class _IdTokenizer:
    """Just enough of memloop.engine.model.tokenizer.Tokenizer for generate() on token-id prompts."""

    pad_token_id = 0
    stop_token_ids: tuple[int, ...] = ()

    def decode(self, ids):
        return " ".join(map(str, ids))
