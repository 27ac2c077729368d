"""Gemma 2 and Gemma 3: tiny random checkpoints written by transformers, loaded from their safetensors
directories and as GGUFs with llama.cpp's layout, against transformers on the same weights through the
contiguous cache of `generate`, the scanned layer loop and the paged serving forward; under `-m slow`
the packaged gemma-3-270m Q4_K_M GGUF against transformers' GGUF loader and through the serving engine."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from memloop.engine.model.decoder import forward, load_model, no_cache_attention
from memloop.engine.model.weights import load_weights

from tests.engine.gguf_writer import LLAMA_CPP_MATRICES, float32_state, header_writer, put_tensor, write_out
from tests.engine.test_engine_qwen2 import TOKENS, _greedy, _logits, _torch_logits, packaged_model, saved
from tests.engine.test_engine_qwen3_mistral import assert_dense_and_blocked_match, assert_paged_matches

GREEDY = 32
WINDOW = 5  # binding: shorter than the 12-token prompt and the 44-token generation
COMMON = dict(
    vocab_size=256,
    hidden_size=128,
    intermediate_size=256,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=512,
    rms_norm_eps=1e-6,
    sliding_window=WINDOW,
    query_pre_attn_scalar=48,
    initializer_range=0.1,
    attn_implementation="eager",
)


def _randomise_norms(model) -> None:
    """transformers initialises Gemma's norm weights to zero (scale 1 + 0): random ones catch a loader
    that drops a norm or a decoder that forgets the 1 + w."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.5, 0.5)


def _save(model, tmp_path_factory, name: str):
    model.generation_config.eos_token_id = None  # compare full greedy runs, whatever token 1 does
    return saved(model, tmp_path_factory, name)


@pytest.fixture(scope="module")
def tiny_gemma2(tmp_path_factory):
    """Alternating local/global layers, soft-caps small enough to bind on these logits, a query scale
    other than head_dim, tied embeddings."""
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    cfg = Gemma2Config(
        num_hidden_layers=4, rope_theta=10000.0, attn_logit_softcapping=2.0, final_logit_softcapping=1.5, **COMMON
    )
    model = Gemma2ForCausalLM(cfg).eval()
    _randomise_norms(model)
    return _save(model, tmp_path_factory, "tiny_gemma2")


