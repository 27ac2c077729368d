"""Scheduling judges: one Ray task per (unit, judge) (`jobs.run.judge_task` is its body), started as
soon as the unit's output exists, and the unit's rows collected when its judges are done.

The unit's worker thread does not wait for its judges: `start` returns a future of the unit's
`Outcome` (its sample and step rows plus every judgment and score row), resolved by a small thread
pool that waits on the tasks. A judge that fails marks the unit failed with the judge's error. A
unit whose method does not apply to its sample (status "n/a") has no answer to judge: no judge runs.
"""
from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from jobs.run.config import RunConfig
from jobs.errors import error_text
from jobs.run.pool import Outcome, Rows
from jobs.store.tables import now, with_unit
from jobs.run.workload import Unit


class JudgeFanout:
    def __init__(self, cfg: RunConfig, waiters: int) -> None:
        self.cfg = cfg
        self._waiters = ThreadPoolExecutor(max_workers=max(4, waiters), thread_name_prefix="judge-wait")
        self._remote: Any = None

    def start(self, u: Unit, out: Any, llm: Any, rows: Rows) -> "Future[Outcome]":
        import ray

        from eval.judges import get_judge

        from jobs.run.judge_task import judge_one

        if out.not_applicable:  # nothing to score: no judgment, no score, so never a zero in a mean
            done: "Future[Outcome]" = Future()
            done.set_result(Outcome(rows))
            return done
        if self._remote is None:
            self._remote = ray.remote(judge_one)
        refs = [self._remote.options(num_cpus=self.cfg.judge_cpus, max_retries=self.cfg.retries,
                                     retry_exceptions=[ray.exceptions.RayActorError], name=f"judge:{j.name}")
                .remote(j, get_judge(j.name).prediction(out, len(u.sample.chunks)), u.sample.gold, u.sample.metadata,
                        self.cfg.judge_model, llm)
                for j in u.judges]
        return self._waiters.submit(self._collect, u, rows, refs)

    def _collect(self, u: Unit, rows: Rows, refs: list[Any]) -> Outcome:
        import ray

        judgments, scores, errors = [], [], []
        for j, ref in zip(u.judges, refs):
            try:
                res = ray.get(ref)
            except Exception as exc:
                errors.append(f"judge {j.name}: {error_text(exc)}")
                continue
            judgments += with_unit(u, res["judgments"])
            scores += with_unit(u, res["scores"])
        error = "; ".join(errors)[:2000] if errors else None
        if error:
            rows["samples"][0].update(status="failed", error=error, finished_at=now())
        return Outcome(dict(rows, judgments=judgments, scores=scores), error)

    def shutdown(self) -> None:
        self._waiters.shutdown(wait=False, cancel_futures=True)
