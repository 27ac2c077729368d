"""RepoQA needles described by the run's judge engine when no describer answer is cached.

A paper config names `describer_model` (its judge model) for RepoQA's descriptions; the loader reads that
model's answers from the description cache (`memloop data repoqa-describe` fills it), and a needle without
one gets the labelled rule-based fallback. Where the run's judge engine is that model, the run describes
the waiting needles itself at its start, before any unit computes: each answer is cached as it comes (a
run stopped half-way resumes from the cache), and the units carry the new queries.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from memloop.jobs.run.config import RunConfig
from memloop.jobs.run.workload import Unit


def judge_describes(cfg: RunConfig, model: str) -> bool:
    """Whether the run's judge engine is `model` (a config's `describer_model`): its weights as named."""
    jm = cfg.judge_model
    if jm.kind != "engine" or not jm.weights:
        return False
    weights = str(jm.weights)
    return model in (weights, Path(weights).name, Path(weights).stem)


def waiting_units(units: list[Unit]) -> dict[str, int]:
    """{describer model: needles (distinct samples) whose query waits for its description}."""
    from memloop.eval.datasets.repoqa.loader import waiting_for_description

    seen: dict[tuple[str, str], str] = {}
    for u in units:
        model = waiting_for_description(u.sample)
        if model is not None:
            seen[(u.dataset.key, u.sample.id)] = model
    out: dict[str, int] = {}
    for model in seen.values():
        out[model] = out.get(model, 0) + 1
    return out


def describe_waiting(
    cfg: RunConfig, units: list[Unit], llm_named: Callable[[str], Any], log: Callable[[str], None] = lambda _: None
) -> list[Unit]:
    """`units` with every waiting RepoQA needle described by the judge engine (`llm_named(model)`: the judge
    engine as an LLM whose name is the describer model, the cache's key); needles whose describer is not the
    judge model keep their labelled fallback, and the log says so."""
    from memloop.eval.datasets.repoqa.loader import describe_sample, waiting_for_description

    described: dict[tuple[str, str], Any] = {}
    out = []
    for u in units:
        model = waiting_for_description(u.sample)
        if model is None or not judge_describes(cfg, model):
            out.append(u)
            continue
        key = (u.dataset.key, u.sample.id)
        if key not in described:
            if not described:
                log(f"describing RepoQA needles with the judge engine ({model}): no cached description")
            described[key] = describe_sample(u.sample, llm_named(model), u.dataset.options.get("description_cache"))
        out.append(replace(u, sample=described[key]))
    left = waiting_units(out)
    for model, n in left.items():
        log(
            f"{n} RepoQA needle(s) keep the rule-based fallback: describer_model {model!r} is not the run's judge "
            f"engine; run `memloop data repoqa-describe --model {model}` first"
        )
    return out
