"""The serving engine on the bundled SmolLM2 with its decode attention in JAX's Pallas kernels (interpret mode).

Each kernel runs inside the real engine step (chunked prefill on the gather path, every decode step
through the kernel) and must give the gather path's greedy tokens on the benchmark's test prompts.
The interpreter is slow (seconds per kernel call), hence the slow marker and the short outputs.
"""
from __future__ import annotations

import pytest

from bench.model import PROMPTS
from engine.engine_config import EngineConfig
from engine.pallas_attention import AttentionBackendError
from engine.serving import Engine

MAX_TOKENS = 16


def _greedy(engine: Engine) -> list[list[int]]:
    reqs = [{"messages": m, "sampling": {"max_tokens": MAX_TOKENS}, "json_schema": None} for m in PROMPTS]
    return [engine.tokenizer.encode(r["text"]) for r in engine.complete_many(reqs)]


@pytest.fixture(scope="module")
def scanned_model(smollm2_gguf):
    """Stacked layers under one `lax.scan` (the accelerator layout): one kernel instance to interpret,
    where the unrolled CPU layout would compile one per layer (30)."""
    from engine.model import load_model

    return load_model(smollm2_gguf, unroll=False)


@pytest.fixture(scope="module")
def gather_tokens(scanned_model):
    eng = Engine(EngineConfig(num_pages=64, page_size=16, max_batch=8, attention="gather"), model=scanned_model)
    try:
        return _greedy(eng)
    finally:
        eng.shutdown()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["pallas-tpu", "pallas-gpu"])
def test_kernel_decoding_gives_the_gather_paths_greedy_tokens(kind, scanned_model, gather_tokens):
    eng = Engine(EngineConfig(num_pages=64, page_size=16, max_batch=8, attention=kind, pallas_interpret=True),
                 model=scanned_model)
    try:
        assert eng.attention.kind == kind
        tokens = _greedy(eng)
        assert eng.stats()["decoded_tokens"] >= len(PROMPTS)
    finally:
        eng.shutdown()
    assert tokens == gather_tokens


def test_a_kernel_this_platform_cannot_run_fails_the_engine_by_name(loaded_model):
    with pytest.raises(AttentionBackendError, match="pallas_interpret"):
        Engine(EngineConfig(num_pages=64, attention="pallas-tpu"), model=loaded_model)
