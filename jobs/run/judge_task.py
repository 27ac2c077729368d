"""What one judge task does, inside its Ray task: pick the judge's LLM (the run's engine or the
configured endpoint), run one judge on one unit's output, and return the `judgments` and `scores`
rows (`jobs.store.tables.judge_rows`). Scheduling the tasks and collecting them is
`jobs.run.judge_fanout`'s job.
"""
from __future__ import annotations

from typing import Any

from jobs.run.config import JudgeModelSpec, JudgeSpec
from jobs.store.tables import judge_rows


def judge_llm(spec: JudgeModelSpec, engine_llm: Any) -> Any:
    """The LLM judges call: the run's own engine, or the configured OpenAI-compatible endpoint."""
    if spec.kind == "engine":
        return engine_llm
    from jobs.run.llm_adapters import endpoint_llm

    return endpoint_llm(spec.endpoint)


def judge_one(judge: JudgeSpec, output: Any, gold: Any, metadata: dict[str, Any], judge_model: JudgeModelSpec,
              engine_llm: Any) -> dict[str, list[dict[str, Any]]]:
    """Run one judge on one output; returns {"judgments": rows, "scores": rows}."""
    from eval.judges import get_judge, run_judge

    llm = judge_llm(judge_model, engine_llm) if get_judge(judge.name).needs_llm else None
    result = run_judge(judge.name, output, gold, llm=llm, metadata=metadata, **judge.options)
    return judge_rows(result)
