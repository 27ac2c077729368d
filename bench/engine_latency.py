"""The engine's measured step times, fitted into the latency model `memloop bench scale` simulates.

On the real engine (in process, the run's own model) and real prompts, for each batch size B:

1. prefill: B prompts (the shortest recorded ones, to keep the measurement short) with `max_tokens=1` and the prefix
cache off; seconds per computed prompt token.
2. decode: the same B prompts with `max_tokens=decode_tokens`; the decode time is the wall time less
   the prefill (at the rate of 1.), divided by the engine's step count, at the mean batch
   decoded tokens / steps.

A least-squares line through (mean batch, seconds per decode step) gives the step's fixed cost and
what each sequence adds. Every batch size is run once unmeasured first, so compilation (cached on
disk by JAX after the first time on a machine) is not counted.
"""

from __future__ import annotations

import time
from typing import Any, Sequence


def _run(engine: Any, prompts: Sequence[str], max_tokens: int) -> tuple[float, dict[str, int]]:
    before = engine.stats()
    t0 = time.perf_counter()
    engine.complete_many(
        [
            {"messages": [{"role": "user", "content": p}], "sampling": {"max_tokens": max_tokens, "temperature": 0.0}}
            for p in prompts
        ]
    )
    wall = time.perf_counter() - t0
    after = engine.stats()
    return wall, {k: after[k] - before[k] for k in ("steps", "computed_prompt_tokens", "decoded_tokens")}


def measure(
    prompts: Sequence[str],
    *,
    batches: Sequence[int] = (1, 4, 8),
    decode_tokens: int = 32,
    model: str | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Measured points and the fitted model fields (`memloop.jobs.sim.replay.LatencyModel`)."""
    import numpy as np
    from memloop.engine.core.engine import Engine
    from memloop.engine.engine_config import EngineConfig

    if not prompts:
        raise ValueError("the latency calibration needs at least one recorded prompt")
    engine = Engine(EngineConfig.of({"model": model, "prefix_cache": False, "max_batch": max(batches)}))
    weight_path = engine.weight_path
    points: list[dict[str, Any]] = []
    try:
        prefill_s = prefill_tokens = 0.0
        for b in batches:
            batch = [prompts[i % len(prompts)] for i in range(b)]
            _run(engine, batch, 2)  # compile this batch's prefill and decode shapes (unmeasured)
            wp, cp = _run(engine, batch, 1)
            wd, cd = _run(engine, batch, decode_tokens)
            prefill_s += wp
            prefill_tokens += cp["computed_prompt_tokens"]
            points.append(
                {
                    "batch": b,
                    "prefill_wall_s": wp,
                    "prefill_tokens": cp["computed_prompt_tokens"],
                    "decode_wall_s": wd,
                    "steps": cd["steps"],
                    "decoded_tokens": cd["decoded_tokens"],
                    "prompt_tokens": cd["computed_prompt_tokens"],
                }
            )
            log(
                f"latency: batch {b}: prefill {cp['computed_prompt_tokens']} tokens in {wp:.2f} s; "
                f"{cd['decoded_tokens']} tokens decoded in {cd['steps']} steps, {wd:.2f} s"
            )
    finally:
        engine.shutdown()
    per_token = prefill_s / max(1.0, prefill_tokens)
    xs, ys = [], []
    for p in points:
        decode_s = max(0.0, p["decode_wall_s"] - p["prompt_tokens"] * per_token)
        if p["steps"]:
            xs.append(p["decoded_tokens"] / p["steps"])
            ys.append(decode_s / p["steps"])
            p.update(mean_batch=xs[-1], step_s=ys[-1])
    if len(set(xs)) >= 2:
        slope, base = np.polyfit(np.array(xs), np.array(ys), 1)
    else:
        slope, base = 0.0, float(np.mean(ys)) if ys else 0.0
    base, slope = max(float(base), 0.0), max(float(slope), 0.0)
    return {
        "prefill_s_per_token": per_token,
        "decode_s_base": base,
        "decode_s_per_seq": slope,
        "max_batch": EngineConfig().max_batch,
        "points": points,
        "weight_path": weight_path["weights"],
        "kernel_isa": weight_path["isa"],
    }
