"""Scheduling a unit's judges and its commit: one Ray task per (unit, judge) (`memloop.jobs.run.judge_task`
is its body), started as soon as the unit's output exists, then a commit task that writes the
unit's `samples` file once every judge task has written its rows.

The commit task takes the judge tasks' results as arguments, so Ray starts it only after all of
them returned and no process waits for them meanwhile; the process that ran the unit's loop goes
straight to its next unit. A judge that fails is that judgment's failure, not the unit's: its task
writes a `judgments` row with the root cause (`memloop.jobs.store.tables.judge_failure_row`), the unit is
committed as its method left it (ok), so the sample stays in every method's comparison and cost
row, and the commit carries the error so the driver counts the unit incomplete (the run exits
non-zero; the report flags the judge's cells incomplete). The order of the writes is what makes a crash harmless: steps
and
judge parts first, the samples file last, so a crash at any point leaves either a committed unit or
files no reader sees, and a resume computes exactly the units without a samples row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from memloop.jobs.run.config import JudgeModelSpec, RunConfig
from memloop.jobs.run.workload import Unit
from memloop.jobs.store.run_files import Committed
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import unit_columns

_remote: dict[str, Any] = {}  # the Ray remote functions, made once per process
# Times Ray runs a judge or commit task again after its process died (Ray's memory monitor kills task
# processes when the host runs short of memory; a node can go) or, for a judge, its engine actor died:
# the infrastructure's doing, never the unit's, so this holds whatever `retries` says. Running again
# is harmless: a judge task overwrites its own part, and a commit finds its own samples file.
PROCESS_RETRIES = 3


@dataclass(frozen=True)
class Judging:
    """What a unit's judge tasks need besides the unit: the judges' model, CPUs and retries."""

    judge_model: JudgeModelSpec
    cpus: float
    retries: int
    engine_llm: Any = None  # the run's own judge engine (judge_model.weights), else the unit's lane judges
    graph_model: JudgeModelSpec | None = None  # seed 001's graph extraction model, when not the judge model

    @classmethod
    def of(cls, cfg: RunConfig, engine_llm: Any = None) -> "Judging":
        return cls(cfg.judge_model, cfg.judge_cpus, cfg.retries, engine_llm, cfg.graph_model)

    def llm_for(self, lane_llm: Any) -> Any:
        """The judge model as a unit on `lane_llm` reaches it: the run's judge engine, the configured
        endpoint, or (a judge model without weights of its own) the lane's engine itself."""
        from memloop.jobs.run.judge_task import judge_llm

        return judge_llm(self.judge_model, self.engine_llm if self.engine_llm is not None else lane_llm)

    def extractor_for(self, lane_llm: Any) -> Any:
        """The model a method's judge-side steps call (seed 001's graph extraction): `graph_model` where the run
        names one (an endpoint, the lane's engine, or the judge engine whose weights it names), else the judge model."""
        from memloop.jobs.run.judge_task import judge_llm

        g = self.graph_model
        if g is None:
            return self.llm_for(lane_llm)
        on_judge_engine = g.weights is not None and self.engine_llm is not None
        return judge_llm(g, self.engine_llm if on_judge_engine else lane_llm)


def commit_unit(
    output_uri: str,
    run_id: str,
    shard: str,
    samples: list[dict[str, Any]],
    files: list[tuple[str, int]],
    *judged: dict[str, Any],
) -> Committed:
    """The commit task's body: the unit's samples row as the method left it, written after every judge
    part; the judges' errors, if any, travel in the `Committed` record (the unit is incomplete)."""
    errors = [j["error"] for j in judged if j["error"]]
    error = "; ".join(errors)[:2000] if errors else None
    rs = RunStore.open(output_uri, run_id, role="commit-task")
    return rs.commit(shard, samples, list(files) + [f for j in judged for f in j["files"]], error, keep=False)


def start_judges(
    judging: Judging,
    output_uri: str,
    run_id: str,
    shard: str,
    u: Unit,
    out: Any,
    llm: Any,
    samples: list[dict[str, Any]],
    files: list[tuple[str, int]],
) -> Any:
    """Start `u`'s judge tasks and its commit task; returns the commit task's reference (of a
    `Committed`)."""
    import ray
    from memloop.eval.judges import get_judge
    from memloop.jobs.run.judge_task import judge_part

    if not _remote:
        _remote["judge"] = ray.remote(judge_part)
        _remote["commit"] = ray.remote(commit_unit)
    unit = unit_columns(u)
    refs = [
        _remote["judge"]
        .options(
            num_cpus=judging.cpus,
            max_retries=max(judging.retries, PROCESS_RETRIES),
            retry_exceptions=[ray.exceptions.RayActorError],
            name=f"judge:{j.name}",
        )
        .remote(
            output_uri,
            run_id,
            shard,
            f"j{k}",
            unit,
            j,
            get_judge(j.name).prediction(out, len(u.sample.chunks)),
            u.sample.gold,
            u.sample.metadata,
            judging.judge_model,
            judging.engine_llm if judging.engine_llm is not None else llm,
        )
        for k, j in enumerate(u.judges)
    ]
    # a small CPU share: commits are one write each, and a share bounds how many run at once
    return (
        _remote["commit"]
        .options(num_cpus=0.05, max_retries=PROCESS_RETRIES, name="commit")
        .remote(output_uri, run_id, shard, samples, files, *refs)
    )
