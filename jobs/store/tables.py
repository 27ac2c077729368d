"""The Parquet tables of a run: their schemas and the one place where their rows are built.

Every column a run writes is named here, next to its type: the row builders take the method's
`MethodOutput`/`Step` and the judge's `JudgeResult` objects and lay them out as table rows, so no
other module spells a column name. docs/jobs.md describes each column.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from memloop.jobs.store.units import UnitLike

if TYPE_CHECKING:  # the row builders only read attributes of these
    from memloop.eval.methods.base import MethodOutput
    from memloop.eval.methods.step import Step

TABLES = ("samples", "steps", "judgments", "scores")
UTC_TS = pa.timestamp("us", tz="UTC")

# Columns shared by every per-unit table: which unit and which shard a row belongs to.
_UNIT = [
    pa.field("run_id", pa.string(), nullable=False),
    pa.field("unit", pa.string(), nullable=False),  # "{dataset}|{sample_id}|{method}|{repeat}"
    pa.field("shard", pa.string(), nullable=False),
    pa.field("dataset", pa.string(), nullable=False),  # DatasetSpec.key, e.g. "sumie:synthetic"
    pa.field("task", pa.string(), nullable=False),
    pa.field("sample_id", pa.string(), nullable=False),
    pa.field("method", pa.string(), nullable=False),  # MethodSpec.key
    pa.field("repeat", pa.int32(), nullable=False),
]

SCHEMAS: dict[str, pa.Schema] = {
    "samples": pa.schema(
        _UNIT
        + [
            pa.field("seed", pa.int64()),
            pa.field("status", pa.string(), nullable=False),  # "ok" | "failed" | "n/a" (the method does not apply)
            pa.field("error", pa.string()),  # the last error of a failed unit; why, for an "n/a" unit
            pa.field("failure", pa.string()),  # a failed unit's kind of failure: "method" | "infrastructure"
            pa.field("attempts", pa.int32()),
            pa.field("output_json", pa.string()),  # the method's final answer (summary, attributes, name ...)
            pa.field("n_steps", pa.int32()),
            pa.field("prompt_tokens", pa.int64()),
            pa.field("cached_tokens", pa.int64()),
            pa.field("decoded_tokens", pa.int64()),
            pa.field("chunk_tokens", pa.int64()),  # the dataset's chunk size, when it has one
            pa.field("input_tokens", pa.int64()),  # the sample's whole input (its chunks) in cl100k_base tokens
            # the items a judge scores one by one when a sample has several (MemoryAgentBench's questions: their
            # count and the table groups they belong to), so a unit that produced nothing counts each as zero
            pa.field("items_json", pa.string()),
            # who wrote the sample's query where its loader says (RepoQA: "llm", "release", "code", or
            # "code fallback (why)"); null for other tasks and in files written before it
            pa.field("describer", pa.string()),
            pa.field("actor", pa.string()),
            pa.field("started_at", UTC_TS),
            pa.field("finished_at", UTC_TS),
        ]
    ),
    "steps": pa.schema(
        _UNIT
        + [
            pa.field("step", pa.int32(), nullable=False),
            pa.field("kind", pa.string()),  # the method's name for the step (e.g. "update", "final")
            pa.field("template_id", pa.string()),
            pa.field("template_hash", pa.string()),
            pa.field("prompt", pa.string()),
            pa.field("output", pa.string()),
            pa.field("parsed_json", pa.string()),
            pa.field("memory_json", pa.string()),
            pa.field("prompt_tokens", pa.int64()),
            pa.field("cached_tokens", pa.int64()),
            pa.field("decoded_tokens", pa.int64()),
            pa.field("error", pa.string()),
            pa.field("extra_json", pa.string()),  # anything else the method traced
            # what happened at the step (`memloop.eval.methods.outcomes.StepOutcome`); null in files written before it
            pa.field("outcome", pa.string()),
            pa.field("revisions_proposed", pa.int32()),
            pa.field("revisions_accepted", pa.int32()),
            pa.field("revisions_rejected", pa.int32()),
            # the token columns above count the kept (last) attempt; these the rejected attempts before it
            pa.field("attempts", pa.int32()),
            pa.field("retry_prompt_tokens", pa.int64()),
            pa.field("retry_cached_tokens", pa.int64()),
            pa.field("retry_decoded_tokens", pa.int64()),
            # when the step's LLM call began and ended (the Inspect export's event times); null in files written before
            pa.field("started_at", UTC_TS),
            pa.field("finished_at", UTC_TS),
        ]
    ),
    "judgments": pa.schema(
        _UNIT
        + [
            # null: the run's own judging; else the re-judging (`memloop rescore`) that wrote the row
            pa.field("judging_id", pa.string()),
            pa.field("judge", pa.string(), nullable=False),
            pa.field("index", pa.int32(), nullable=False),
            pa.field("record_json", pa.string(), nullable=False),  # the raw judgment, as the judge returned it
            pa.field("error", pa.string()),  # a judge that failed on the unit: its root cause (one row, index -1)
        ]
    ),
    "scores": pa.schema(
        _UNIT
        + [
            pa.field("judging_id", pa.string()),  # as in `judgments`
            pa.field("judge", pa.string(), nullable=False),
            pa.field("metric", pa.string(), nullable=False),
            pa.field("turn", pa.int32()),  # per-turn metrics (SUMIE); null for whole-sample metrics
            pa.field("value", pa.float64()),
        ]
    ),
    # The commit record of a re-judging's shard (`{run}/judgings/{judging_id}/judged/`): one row per
    # unit judged again, as `samples` is for a run's shard (its status is the re-judging's, not the run's).
    "judged": pa.schema(
        _UNIT
        + [
            pa.field("judging_id", pa.string(), nullable=False),
            pa.field("status", pa.string(), nullable=False),  # "ok" | "failed" (the judge failed)
            pa.field("error", pa.string()),
            pa.field("attempts", pa.int32()),
            pa.field("started_at", UTC_TS),
            pa.field("finished_at", UTC_TS),
        ]
    ),
    # One file per invocation (`index/{invocation}.parquet`): the units it committed and in which
    # shard, so a resume reads these and the shard listing instead of every samples file.
    "index": pa.schema(
        [
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("unit", pa.string(), nullable=False),
            pa.field("shard", pa.string(), nullable=False),
            pa.field("status", pa.string(), nullable=False),
        ]
    ),
    "runs": pa.schema(
        [
            pa.field("run_id", pa.string(), nullable=False),
            pa.field("invocation", pa.string(), nullable=False),
            pa.field("output", pa.string()),
            pa.field("config_json", pa.string()),
            pa.field("identity_json", pa.string()),  # what the run id hashes
            pa.field("code_version", pa.string()),
            pa.field("packages_json", pa.string()),
            pa.field("model_digest", pa.string()),
            pa.field("template_hashes_json", pa.string()),
            pa.field("ray_job_id", pa.string()),  # the `ray job submit` submission id, when run as a Ray job
            pa.field("host", pa.string()),
            pa.field("started_at", UTC_TS),
            pa.field("finished_at", UTC_TS),
            pa.field("wall_s", pa.float64()),
            pa.field("samples", pa.int64()),
            pa.field("computed", pa.int64()),
            pa.field("skipped", pa.int64()),
            pa.field("failed", pa.int64()),
            pa.field("stats_json", pa.string()),  # engine counters, tokens/s, cache hit rate
        ]
    ),
}


def conform(table: str, data: pa.Table) -> pa.Table:
    """`data` in the current schema of `table`. Files written before a nullable column was added
    (e.g. `runs.ray_job_id`) get it as nulls, so every run ever written stays readable."""
    schema = SCHEMAS[table]
    missing = [f for f in schema if f.name not in data.column_names]
    for f in missing:
        if not f.nullable:
            raise ValueError(f"{table} data lacks the required column {f.name!r}")
        data = data.append_column(f.name, pa.nulls(len(data), f.type))
    return data.select(schema.names).cast(schema)


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


# ---------------------------------------------------------------------------------------------
# row builders


def unit_columns(u: "UnitLike") -> dict[str, Any]:
    """The columns that say which unit a row belongs to (run_id and shard are added on write)."""
    return dict(
        unit=u.key,
        dataset=u.dataset.key,
        task=u.sample.task,
        sample_id=u.sample.id,
        method=u.method.key,
        repeat=u.repeat,
    )


def sample_row(
    u: "UnitLike",
    status: str,
    error: str | None,
    attempts: int,
    out: "MethodOutput | None",
    started: dt.datetime,
    actor: str,
) -> dict[str, Any]:
    """The unit's samples row. An "ok" unit none of whose steps produced anything is "failed", with the
    steps' outcomes as its error (`MethodOutput.failure`)."""
    output = None
    prompt = cached = decoded = 0
    if out is not None:
        if out.not_applicable:  # e.g. the whole input exceeds the model's context: neither ok nor failed
            status, error = "n/a", out.not_applicable
        elif status == "ok" and out.failure is not None:
            status, error = "failed", out.failure
        output = json.dumps(
            {
                "answer": out.answer,
                "memory": out.memory,
                "settings": out.settings,
                "templates": out.templates,
                "failures": out.failures,
            },
            sort_keys=True,
            default=str,
        )
        usage = out.usage
        prompt, cached, decoded = usage.prompt_tokens, usage.cached_tokens, usage.decoded_tokens
    return dict(
        unit_columns(u),
        seed=u.seed,
        status=status,
        error=error,
        failure=None if status != "failed" else "method",
        attempts=attempts,
        output_json=output,
        n_steps=len(out.steps) if out is not None else 0,
        prompt_tokens=prompt,
        cached_tokens=cached,
        decoded_tokens=decoded,
        chunk_tokens=u.chunk_tokens,
        input_tokens=u.input_tokens,
        items_json=_items_json(u),
        describer=_describer(u),
        actor=actor,
        started_at=started,
        finished_at=now(),
    )


