"""Judge work as Ray tasks: one task per (unit, judge), started as soon as the unit's output exists.

The task receives what the judge scores (see `judge_output`), the sample's gold and metadata, and
an LLM (the engine actor's adapter, or built from the endpoint spec inside the task) and returns
plain-dict rows for the `judgments` and `scores` tables.
"""
from __future__ import annotations

from typing import Any

from jobs.config import JudgeModelSpec, JudgeSpec


def judge_output(judge: str, out: Any, n_chunks: int) -> Any:
    """What a judge scores. SUMIE judges take one prediction per turn: the memory after each chunk
    (a method sets `step.memory` to the memory after that step, also when the step failed), or, for
    methods that do not keep a memory per chunk (GO), the final memory as the last turn. A memory
    that never parsed is an empty prediction ({}): it scores zero rather than hiding the unit.
    Every other judge takes the method's final answer."""
    if not judge.startswith("sumie"):
        return out.answer
    per_chunk: dict[int, Any] = {}
    for s in out.steps:
        if s.chunk_index is not None:
            per_chunk[s.chunk_index] = s.memory  # the last step of a chunk holds the memory after it
    if n_chunks > 1 and set(per_chunk) == set(range(n_chunks)):
        return [m if m is not None else {} for _, m in sorted(per_chunk.items())]
    return out.memory if out.memory is not None else {}


def judge_llm(spec: JudgeModelSpec, engine_llm: Any) -> Any:
    """The LLM judges call: the run's own engine, or the configured OpenAI-compatible endpoint."""
    if spec.kind == "engine":
        return engine_llm
    from jobs.llm_adapters import endpoint_llm

    ep = spec.endpoint
    return endpoint_llm(ep.base_url, ep.model, ep.api_key_env)


def judge_one(judge: JudgeSpec, output: Any, gold: Any, metadata: dict[str, Any], judge_model: JudgeModelSpec,
              engine_llm: Any) -> dict[str, list[dict[str, Any]]]:
    """Run one judge on one output; returns {"judgments": rows, "scores": rows}."""
    from eval.judges import get_judge, run_judge

    llm = judge_llm(judge_model, engine_llm) if get_judge(judge.name).needs_llm else None
    result = run_judge(judge.name, output, gold, llm=llm, metadata=metadata, **judge.options)
    return {"judgments": result.judgment_records(), "scores": result.score_records()}
