"""The engine on the bundled SmolLM2: greedy invariance, exact usage, back-pressure, chunked prefill."""

from __future__ import annotations

import pytest
from memloop.engine.errors import RequestError

TOPICS = [
    "rivers",
    "planets",
    "birds",
    "colors",
    "tools",
    "fruits",
    "metals",
    "trees",
    "insects",
    "dances",
    "rocks",
    "clouds",
    "boats",
    "bridges",
    "spices",
    "shoes",
    "games",
    "fish",
    "flowers",
    "castles",
    "lamps",
    "drums",
    "maps",
    "coins",
    "hats",
    "kites",
    "bells",
    "glass",
    "ships",
    "roads",
    "moons",
    "winds",
]


def chat(text: str, max_tokens: int = 12, **sampling) -> dict:
    return {
        "messages": [{"role": "user", "content": text}],
        "sampling": {"max_tokens": max_tokens, **sampling},
        "json_schema": None,
    }


def token_ids(engine, results):
    return [engine.tokenizer.encode(r["text"]) for r in results]


def test_greedy_identical_batch_1_vs_32_and_cache_on_off(engine, engine_nocache):
    reqs = [chat(f"Name three {t}.") for t in TOPICS]
    batch32 = engine.complete_many(reqs)  # 32 sequences decode together
    assert engine.stats()["compiled_shapes"] >= 1
    singles = [engine_nocache.complete(r) for r in reqs[:4]]  # batch 1, no prefix cache
    nocache32 = engine_nocache.complete_many(reqs)
    again = engine.complete_many(reqs)  # every prompt page now comes from the prefix cache
    assert [r["text"] for r in batch32[:4]] == [r["text"] for r in singles]
    assert [r["text"] for r in batch32] == [r["text"] for r in nocache32] == [r["text"] for r in again]
    assert all(r["usage"]["cached_tokens"] == 0 for r in nocache32)
    for r in again:
        p = r["usage"]["prompt_tokens"]
        assert r["usage"]["cached_tokens"] == (p - 1) // 16 * 16
    assert any(r["finish_reason"] == "length" for r in batch32)


def test_greedy_matches_the_reference_decoder(engine, loaded_model):
    """The paged, batched, prefix-cached engine decodes the same greedy tokens as the contiguous-cache
    reference decoder (memloop.engine.runner.reference) on the same model."""
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    topics = TOPICS[:6]
    served = engine.complete_many([chat(f"Name three {t}.", max_tokens=24) for t in topics])
    ref = generate(
        loaded_model, [[{"role": "user", "content": f"Name three {t}."}] for t in topics], SamplingParams(max_tokens=24)
    )
    assert [r["text"] for r in served] == [g.text for g in ref]
    assert [r["usage"]["decoded_tokens"] for r in served] == [len(g.token_ids) for g in ref]


