"""What one judge task does, inside its Ray task: pick the judge's LLM (the run's engine or the
configured endpoint), run one judge on one unit's output, and write its `judgments` and `scores`
rows (`memloop.jobs.store.tables.judge_rows`) as a part of the unit's shard, from the task's own process.
Scheduling the tasks and committing the unit once they returned is `memloop.jobs.run.judge_fanout`'s job.
"""

from __future__ import annotations

from typing import Any

from memloop.jobs.errors import error_text
from memloop.jobs.run.config import JudgeModelSpec, JudgeSpec
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import judge_failure_row, judge_rows


def judge_llm(spec: JudgeModelSpec, engine_llm: Any) -> Any:
    """The LLM judges call: the run's own engine, or the configured OpenAI-compatible endpoint."""
    if spec.kind == "engine":
        return engine_llm
    from memloop.jobs.run.llm_adapters import endpoint_llm

    return endpoint_llm(spec.endpoint)


def judge_one(
    judge: JudgeSpec, output: Any, gold: Any, metadata: dict[str, Any], judge_model: JudgeModelSpec, engine_llm: Any
) -> dict[str, list[dict[str, Any]]]:
    """Run one judge on one output; returns {"judgments": rows, "scores": rows}."""
    from memloop.eval.judges import get_judge, run_judge

    llm = judge_llm(judge_model, engine_llm) if get_judge(judge.name).needs_llm else None
    result = run_judge(judge.name, output, gold, llm=llm, metadata=metadata, **judge.options)
    return judge_rows(result)


def judge_part(
    output_uri: str,
    run_id: str,
    shard: str,
    part: str,
    unit: dict[str, Any],
    judge: JudgeSpec,
    output: Any,
    gold: Any,
    metadata: dict[str, Any],
    judge_model: JudgeModelSpec,
    engine_llm: Any,
) -> dict[str, Any]:
    """A judge task's body: judge, then write the rows as part `part` of `shard` (invisible until the
    unit's commit). Returns {"files": [(name, rows)], "error": the judge's error or None}; a judge's
    own failure is written as its `judgments` row (`judge_failure_row`). An engine
    that died under the judge raises, so Ray retries the task."""
    import ray

    try:
        rows = judge_one(judge, output, gold, metadata, judge_model, engine_llm)
    except ray.exceptions.RayActorError:
        raise
    except Exception as exc:  # the judge's own failure: a judgments row with its cause; the unit stays ok
        err = error_text(exc)
        rows = {"judgments": [judge_failure_row(judge.name, err)], "scores": []}
        failed: str | None = f"judge {judge.name}: {err}"
    else:
        failed = None
    rs = RunStore.open(output_uri, run_id, role="judge-task")
    files = []
    for table in ("judgments", "scores"):
        # overwrite, not create-only: nothing reads a part before its unit's commit, and a task Ray
        # retried after its process died may find its own earlier part there
        f = rs.write_part(shard, table, [dict(unit, **r) for r in rows[table]], part=part, mode="overwrite")
        if f is not None:
            files.append((f, len(rows[table])))
    return {"files": files, "error": failed}