@pytest.fixture(scope="module")
def tiny_gemma3(tmp_path_factory):
    """Six layers, 2 local : 1 global (the pattern is a config setting; the real models use 5 : 1), local
    and global rotary bases apart, random per-head q/k norm weights."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(1)
    cfg = Gemma3TextConfig(
        num_hidden_layers=6,
        sliding_window_pattern=3,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
        **COMMON,
    )
    model = Gemma3ForCausalLM(cfg).eval()
    _randomise_norms(model)
    return _save(model, tmp_path_factory, "tiny_gemma3")


def _torch_greedy(model, n: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor(TOKENS), max_new_tokens=n, do_sample=False, pad_token_id=0)
    return out[0, len(TOKENS[0]) :].tolist()


def _full_logits(lm, cfg) -> np.ndarray:
    toks = jnp.asarray(TOKENS, jnp.int32)
    pos = jnp.arange(toks.shape[1], dtype=jnp.int32)[None]
    return np.asarray(forward(lm.params, cfg, toks, pos, None, no_cache_attention(pos))[0])


def test_hf_gemma2_directory_matches_transformers(tiny_gemma2):
    model, path = tiny_gemma2
    lm = load_model(path, load_tokenizer=False)
    cfg = lm.config
    assert cfg.architecture == "gemma2" and cfg.tie_word_embeddings and not cfg.qk_norm
    assert cfg.local_layers == (0, 2) and cfg.sliding_window == WINDOW and cfg.rope_local_theta is None
    assert (cfg.attn_softcap, cfg.final_softcap, cfg.query_pre_attn_scalar) == (2.0, 1.5, 48.0)
    np.testing.assert_array_equal(
        load_weights(path)[1]["layers"]["post_mlp_norm"][3],
        model.model.layers[3].post_feedforward_layernorm.weight.detach().numpy(),
    )
    ref = _torch_logits(model)
    assert np.abs(_logits(lm) - ref).max() < 2e-3
    # Each Gemma 2 difference changes the result here, so a decoder that ignored one would fail above.
    for change in (
        dict(attn_softcap=None),
        dict(final_softcap=None),
        dict(query_pre_attn_scalar=None),
        dict(local_layers=None),
        dict(sliding_window=None),
    ):
        assert np.abs(_full_logits(lm, dataclasses.replace(cfg, **change)) - ref).max() > 1e-2, change
    assert _greedy(lm, GREEDY) == _torch_greedy(model, GREEDY)


def test_hf_gemma3_directory_matches_transformers(tiny_gemma3):
    model, path = tiny_gemma3
    lm = load_model(path, load_tokenizer=False)
    cfg = lm.config
    assert cfg.architecture == "gemma3" and cfg.qk_norm and cfg.tie_word_embeddings
    assert cfg.local_layers == (0, 1, 3, 4) and cfg.sliding_window == WINDOW
    assert (cfg.rope_theta, cfg.rope_local_theta) == (1e6, 1e4)
    assert (cfg.attn_softcap, cfg.final_softcap) == (None, None)
    np.testing.assert_array_equal(
        load_weights(path)[1]["layers"]["q_norm"][5], model.model.layers[5].self_attn.q_norm.weight.detach().numpy()
    )
    ref = _torch_logits(model)
    assert np.abs(_logits(lm) - ref).max() < 2e-3
    for change in (dict(rope_local_theta=None), dict(local_layers=None), dict(sliding_window=None)):
        assert np.abs(_full_logits(lm, dataclasses.replace(cfg, **change)) - ref).max() > 1e-2, change
    assert _greedy(lm, GREEDY) == _torch_greedy(model, GREEDY)


@pytest.mark.parametrize("fixture", ["tiny_gemma2", "tiny_gemma3"])
def test_gemma_scanned_layers_agree(fixture, request):
    """The `lax.scan` layer loop (TPU/GPU) carries per-layer windows and rotary tables as traced
    values; it reproduces transformers like the unrolled CPU loop."""
    model, path = request.getfixturevalue(fixture)
    lm = load_model(path, load_tokenizer=False, unroll=False)
    assert not lm.per_layer
    assert np.abs(_logits(lm) - _torch_logits(model)).max() < 2e-3
    assert _greedy(lm, GREEDY) == _torch_greedy(model, GREEDY)


@pytest.mark.parametrize("unroll", [True, False])
@pytest.mark.parametrize("fixture", ["tiny_gemma2", "tiny_gemma3"])
def test_gemma_paged_path_matches_transformers(fixture, unroll, request):
    """The serving forward: a prompt prefilled in chunks into 4-token pages, then decoded token by
    token; every step's logits equal transformers' at that position (windows of the local layers
    cross page and chunk boundaries, global layers see everything, soft-caps applied)."""
    model, path = request.getfixturevalue(fixture)
    assert_paged_matches(load_model(path, load_tokenizer=False, unroll=unroll), _torch_logits(model)[0])


@pytest.mark.parametrize("fixture", ["tiny_gemma2", "tiny_gemma3"])
def test_gemma_on_a_mesh_equals_transformers(fixture, request):
    """Gemma's extra per-layer norms have a place in the tensor-parallel layout (replicated); tests/conftest.py
    gives the process 4 CPU devices (make_mesh names the XLA flag if they are missing)."""
    import jax
    from memloop.engine.model.mesh import make_mesh

    model, path = request.getfixturevalue(fixture)
    lm = load_model(path, load_tokenizer=False, mesh=make_mesh(4))
    assert len(lm.params["final_norm"].sharding.device_set) == 4
    with jax.set_mesh(lm.mesh):
        assert np.abs(_logits(lm) - _torch_logits(model)).max() < 2e-3


# ----------------------------------------------------------------------------- GGUF (llama.cpp's layout)


def _write_gemma_gguf(model, path: Path, arch: str) -> Path:
    """The model as a gemma2/gemma3 GGUF the way llama.cpp's converter writes one: its tensor names, no
    Q/K permutation, every norm weight stored as 1 + w, tied embedding (no output tensor), matrices
    Q8_0. GGUFs carry no query scale (llama.cpp uses head_dim), so the model must use head_dim."""
    import gguf

    cfg = model.config
    assert cfg.query_pre_attn_scalar == cfg.head_dim
    sd = float32_state(model)
    theta = (
        cfg.rope_parameters["full_attention"]["rope_theta"] if arch == "gemma3" else cfg.rope_parameters["rope_theta"]
    )
    w = header_writer(model, path, arch, rope_theta=theta)
    w.add_key_length(cfg.head_dim)
    w.add_value_length(cfg.head_dim)
    w.add_sliding_window(cfg.sliding_window)
    if arch == "gemma3":  # the fixture's 2 : 1 pattern, not llama.cpp's default 5 : 1
        w.add_sliding_window_pattern([t == "sliding_attention" for t in cfg.layer_types])
    if arch == "gemma2":
        w.add_attn_logit_softcapping(cfg.attn_logit_softcapping)
        w.add_final_logit_softcapping(cfg.final_logit_softcapping)
    new_sd = {}

    def put(name: str, hf_name: str, quantised: bool = False) -> None:
        arr = sd[hf_name]
        if name.endswith("norm.weight"):  # transformers' GGUF loader reads back (1 + w) - 1, as memloop does
            w.add_tensor(name, arr + np.float32(1.0))
            new_sd[hf_name] = (arr + np.float32(1.0)) - np.float32(1.0)
        else:
            put_tensor(w, new_sd, name, hf_name, arr, "Q8_0" if quantised else "F32")

    put("token_embd.weight", "model.embed_tokens.weight", quantised=True)
    put("output_norm.weight", "model.norm.weight")
    matrices = LLAMA_CPP_MATRICES
    vectors = {
        "attn_norm": "input_layernorm",
        "post_attention_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "post_ffw_norm": "post_feedforward_layernorm",
    }
    if arch == "gemma3":
        vectors |= {"attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm"}
    names = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[gguf.MODEL_ARCH[arch.upper()]]}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}."
        for key, name in (vectors | matrices).items():
            assert f"blk.{{bid}}.{key}" in names, key
            put(f"blk.{i}.{key}.weight", p + name + ".weight", quantised=key in matrices)
    if "lm_head.weight" in sd:
        new_sd["lm_head.weight"] = new_sd["model.embed_tokens.weight"]
    return write_out(w, path, model, new_sd)


@pytest.mark.parametrize("fixture,arch", [("tiny_gemma2", "gemma2"), ("tiny_gemma3", "gemma3")])
def test_gguf_gemma_matches_transformers(fixture, arch, request, tmp_path):
    """llama.cpp's names, its 1 + w norms taken back to w, the interleaving and Gemma 3's local rotary
    base that llama.cpp assumes (GGUFs do not store them), Gemma 2's soft-caps from the metadata;
    dense, and in block form where the CPU kernel builds."""
    from transformers import AutoModelForCausalLM

    _, hf_path = request.getfixturevalue(fixture)
    model = AutoModelForCausalLM.from_pretrained(hf_path, query_pre_attn_scalar=64, attn_implementation="eager").eval()
    model.generation_config.eos_token_id = None
    path = _write_gemma_gguf(model, tmp_path / f"tiny-{arch}.gguf", arch)
    ref = _torch_logits(model)
    dense = load_model(path, load_tokenizer=False, blocks=False)
    hf_cfg = load_model(hf_path, load_tokenizer=False).config
    assert dense.config.rms_norm_eps == pytest.approx(hf_cfg.rms_norm_eps)  # GGUF stores it as f32
    assert dense.config == dataclasses.replace(
        hf_cfg, query_pre_attn_scalar=64.0, rms_norm_eps=dense.config.rms_norm_eps
    )
    np.testing.assert_array_equal(
        load_weights(path)[1]["layers"]["attn_norm"][1], model.model.layers[1].input_layernorm.weight.detach().numpy()
    )
    assert_dense_and_blocked_match(path, dense, ref, _torch_greedy(model, GREEDY), lambda params: params["embed"])


def test_gemma_config_edge_cases():
    """Older config.json spellings (rope_local_base_freq, sliding_window_pattern, no layer_types), a
    linear-scaled global rotary, a 27B-sized GGUF's query scale, and a wrong activation refused."""
    from memloop.engine.errors import ModelFormatError
    from memloop.engine.model.config import config_from_gguf, config_from_hf

    base = {
        "architectures": ["Gemma3ForCausalLM"],
        "vocab_size": 8,
        "hidden_size": 16,
        "intermediate_size": 8,
        "num_hidden_layers": 12,
        "num_attention_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 1024,
        "sliding_window": 64,
        "rope_theta": 1e6,
        "rope_local_base_freq": 5e3,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }
    cfg = config_from_hf(base, "test")
    assert cfg.local_layers == (0, 1, 2, 3, 4, 6, 7, 8, 9, 10) and cfg.rope_local_theta == 5e3
    assert cfg.tie_word_embeddings and cfg.query_pre_attn_scalar == 256
    np.testing.assert_allclose(cfg.inv_freq(5), 1.0 / (1e6 ** (np.arange(0, 8, 2) / 8)) / 8, rtol=1e-6)
    np.testing.assert_allclose(cfg.inv_freq(0), 1.0 / (5e3 ** (np.arange(0, 8, 2) / 8)), rtol=1e-6)
    with pytest.raises(ModelFormatError, match="activation"):
        config_from_hf(base | {"hidden_activation": "silu"}, "test")
    meta = {
        "general.architecture": "gemma2",
        "gemma2.embedding_length": 4608,
        "gemma2.attention.head_count": 32,
        "gemma2.attention.head_count_kv": 16,
        "gemma2.attention.key_length": 128,
        "gemma2.block_count": 46,
        "gemma2.feed_forward_length": 36864,
        "gemma2.context_length": 8192,
        "gemma2.attention.sliding_window": 4096,
    }
    g27 = config_from_gguf(meta, 256000, False, None, "test")
    assert g27.query_pre_attn_scalar == 144 and (g27.attn_softcap, g27.final_softcap) == (50.0, 30.0)
    assert g27.local_layers == tuple(range(0, 46, 2))


