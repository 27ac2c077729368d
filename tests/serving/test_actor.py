"""The Ray actor, driven for real through a local Ray instance."""

from __future__ import annotations

import ray
from memloop.eval.llm import LLMRequest, LLMResult

from memloop.sampling import SamplingParams


def test_engine_actor_batches_concurrent_requests(ray_local, smollm2_gguf):
    from memloop.engine.serve.actor import actor_class

    actor = actor_class(num_cpus=1).remote(
        {"model": str(smollm2_gguf), "kv_budget": 64 << 20, "max_batch": 16, "prefix_cache": True}
    )
    assert ray.get(actor.health.remote(), timeout=300)
    shared = "You summarise a story chunk by chunk. Keep the memory short. " * 3
    reqs = [
        LLMRequest(
            messages=(
                {"role": "system", "content": shared},
                {"role": "user", "content": f"Chunk {i}: a dog found bone number {i}."},
            ),
            sampling=SamplingParams(max_tokens=6),
        )
        for i in range(8)
    ]
    outs = ray.get([actor.complete.remote(r) for r in reqs], timeout=600)
    results = [LLMResult.from_dict(o) for o in outs]
    assert all(r.text and r.usage.decoded_tokens >= 1 for r in results)
    stats = ray.get(actor.stats.remote())
    assert stats["requests"] == 8
    assert stats["prompt_tokens"] == sum(r.usage.prompt_tokens for r in results)
    assert stats["cached_tokens"] == sum(r.usage.cached_tokens for r in results) > 0  # the shared system prompt
    assert stats["steps"] < sum(r.usage.decoded_tokens for r in results)  # decoded together, not one by one
    n = ray.get(actor.count_tokens.remote("hello world"))
    assert isinstance(n, int) and n >= 2
    ray.kill(actor)
