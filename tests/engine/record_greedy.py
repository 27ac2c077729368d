"""Records the engine's greedy outputs on the bundled SmolLM2 as tests/engine/data/greedy-smollm2.json:
the token ids and text of a few chat and completion prompts through the serving `Engine` (paged cache,
continuous batching) and through the reference decoder.

    PYTHONPATH=$PWD .venv/bin/python tests/engine/record_greedy.py

Recorded before engine/ was split into floors (model, cache, attention, sched, serve);
`test_greedy_recorded.py` computes the same and compares. A refactor of engine/ must keep the record
as it is; a change to what the engine computes re-records it on purpose, with the reason in its commit.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("data") / "greedy-smollm2.json"
MAX_TOKENS = 24
PROMPTS: list[Any] = [
    [{"role": "user", "content": "Name three colors."}],
    [{"role": "user", "content": "What is 2 + 2? Answer with one number."}],
    [{"role": "user", "content": "Write one sentence about rivers."}],
    "The quick brown fox",
    "Paris is the capital of",
]


def _request(prompt: Any) -> dict[str, Any]:
    key = "messages" if isinstance(prompt, list) else "prompt"
    return {key: prompt, "sampling": {"max_tokens": MAX_TOKENS, "temperature": 0.0}, "json_schema": None}


def greedy_outputs(engine: Any, model: Any) -> dict[str, Any]:
    """What the serving engine and the reference decoder write greedily for PROMPTS."""
    from memloop.engine.runner.reference import generate
    from memloop.engine.sample.sampling import SamplingParams

    served = engine.complete_many([_request(p) for p in PROMPTS])
    reference = generate(model, PROMPTS, SamplingParams(max_tokens=MAX_TOKENS))
    return {
        "served": [{"text": r["text"], "finish_reason": r["finish_reason"]} for r in served],
        "reference": [
            {"text": g.text, "token_ids": [int(t) for t in g.token_ids], "finish_reason": g.finish_reason}
            for g in reference
        ],
    }


if __name__ == "__main__":
    from memloop.engine.assets import default_model_path
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig
    from memloop.engine.model.decoder import load_model

    lm = load_model(default_model_path())
    eng = Engine(EngineConfig(num_pages=1024, page_size=16, max_batch=8, prefill_chunk=512), model=lm)
    try:
        out = greedy_outputs(eng, lm)
    finally:
        eng.shutdown()
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(out, indent=1) + "\n")
    print(RECORD)