# ----------------------------------------------------------------------------- the packaged model (slow)

PROMPTS = [
    "The capital of France is Paris. The capital of Germany is",
    'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    # 434 tokens: with 200 generated the context passes the 512-token window of the local layers.
    "A lighthouse keeper writes in his log every evening. " * 8
    + "Today the fog came in early and the ships stayed in the harbour. " * 25
    + "The next morning",
]


@pytest.fixture(scope="module")
def gemma_gguf():
    return packaged_model("gemma-3-270m")


@pytest.mark.slow
def test_gemma3_270m_gguf_matches_transformers_and_serves(gemma_gguf):
    """The real Q4_K_M file (Q8_0 embedding, Q5_0/Q4_K/Q6_K/Q8_0 matrices; 5 local : 1 global layers,
    window 512, per-head q/k norms): the checkpoint's tokenizer puts BOS first; logits within 2e-3 and
    200 greedy tokens identical to transformers on the same GGUF, the window binding in the last
    prompt; the paged serving engine decodes the same tokens."""
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig
    from memloop.engine.errors import RequestError
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(1)
    lm = load_model(gemma_gguf)
    cfg = lm.config
    assert cfg.architecture == "gemma3" and cfg.sliding_window == 512 and cfg.rope_local_theta == 1e4
    assert cfg.local_layers == tuple(i for i in range(18) if (i + 1) % 6) and cfg.query_pre_attn_scalar == 256
    tok = lm.tokenizer
    ids = [tok.prompt_ids(p) for p in PROMPTS]
    assert all(i[0] == tok.bos_token_id == 2 and i[1:] == tok.encode(p) for i, p in zip(ids, PROMPTS))
    assert 512 - 200 < len(ids[2]) < 512  # the window binds during decoding, not in the prompt
    with pytest.raises(RequestError, match="no chat template"):  # a base model: completion prompts only
        tok.chat_ids([{"role": "user", "content": "hi"}])
    hf = AutoModelForCausalLM.from_pretrained(
        str(gemma_gguf.parent), gguf_file=gemma_gguf.name, dtype=torch.float32
    ).eval()
    for prompt in ids:
        toks = jnp.asarray([prompt], jnp.int32)
        pos = jnp.arange(len(prompt), dtype=jnp.int32)[None]
        ours = np.asarray(forward(lm.params, cfg, toks, pos, None, no_cache_attention(pos))[0])
        with torch.no_grad():
            ref = hf(torch.tensor([prompt])).logits.numpy()
        assert np.abs(ours - ref).max() < 2e-3
    n = 200
    gens = generate(lm, PROMPTS, SamplingParams(max_tokens=n, stop_token_ids=()))
    for prompt, g in zip(ids, gens):
        with torch.no_grad():
            out = hf.generate(
                torch.tensor([prompt]),
                max_new_tokens=n,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=tok.pad_token_id,
            )
        assert g.token_ids == out[0, len(prompt) :].tolist()
    engine = Engine(EngineConfig(num_pages=160, page_size=16, max_batch=4, prefill_chunk=128), model=lm)
    try:
        served = engine.complete_many(
            [{"prompt": p, "sampling": {"max_tokens": n, "stop_token_ids": []}} for p in PROMPTS]
        )
    finally:
        engine.shutdown()
    assert [r["text"] for r in served] == [g.text for g in gens]
    assert [r["usage"]["prompt_tokens"] for r in served] == [len(i) for i in ids]


@pytest.mark.parametrize("adds_bos", [True, False])
def test_completion_prompts_start_with_bos_exactly_when_the_tokenizer_adds_one(adds_bos):
    """Gemma's tokenizer adds BOS (its post-processor; the attribute is lost when a converted tokenizer
    is saved and reloaded, so the behaviour is asked); SmolLM2's and Qwen's add none. Completion
    prompts (reference decoder, serving intake) follow the tokenizer; token counts never include it."""
    from memloop.engine.model.tokenizer import Tokenizer
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    backend = Backend(models.WordLevel({"<bos>": 0, "<unk>": 1, "a": 2, "b": 3}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    if adds_bos:
        backend.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", 0)])
    tok = Tokenizer(PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<bos>", unk_token="<unk>"))
    assert tok.add_bos is adds_bos
    assert tok.prompt_ids("a b") == ([0, 2, 3] if adds_bos else [2, 3])
    assert tok.encode("a b") == [2, 3] and tok.count_tokens("a b") == 2
