"""The serving engine on the bundled SmolLM2 with its decode attention in JAX's Pallas kernels (interpret mode).

Each kernel runs inside the real engine step (chunked prefill on the gather path, every decode step
through the kernel) and must give the gather path's greedy tokens on the benchmark's test prompts.
The interpreter is slow (seconds per kernel call), hence the slow marker and the short outputs.
"""

from __future__ import annotations

import pytest
from memloop.bench.model import PROMPTS
from memloop.engine.attention.pallas import AttentionBackendError
from memloop.engine.core.engine import Engine
from memloop.engine.engine_config import EngineConfig

MAX_TOKENS = 16


def _greedy(engine: Engine) -> list[list[int]]:
    reqs = [{"messages": m, "sampling": {"max_tokens": MAX_TOKENS}, "json_schema": None} for m in PROMPTS]
    return [engine.tokenizer.encode(r["text"]) for r in engine.complete_many(reqs)]


@pytest.fixture(scope="module")
def tokens_of(smollm2_gguf):
    """(dtype, attention) -> (the backend the engine used, greedy tokens), each run once per module.

    The model is loaded with stacked layers under one `lax.scan` (the accelerator layout): one kernel
    instance to interpret, where the unrolled CPU layout would compile one per layer (30)."""
    from memloop.engine.model.decoder import load_model

    models: dict[str, object] = {}
    runs: dict[tuple[str, str], tuple[str, list[list[int]]]] = {}

    def run(dtype: str, attention: str) -> tuple[str, list[list[int]]]:
        if (dtype, attention) not in runs:
            if dtype not in models:
                models[dtype] = load_model(smollm2_gguf, dtype=dtype, unroll=False)
            eng = Engine(
                EngineConfig(
                    num_pages=64, page_size=16, max_batch=8, attention=attention, pallas_interpret=attention != "gather"
                ),
                model=models[dtype],
            )
            try:
                assert eng.runner.cache["k"].dtype == dtype  # the pools take the model's dtype
                runs[(dtype, attention)] = (eng.attention.kind, _greedy(eng))
            finally:
                eng.shutdown()
        return runs[(dtype, attention)]

    return run


@pytest.mark.slow
@pytest.mark.parametrize(
    "kind,dtype", [("pallas-tpu", "float32"), ("pallas-gpu", "float32"), ("pallas-gpu", "bfloat16")]
)
def test_kernel_decoding_gives_the_gather_paths_greedy_tokens(kind, dtype, tokens_of):
    used, tokens = tokens_of(dtype, kind)
    assert used == kind
    assert tokens == tokens_of(dtype, "gather")[1]


def test_a_kernel_this_platform_cannot_run_fails_the_engine_by_name(loaded_model):
    with pytest.raises(AttentionBackendError, match="pallas_interpret"):
        Engine(EngineConfig(num_pages=64, attention="pallas-tpu"), model=loaded_model)
