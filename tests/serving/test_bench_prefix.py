"""The PRISM-style benchmark workload: append-only prompts, and its prefix-cache accounting on the engine."""

from __future__ import annotations

from memloop.bench.prefix import build_workload, run_engine


def test_workload_is_deterministic_and_append_only():
    w = build_workload(samples=3, steps=3)
    assert w == build_workload(samples=3, steps=3)
    assert w[0][0] != w[1][0]  # loops differ after the shared instructions and schema
    for prompts in w:
        for prev, nxt in zip(prompts, prompts[1:]):
            memory_end = prev.index("\n\nChunk ")
            assert nxt.startswith(prev[:memory_end])  # step i+1 repeats step i up to the end of its memory


def test_engine_run_reports_cache_hits(engine):
    w = build_workload(samples=2, steps=2, chunk_words=8)
    engine.clear_prefix_cache()
    on = run_engine(engine, w, max_tokens=2)
    ids = [[engine.tokenizer.encode(p) for p in prompts] for prompts in w]
    assert on["prompt_tokens"] == sum(len(x) for prompts in ids for x in prompts)
    # every prompt but the very first reuses whole pages: the other loop's instructions, its own memory
    assert 0.5 * on["prompt_tokens"] < on["cached_tokens"] <= on["prompt_tokens"] - len(ids[0][0])


def test_cacheable_ceiling_counts_whole_shared_pages():
    from memloop.bench.prefix import cacheable_tokens

    a = list(range(40))
    b = list(range(35)) + [99, 98]  # shares 35 tokens with a -> 2 whole pages of 16
    c = list(range(40))  # identical to a: capped one token short -> 39 -> 2 pages
    assert cacheable_tokens([[a], [b], [c]], 16) == 32 + 32
    assert cacheable_tokens([[a, c]], 16) == 32  # same loop, later step
    assert cacheable_tokens([[a], [list(range(100, 140))]], 16) == 0


def test_engine_serves_the_whole_cacheable_ceiling(engine):
    """The radix cache reaches the workload's page-granular ceiling (prompts submitted step by step)."""
    from memloop.bench.prefix import cacheable_tokens

    w = build_workload(samples=3, steps=3, chunk_words=8)
    engine.clear_prefix_cache()
    got = 0
    for i in range(3):  # step-major, as concurrent loops submit them
        for prompts in w:
            got += engine.complete({"prompt": prompts[i], "sampling": {"max_tokens": 2, "temperature": 0.0}})["usage"][
                "cached_tokens"
            ]
    ids = [[engine.tokenizer.encode(p) for p in prompts] for prompts in w]
    assert got == cacheable_tokens(ids, engine.pool.page_size)


def test_accelerator_figures_are_null_on_cpu(loaded_model):
    from memloop.bench.prefix import accelerator_figures

    assert accelerator_figures(loaded_model, 1 << 26, emit=lambda _: None) == {
        "accelerator": None,
        "decode_hbm_fraction": None,
        "prefill_mfu": None,
    }


def test_engine_figures_time_the_engine_against_a_device_spec(engine):
    """The accelerator measurement itself, run on CPU against a made-up device: real timings, real ratios."""
    from memloop.bench.accelerators import DeviceSpec, engine_figures

    # 24 decode steps: their time must stand out from the noise of a shared host (~20-100 ms a step)
    out = engine_figures(
        engine, DeviceSpec("made-up", 1e9, 1e12), batch=2, decode_steps=24, prefill_tokens=48, log=lambda _: None
    )
    assert out["figures_batch"] == 2 and out["figures_decode_steps"] == 24
    assert 40 <= out["figures_prefill_tokens"] <= 56  # re-tokenised text of 48 tokens
    # a CPU reads ~0.1-0.6 GB of weights per step in tens of ms: within 0.1x-100x of a 1 GB/s "device"
    assert 0.1 < out["decode_hbm_fraction"] < 100 and 0 < out["prefill_mfu"] < 100


def test_papers_workload_shares_one_book_and_grows_each_memory():
    """The papers' shape: every loop reads the same ~1024-token chunks; memories differ and grow."""
    from memloop.bench.prefix import WORKLOADS, workload_settings

    ws = workload_settings("papers", samples=3, steps=3)
    assert (ws["max_tokens"], WORKLOADS["papers"]["samples"], WORKLOADS["papers"]["steps"]) == (256, 32, 8)
    w = build_workload(ws["samples"], ws["steps"], ws["chunk_words"], revisions=ws["revisions"], shared_book=True)
    chunk = lambda p: p[p.index("\n\nChunk ") :]
    for i in range(3):
        assert chunk(w[0][i]) == chunk(w[1][i]) == chunk(w[2][i])  # one shared book
    assert w[0][1] != w[1][1]  # each loop's own revisions
    from memloop.engine.assets import default_model_path
    from memloop.engine.model.tokenizer import load_tokenizer

    tok = load_tokenizer(default_model_path())
    first, second = tok.count_tokens(chunk(w[0][0])), tok.count_tokens(chunk(w[0][1]))
    assert 900 < first < 1150 and 900 < second < 1150
    growth = tok.count_tokens(w[0][2]) - tok.count_tokens(w[0][1]) - (tok.count_tokens(chunk(w[0][2])) - second)
    assert 200 < growth < 330  # ~256 tokens of memory a step


def test_an_unknown_workload_is_named():
    import pytest
    from memloop.bench.prefix import workload_settings
    from memloop.engine.errors import EngineError

    with pytest.raises(EngineError, match="papers"):
        workload_settings("huge")


def test_the_cache_off_and_warm_up_passes_can_be_left_out():
    """The full papers shape runs only without them on a 2-core host; what was not run is null, not 0."""
    from memloop.bench.prefix import main

    lines: list[str] = []
    res = main(
        "short",
        emit=lines.append,
        cache_off=False,
        warmup=False,
        samples=2,
        steps=2,
        max_tokens=2,
        chunk_words=5,
        kv_dtype="float16",
    )
    assert res["kv_dtype"] == "float16" and res["kv_budget_bytes"] == 1 << 30
    assert res["tokens_per_s"] > 0 and res["decoded_tokens"] == 2 * 2 * 2
    assert res["warmup_s"] is None
    assert res["tokens_per_s_cache_off"] is None and res["ratio_vs_cache_off"] is None
    assert res["greedy_identical_cache_on_off"] is None
    assert res["engine_time_split"]["compile_s"] > 0  # the timed pass compiled its shapes itself
    assert any("not run (--no-cache-off)" in line for line in lines)
    assert any("no warm-up pass" in line for line in lines)
