"""generate() on the bundled model: batching, stops, limits, seeds, compile reuse, errors."""

from __future__ import annotations

import pytest
from memloop.engine.errors import RequestError
from memloop.engine.runner.reference import decode_chunk, generate, prefill
from memloop.engine.sample.sampling import SamplingParams

PROMPTS = [
    [{"role": "user", "content": "Name three colors."}],
    [{"role": "user", "content": "What is 2 + 2? Answer with one number."}],
    "The quick brown fox",
]


@pytest.fixture(scope="module")
def batch_greedy(lm):
    return generate(lm, PROMPTS, SamplingParams(max_tokens=12))


def test_batch_equals_one_at_a_time(lm, batch_greedy):
    for prompt, together in zip(PROMPTS, batch_greedy):
        alone = generate(lm, [prompt], SamplingParams(max_tokens=12))[0]
        assert alone.token_ids == together.token_ids
        assert alone.text == together.text


def test_limits_and_finish_reasons(lm, batch_greedy):
    for g in batch_greedy:
        assert 1 <= len(g.token_ids) <= 12
        if g.finish_reason == "length":
            assert len(g.token_ids) == 12
        else:
            assert g.token_ids[-1] in lm.tokenizer.stop_token_ids
    assert batch_greedy[2].prompt_tokens == len(lm.tokenizer.encode("The quick brown fox"))


def test_stop_string_cuts_output(lm, batch_greedy):
    full = batch_greedy[2].text
    assert len(full) > 4
    stop = full[2:4]
    g = generate(lm, [PROMPTS[2]], SamplingParams(max_tokens=12, stop=(stop,)))[0]
    assert g.finish_reason == "stop" and g.text == full[: full.find(stop)]


def test_no_recompile_within_a_bucket(lm, batch_greedy):
    before = (prefill._cache_size(), decode_chunk._cache_size())
    generate(
        lm,
        [
            [{"role": "user", "content": "Name three animals."}],
            "A slow red cat",
            [{"role": "user", "content": "What is 3 + 3?"}],
        ],
        SamplingParams(max_tokens=12),
    )
    assert (prefill._cache_size(), decode_chunk._cache_size()) == before


def test_seeded_sampling_reproducible(lm):
    s = SamplingParams(max_tokens=10, temperature=0.8, top_k=40, seed=11, stop_token_ids=())
    a = generate(lm, PROMPTS[:2], s)
    b = generate(lm, PROMPTS[:2], s)
    assert [x.token_ids for x in a] == [x.token_ids for x in b]
    c = generate(lm, PROMPTS[:2], SamplingParams(max_tokens=10, temperature=0.8, top_k=40, seed=12, stop_token_ids=()))
    assert [x.token_ids for x in a] != [x.token_ids for x in c]


def test_request_errors(lm):
    with pytest.raises(RequestError, match="context"):
        generate(lm, [[1] * 10], SamplingParams(max_tokens=lm.config.max_position_embeddings))
    with pytest.raises(RequestError, match="empty"):
        generate(lm, [""], SamplingParams(max_tokens=2))
    with pytest.raises(RequestError, match="token ids"):
        generate(lm, [[lm.config.vocab_size]], SamplingParams(max_tokens=2))
    with pytest.raises(RequestError, match="sampling settings"):
        generate(lm, PROMPTS, [SamplingParams()])


def test_decoding_through_the_serving_kernel_gives_the_same_tokens(lm):
    """`decode_chunk(in_place=True)` (what `memloop bench model` times: decode attention through the
    serving engine's CPU kernel) decodes the same greedy tokens as XLA's attention, and does call the
    kernel once per layer."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from memloop.engine.model.decoder import init_contiguous_cache
    from memloop.engine.sample.sampling import row_arrays, seed_keys

    from tests.engine.kernel_gate import kernels_expected, skip_reason

    if not kernels_expected():
        pytest.skip(str(skip_reason()))
    cfg = lm.config
    ids = [lm.tokenizer.chat_ids(p) if isinstance(p, list) else lm.tokenizer.encode(p) for p in PROMPTS]
    b, t = len(ids), 64
    tokens = np.zeros((b, t), np.int32)
    for i, x in enumerate(ids):
        tokens[i, : len(x)] = x
    lengths = jnp.asarray([len(x) for x in ids], jnp.int32)
    params = [SamplingParams(max_tokens=20, stop_token_ids=())] * b
    temps, top_k, top_p = row_arrays(params)
    keys = seed_keys(params)
    stop, budget = jnp.full((1,), -2, jnp.int32), jnp.full((b,), 20, jnp.int32)
    outs = {}
    for in_place in (False, True):
        cache = init_contiguous_cache(cfg, b, 128, lm.dtype, per_layer=lm.per_layer)
        first, _, cache = prefill(
            lm.params, cfg, cache, jnp.asarray(tokens), lengths, temps, top_k, top_p, keys, cap=0, full=False
        )
        args = (
            lm.params,
            cfg,
            cache,
            first,
            lengths,
            jnp.ones((b,), jnp.int32),
            jnp.zeros((b,), bool),
            budget,
            stop,
            temps,
            top_k,
            top_p,
            keys,
        )
        if in_place:
            text = str(
                jax.make_jaxpr(lambda *a: decode_chunk(*a, cap=0, full=False, in_place=True), static_argnums=(1,))(
                    *args
                )
            )
            assert text.count("memloop_paged_attention") >= cfg.num_layers
        out = decode_chunk(*args, cap=0, full=False, in_place=in_place)[0]
        outs[in_place] = np.asarray(out).tolist()
    assert outs[True] == outs[False]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("unroll", [True, False])
def test_rotary_tables_are_computed_once_per_forward(lm, smollm2_gguf, unroll):
    """Both layer loops compute the rotary cos/sin once for all layers: the unrolled one (CPU's default)
    behind a conditional, since XLA:CPU would otherwise copy them into every layer's q and k rotation
    (2 x layers sin/cos passes a step: fails on the per-layer code); the `lax.scan` one (TPU/GPU's) outside
    the layers' while loop (where XLA also hoisted the per-layer code's: a guard, not a regression test)."""
    import re

    import jax
    import jax.numpy as jnp
    from memloop.engine.model.decoder import forward, load_model, no_cache_attention

    model = lm if unroll else load_model(smollm2_gguf, unroll=False, load_tokenizer=False)
    assert isinstance(model.params["layers"], list) == unroll
    positions = jnp.arange(8, dtype=jnp.int32)[None]
    tokens = jnp.ones((1, 8), jnp.int32)
    fn = jax.jit(lambda p, t, q: forward(p, model.config, t, q, None, no_cache_attention(q))[0])
    compiled = fn.lower(model.params, tokens, positions).compile().as_text()
    if unroll:  # once, or once in each branch of the conditional (per layer: 60)
        assert 1 <= compiled.count(" cosine(") <= 2, compiled.count(" cosine(")
    else:  # in a fusion the entry computation runs, not one inside the layers' while loop
        computations = {c.split(" ", 1)[0].lstrip("%"): c for c in re.split(r"\n(?=\S)", compiled) if "{" in c}
        fused = [name for name, text in computations.items() if " cosine(" in text]
        assert fused
        for name in fused:
            callers = [c for c, text in computations.items() if f"calls=%{name}," in text or f"calls=%{name}\n" in text]
            assert callers == ["ENTRY"], (name, callers)