def test_usage_is_exact_and_matches_the_counters(engine):
    ids_engine = engine.tokenizer
    before = engine.stats()
    base = "You keep a memory of a long story. " * 6
    first = engine.complete({"prompt": base + "Chunk one: a fox ran.", "sampling": {"max_tokens": 5}})
    second = engine.complete({"prompt": base + "Chunk two: a crow sang.", "sampling": {"max_tokens": 5}})
    a = ids_engine.encode(base + "Chunk one: a fox ran.")
    b = ids_engine.encode(base + "Chunk two: a crow sang.")
    common = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert first["usage"]["prompt_tokens"] == len(a) and second["usage"]["prompt_tokens"] == len(b)
    assert second["usage"]["cached_tokens"] == min(common // 16 * 16, (len(b) - 1) // 16 * 16) > 0
    after = engine.stats()
    for key in ("prompt_tokens", "cached_tokens", "decoded_tokens"):
        assert after[key] - before[key] == first["usage"][key] + second["usage"][key]
    assert after["requests"] - before["requests"] == 2
    assert 1 <= second["usage"]["decoded_tokens"] <= 5


def test_back_pressure_and_preemption_never_truncate(make_engine, engine):
    # 8 pages of 16 tokens: two requests fit at a time, the rest queue or get preempted
    small = make_engine(num_pages=9, prefill_chunk=32, max_batch=8)
    reqs = [chat(f"Write one sentence about {t}.", max_tokens=24) for t in TOPICS[:4]]
    got = small.complete_many(reqs)
    want = engine.complete_many(reqs)
    assert [r["text"] for r in got] == [r["text"] for r in want]
    st = small.stats()
    assert st["preemptions"] + st["backpressure_steps"] > 0  # the pool really was too small for all four
    assert st["running"] == 0 and st["waiting"] == 0
    assert st["free_pages"] + st["prefix_cached_pages"] == st["total_pages"]
    # a request larger than the whole pool is refused with a clear error, not truncated
    with pytest.raises(RequestError, match="pages"):
        small.complete(chat("hello", max_tokens=400))


def test_seeded_sampling_is_reproducible_across_batches(engine):
    req = chat("Tell me a short fact about the sea.", max_tokens=12, temperature=0.8, top_k=40, seed=7)
    alone = engine.complete(req)
    mixed = engine.complete_many([chat(f"Name three {t}.") for t in TOPICS[:3]] + [req])[-1]
    assert alone["text"] == mixed["text"]
    other = engine.complete_many(
        [
            chat("Tell me a short fact about the sea.", max_tokens=12, temperature=0.8, top_k=40, seed=s)
            for s in range(4)
        ]
    )
    assert len({r["text"] for r in other}) > 1


def test_stop_strings_and_bad_requests(engine):
    r = engine.complete(chat("Count from 1 to 20 separated by commas.", max_tokens=40, stop=["5"]))
    assert "5" not in r["text"] and r["finish_reason"] == "stop"
    for bad in (
        {"sampling": {"max_tokens": 3}},
        {"prompt": "x", "messages": [{"role": "user", "content": "y"}]},
        {"prompt": "x", "sampling": {"max_tokens": 0}},
        {"prompt": "x", "sampling": {"temperature": -1}},
        {"prompt": "x", "sampling": {"bogus": 1}},
        {"prompt": "", "sampling": {"max_tokens": 3}},
        {"prompt": "x " * 9000, "sampling": {"max_tokens": 3}},
    ):
        with pytest.raises(RequestError):
            engine.complete(bad)
    assert engine.health()


@pytest.mark.slow
def test_tensor_parallel_engine_matches_one_device(engine):
    """The same engine over a 4-device `tp` mesh (simulated CPU devices) gives the same greedy tokens."""
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    tp = Engine(EngineConfig(num_pages=64, tp=4))
    try:
        reqs = [chat(f"Name three {t}.") for t in TOPICS[:4]]
        assert [r["text"] for r in tp.complete_many(reqs)] == [r["text"] for r in engine.complete_many(reqs)]
    finally:
        tp.shutdown()


LONG_STORY = (
    "The river bends twice before it reaches the old mill, where the miller's daughter keeps the ledger "
    "of every sack of grain that passes through the village each autumn. "
)


@pytest.mark.slow
def test_long_context_decode_identical_alone_in_a_batch_of_32_and_against_the_reference(make_engine, loaded_model):
    """At 1.2k tokens of context (five 256-key chunks of the in-place attention kernel), a request decodes
    the same greedy tokens alone, among 31 others sharing its prefix, without the prefix cache, and as the
    contiguous-cache reference decoder (which attends by the gather-free dense path)."""
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    story = LONG_STORY * 40
    eng = make_engine(num_pages=400, prefill_chunk=512)
    asks = [f"{story}\nIn one sentence, what does the ledger say about {t}?" for t in TOPICS]
    reqs = [{"prompt": a, "sampling": {"max_tokens": 8}} for a in asks]
    assert 1100 < eng.count_tokens(asks[0]) < 1400
    batch32 = eng.complete_many(reqs)
    alone = [eng.complete(r) for r in reqs[:2]]
    nocache = make_engine(num_pages=400, prefill_chunk=512, prefix_cache=False).complete(reqs[0])
    assert [r["text"] for r in alone] == [r["text"] for r in batch32[:2]] and nocache["text"] == batch32[0]["text"]
    ref = generate(loaded_model, [asks[0]], SamplingParams(max_tokens=8))[0]
    assert ref.text == batch32[0]["text"]


def test_stats_split_the_engine_threads_wall_time(make_engine):
    """compute + compile + host + idle account for the engine thread's wall time; only a step of a new
    shape is charged to compilation, and a reset starts a new window."""
    eng = make_engine(page_size=8, num_pages=64, prefix_cache=False)  # a pool shape no other test compiles
    # 24 tokens: the runs of decode steps (at most a page of 8 each) repeat a compiled shape
    eng.complete(chat("Name three rivers.", max_tokens=24))
    first = eng.stats()
    parts = [first[k] for k in ("compute_s", "compile_s", "host_s", "idle_s")]
    assert all(p > 0 for p in parts)
    assert 0.9 * first["wall_s"] <= sum(parts) <= first["wall_s"] + 0.01
    eng.reset_counters()
    eng.complete(chat("Name three rivers.", max_tokens=6))
    again = eng.stats()
    assert again["compile_s"] == 0 and again["compute_s"] > 0 and again["decoded_tokens"] == 6
    assert sum(again[k] for k in ("compute_s", "compile_s", "host_s", "idle_s")) <= again["wall_s"] + 0.01


def test_a_float16_kv_cache_is_batch_invariant_and_read_by_the_kernel(make_engine, engine):
    """kv_dtype=float16 keeps half the bytes per cached token (read by the in-place kernel) and decodes the
    same greedy tokens alone and in a batch; against the float32 cache it may differ only slightly."""
    import jax.numpy as jnp

    half = make_engine(kv_dtype="float16")
    assert half.runner.cache["k"][0].dtype == jnp.float16
    reqs = [chat(f"Name three {t}.") for t in TOPICS[:8]]
    batch = half.complete_many(reqs)
    assert [half.complete(r)["text"] for r in reqs[:2]] == [r["text"] for r in batch[:2]]
    full = engine.complete_many(reqs)
    assert sum(a["text"] == b["text"] for a, b in zip(batch, full)) >= 6


def test_an_int8_kv_cache_is_batch_invariant_and_read_by_the_kernel(make_engine, engine):
    """kv_dtype=int8 keeps a code per element and a scale per (token, KV head): the same budget buys
    256/68 as many pages as float32 on SmolLM2's 64-wide heads; decode reads the codes in place (the
    kernel's int8 entry point, see tests/engine/test_engine_paged_attention.py); a request decodes the same greedy
    tokens alone and in a batch, and
    most requests match the float32 cache's text."""
    import jax.numpy as jnp

    q8 = make_engine(kv_dtype="int8", num_pages=None, kv_budget=64 << 20)
    f32 = make_engine(num_pages=None, kv_budget=64 << 20)
    assert q8.runner.cache["k"][0].dtype == jnp.int8 and q8.runner.cache["k_scale"][0].dtype == jnp.float32
    assert q8.pool.num_pages / f32.pool.num_pages == pytest.approx(256 / 68, rel=0.01)
    reqs = [chat(f"Name three {t}.") for t in TOPICS[:8]]
    batch = q8.complete_many(reqs)
    assert [q8.complete(r)["text"] for r in reqs[:2]] == [r["text"] for r in batch[:2]]
    full = engine.complete_many(reqs)
    assert sum(a["text"] == b["text"] for a, b in zip(batch, full)) >= 6


def test_decode_runs_several_steps_per_call_with_the_single_step_tokens(make_engine):
    """A batch that only decodes, with nobody waiting and no host-side stop rules, takes up to
    DECODE_RUN steps per device call (`engine_decode_steps`); its tokens, usage and finish reasons are
    those of one step per call, which a stop string that never matches forces (stop strings are
    checked on the host after every token). Covers a stop token ending a run early, a max_tokens that
    is not a multiple of the run, seeded sampling, and rows finishing at different steps."""
    from memloop.engine.runner.step import engine_decode_steps

    eng = make_engine(max_batch=4, prefix_cache=False)  # the second pass must not be served from the cache
    reqs = [
        chat("Name three rivers.", max_tokens=64),
        chat("Count to thirty in words.", max_tokens=21),
        chat("Write a long story about a fox.", max_tokens=37, temperature=0.8, seed=3),
        chat("Say hi.", max_tokens=40, top_k=5, temperature=1.0, seed=11),
    ]
    before = engine_decode_steps._cache_size()
    runs = eng.complete_many(reqs)
    assert engine_decode_steps._cache_size() > before  # the several-step program served them
    singles = eng.complete_many([{**r, "sampling": {**r["sampling"], "stop": ["\x00never"]}} for r in reqs])
    assert [(r["text"], r["usage"], r["finish_reason"]) for r in runs] == [
        (r["text"], r["usage"], r["finish_reason"]) for r in singles
    ]
    assert {r["finish_reason"] for r in runs} == {"stop", "length"}
    for r, req in zip(runs, reqs):  # a run stops at max_tokens wherever that falls in it
        assert r["finish_reason"] == "stop" or r["usage"]["decoded_tokens"] == req["sampling"]["max_tokens"]
