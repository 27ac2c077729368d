"""Judge work as Ray tasks: one task per (unit, judge), started as soon as the unit's output exists.

The task receives what the judge scores (the judge's own `prediction` of the method's output), the
sample's gold and metadata, and an LLM (the engine actor's adapter, or built from the endpoint spec
inside the task) and returns plain-dict rows for the `judgments` and `scores` tables
(`jobs.tables.judge_rows`).
"""
from __future__ import annotations

from typing import Any

from jobs.config import JudgeModelSpec, JudgeSpec
from jobs.tables import judge_rows


def judge_llm(spec: JudgeModelSpec, engine_llm: Any) -> Any:
    """The LLM judges call: the run's own engine, or the configured OpenAI-compatible endpoint."""
    if spec.kind == "engine":
        return engine_llm
    from jobs.llm_adapters import endpoint_llm

    return endpoint_llm(spec.endpoint)


def judge_one(judge: JudgeSpec, output: Any, gold: Any, metadata: dict[str, Any], judge_model: JudgeModelSpec,
              engine_llm: Any) -> dict[str, list[dict[str, Any]]]:
    """Run one judge on one output; returns {"judgments": rows, "scores": rows}."""
    from eval.judges import get_judge, run_judge

    llm = judge_llm(judge_model, engine_llm) if get_judge(judge.name).needs_llm else None
    result = run_judge(judge.name, output, gold, llm=llm, metadata=metadata, **judge.options)
    return judge_rows(result)