def _describer(u: "UnitLike") -> str | None:
    d = (u.sample.metadata or {}).get("describer")
    return None if d is None else str(d)


def _items_json(u: "UnitLike") -> str | None:
    """The sample's individually scored items as its loader declares them (metadata "scored_items")."""
    items = (u.sample.metadata or {}).get("scored_items")
    return None if items is None else json.dumps(items, sort_keys=True)


def _dump(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def step_row(u: "UnitLike", s: "Step") -> dict[str, Any]:
    return dict(
        unit_columns(u),
        step=s.index,
        kind=s.kind,
        template_id=s.template_id,
        template_hash=s.template_sha256,
        prompt=s.prompt,
        output=s.output,
        parsed_json=_dump(s.parsed),
        memory_json=_dump(s.memory),
        prompt_tokens=s.usage.prompt_tokens,
        cached_tokens=s.usage.cached_tokens,
        decoded_tokens=s.usage.decoded_tokens,
        error=_step_error(s),
        extra_json=json.dumps(
            {
                "attempts": s.attempts,
                "failures": list(s.failures),
                "chunk_index": s.chunk_index,
                "ok": s.ok,
                **({"memory_text": s.memory_text} if s.memory_text is not None else {}),
            }
        ),
        outcome=str(s.outcome),
        revisions_proposed=s.revisions_proposed,
        revisions_accepted=s.revisions_accepted,
        revisions_rejected=s.revisions_rejected,
        attempts=s.attempts,
        retry_prompt_tokens=s.retry_usage.prompt_tokens,
        retry_cached_tokens=s.retry_usage.cached_tokens,
        retry_decoded_tokens=s.retry_usage.decoded_tokens,
        started_at=_utc(s.started_at),
        finished_at=_utc(s.finished_at),
    )


def _utc(epoch_s: float | None) -> dt.datetime | None:
    return None if epoch_s is None else dt.datetime.fromtimestamp(epoch_s, dt.timezone.utc)


def _step_error(s: "Step") -> str | None:
    """Why a step did not succeed (its failures; its outcome when it records none); None when it did."""
    from memloop.eval.methods.outcomes import succeeded

    if s.ok and succeeded(s.outcome):
        return None
    return "; ".join(s.failures) or ("unparsed output" if not s.ok else str(s.outcome))


def step_rows(u: "UnitLike", out: "MethodOutput") -> list[dict[str, Any]]:
    return [step_row(u, s) for s in out.steps]


def judge_rows(result: Any) -> dict[str, list[dict[str, Any]]]:
    """`judgments` and `scores` rows of one `memloop.eval.judges` result (without the unit columns)."""
    judgments = [
        {"judge": result.judge, "index": i, "record_json": _dump(j.to_record())} for i, j in enumerate(result.judgments)
    ]
    scores = [
        {
            "judge": result.judge,
            "metric": s.metric,
            "turn": s.turn,
            "value": float(s.value) if s.value is not None else math.nan,
        }
        for s in result.scores
    ]
    return {"judgments": judgments, "scores": scores}


def judge_failure_row(judge: str, error: str) -> dict[str, Any]:
    """The `judgments` row of a judge that failed on a unit: the failure is the judgment's, not the unit's."""
    return {"judge": judge, "index": -1, "record_json": _dump({"failed": True, "error": error}), "error": error}


def with_unit(u: "UnitLike", rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [dict(unit_columns(u), **r) for r in rows]


def judged_row(
    u: "UnitLike", judging_id: str, status: str, error: str | None, attempts: int, started: dt.datetime
) -> dict[str, Any]:
    """The commit row of one unit judged again by a re-judging (`memloop rescore`)."""
    return dict(
        unit_columns(u),
        judging_id=judging_id,
        status=status,
        error=error,
        attempts=attempts,
        started_at=started,
        finished_at=now(),
    )
