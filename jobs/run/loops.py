"""Where a unit's method loop runs: in the driver's threads, or next to its engine.

`run_loop` is the loop itself (the method's run against an LLM, and the unit's sample and step
rows); both placements call it, so they compute the same thing.

`engine.method_loops: engine` starts one `MethodWorker` per engine actor, pinned to that actor's
node (Ray node affinity), with `max_in_flight` threads. The driver hands it whole units; rendering,
parsing, revisions and token counting then run on the engine's host in a process of their own, and
so does writing the unit's rows as a shard (`memloop.jobs.run.shards.ShardWriter`): what comes back to the
driver is the shard's commit record (or its commit task's reference) and the unit's token usage.
"""

from __future__ import annotations

import os
import time
from typing import Any

from memloop.jobs.run.handles import packed_handles, rss_mb
from memloop.jobs.run.judge_fanout import Judging
from memloop.jobs.run.shards import Rows, ShardWriter, method_failure
from memloop.jobs.run.workload import Unit
from memloop.jobs.store.tables import now, sample_row, step_rows


def run_loop(u: Unit, attempt: int, llm: Any, judging: Judging | None = None) -> tuple[Rows, Any]:
    """One unit's method loop against `llm`: its `samples` and `steps` rows and the method's output. The
    run's graph model (from `judging`: `graph_model`, else the judge model) goes with it, for the method steps
    the paper gave a model of their own (seed 001's graph extraction)."""
    from memloop.eval.methods import get_method

    started = now()
    judge = judging.extractor_for(llm) if judging is not None else None
    out = get_method(u.method.name, **u.settings).run(u.sample, llm, judge=judge)
    rows = {"samples": [sample_row(u, "ok", None, attempt + 1, out, started, llm.name)], "steps": step_rows(u, out)}
    return rows, out


class MethodWorker:
    """Runs method loops against engine actors from the engines' own host (a threaded Ray actor).
    One worker serves one engine in a real run; a simulation packs several (`host` picks one)."""

    def __init__(
        self,
        engines: list[Any],
        names: list[str],
        timeout_s: float | None,
        cache_dir: str | None = None,
        cache_key: str = "",
        writer: tuple[str, str, Judging] | None = None,
    ) -> None:
        from memloop.jobs.run.llm_adapters import ActorLLM

        # (output URI, run id, judging): the worker writes its units' shards itself
        self.writer = ShardWriter(*writer[:2], "method-worker", writer[2]) if writer is not None else None

        self.llms: list[Any] = [ActorLLM(e, name=n, timeout_s=timeout_s) for e, n in zip(engines, names)]
        if cache_dir is not None:
            from memloop.eval.llm_cache import CachedLLM

            self.llms = [CachedLLM(llm, cache_dir, cache_key) for llm in self.llms]
        self.cpu0, self.t0 = time.process_time(), time.monotonic()

    def run(self, u: Unit, attempt: int, host: int = 0) -> tuple[Any, Any]:
        """Run `u`'s loop and write its shard: (its `Committed` record or commit task reference, usage of
        every attempt, the cause when its method produced nothing). A worker started without a writer
        returns the rows and the method output instead."""
        rows, out = run_loop(u, attempt, self.llms[host], self.writer.judging if self.writer is not None else None)
        if self.writer is None:
            return rows, out
        return self.writer.write(u, rows, out, self.llms[host]), out.usage + out.retry_usage, method_failure(rows)

    def stats(self, host: int = 0) -> dict[str, Any]:
        wall = max(1e-9, time.monotonic() - self.t0)
        return {"cpu_s": time.process_time() - self.cpu0, "wall_s": wall, "rss_mb": rss_mb(), "pid": os.getpid()}

    def health(self, host: int = 0) -> bool:
        return True


def node_of(actor: Any) -> str:
    """The Ray node an actor runs on (asked of the actor itself)."""
    import ray

    return ray.get(actor.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


def start_workers(
    engines: list[Any],
    per_engine: int,
    *,
    max_restarts: int,
    timeout_s: float | None,
    cache_dir: str | None,
    cache_key: str,
    pack: int = 1,
    writer: tuple[str, str, Judging] | None = None,
) -> tuple[list[Any], list[Any]]:
    """A `MethodWorker` per `pack` engine actors (one in a real run), on their node, with `per_engine`
    threads per engine. They ask no CPU of their own: they run beside the engines whose requests they
    make. Returns a handle per engine (`memloop.jobs.run.handles.PackedHandle`) and the worker actors."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    cls = ray.remote(MethodWorker)
    procs = []
    for j in range(0, len(engines), pack):
        group = engines[j : j + pack]
        strategy = NodeAffinitySchedulingStrategy(node_of(group[0]), soft=False)
        procs.append(
            cls.options(
                num_cpus=0,
                max_concurrency=per_engine * len(group),
                max_restarts=max_restarts,
                max_task_retries=0,
                scheduling_strategy=strategy,
            ).remote(group, [f"engine-{j + i}" for i in range(len(group))], timeout_s, cache_dir, cache_key, writer)
        )
    ray.get([w.health.remote() for w in procs])
    return packed_handles(procs, pack, len(engines)), procs
