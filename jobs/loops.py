"""Where a unit's method loop runs: in the driver's threads, or next to its engine.

`run_loop` is the loop itself (the method's run against an LLM, and the unit's sample and step
rows); both placements call it, so they compute the same thing.

`engine.method_loops: engine` starts one `MethodWorker` per engine actor, pinned to that actor's
node (Ray node affinity), with `max_in_flight` threads. The driver hands it whole units and
collects rows: rendering, parsing, revisions and token counting then run on the engine's host in a
process of their own, and the driver's work per unit is one call instead of a call per step.
"""
from __future__ import annotations

import time
from typing import Any

from jobs.tables import now, sample_row, step_rows
from jobs.workload import Unit

Rows = dict[str, list[dict[str, Any]]]


def run_loop(u: Unit, attempt: int, llm: Any) -> tuple[Rows, Any]:
    """One unit's method loop against `llm`: its `samples` and `steps` rows and the method's output."""
    from eval.methods import get_method

    started = now()
    out = get_method(u.method.name, **u.settings).run(u.sample, llm)
    rows = {"samples": [sample_row(u, "ok", None, attempt + 1, out, started, llm.name)], "steps": step_rows(u, out)}
    return rows, out


class MethodWorker:
    """Runs method loops against one engine actor from the engine's own host (a threaded Ray actor)."""

    def __init__(self, engine: Any, name: str, timeout_s: float | None, cache_dir: str | None = None,
                 cache_key: str = "") -> None:
        from jobs.llm_adapters import ActorLLM

        llm: Any = ActorLLM(engine, name=name, timeout_s=timeout_s)
        if cache_dir is not None:
            from eval.llm_cache import CachedLLM

            llm = CachedLLM(llm, cache_dir, cache_key)
        self.llm = llm
        self.cpu0, self.t0 = time.process_time(), time.monotonic()

    def run(self, u: Unit, attempt: int) -> tuple[Rows, Any]:
        return run_loop(u, attempt, self.llm)

    def stats(self) -> dict[str, Any]:
        from jobs.replay import rss_mb

        wall = max(1e-9, time.monotonic() - self.t0)
        return {"cpu_s": time.process_time() - self.cpu0, "wall_s": wall, "rss_mb": rss_mb(),
                "hits": getattr(self.llm, "hits", 0), "misses": getattr(self.llm, "misses", 0)}

    def health(self) -> bool:
        return True


def node_of(actor: Any) -> str:
    """The Ray node an actor runs on (asked of the actor itself)."""
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


def start_workers(actors: list[Any], per_engine: int, *, max_restarts: int, timeout_s: float | None,
                  cache_dir: str | None, cache_key: str) -> list[Any]:
    """One `MethodWorker` per engine actor, on that actor's node, with `per_engine` threads. They ask
    no CPU of their own: they run beside the engine whose requests they make."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls = ray.remote(MethodWorker)
    workers = []
    for i, a in enumerate(actors):
        strategy = NodeAffinitySchedulingStrategy(node_of(a), soft=False)
        workers.append(cls.options(num_cpus=0, max_concurrency=per_engine, max_restarts=max_restarts,
                                   max_task_retries=0, scheduling_strategy=strategy)
                       .remote(a, f"engine-{i}", timeout_s, cache_dir, cache_key))
    ray.get([w.health.remote() for w in workers])
    return workers
