"""The PRISM-style benchmark workload: append-only prompts, and its prefix-cache accounting on the engine."""
from __future__ import annotations

from bench.prefix import build_workload, run_engine


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
