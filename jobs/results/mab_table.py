"""MemoryAgentBench's table from a finished run: rows = methods (the long-context baseline among them),
columns = the four competencies, then each source, then the cost of asking many.

A cell is the benchmark's figure (`eval.judges.mab`): per source the mean of the source's table metric
over its questions x 100, per competency the mean over its sources, with a 95% bootstrap interval over
contexts and the counts — questions scored, contexts judged, contexts n/a (the method does not apply:
a summariser, the long context beyond the window), contexts failed (no replies to score; counted,
left out of the mean, shown), questions not scored because the benchmark judges them with an LLM.
The cost columns are the ask-many phase's (the "answer" steps) beside the memory-building phase's:
the prefix share of the recorded answer prompts (each prompt's longest prefix shared with the previous
answer prompt of the same context, in cl100k_base tokens: what a prefix cache can reuse), the engine's
own cache hit where it reports one, net prompt tokens and the cost index ((net + 3 x output) / 10^6) per context.
"""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import pandas as pd

from eval.judges.cost import cost_index, prefix_hits, usage_of
from eval.judges.mab import COMPETENCIES, LLM_JUDGED, Figure, QuestionScore, competency_figures, source_figures
from jobs.store.storage import RunStore

if TYPE_CHECKING:
    from jobs.results.report import RunData

TASK = "memoryagentbench"


def question_scores(judgments: pd.DataFrame) -> dict[str, list[QuestionScore]]:
    """method -> one QuestionScore per judged question (the run's own judging of the `mab` judge)."""
    rows = judgments[(judgments["judge"] == "mab") & (judgments["index"] >= 0)]
    if "judging_id" in rows:
        rows = rows[rows["judging_id"].isna()]
    out: dict[str, list[QuestionScore]] = {}
    for r in rows.itertuples():
        label = json.loads(r.record_json).get("label") or {}
        metric = label.get("primary")
        value = None if metric in LLM_JUDGED else (label.get("metrics") or {}).get(metric)
        out.setdefault(r.method, []).append(QuestionScore(label.get("source", "?"), label.get("competency") or "?",
                                                          r.sample_id, None if value is None else float(value)))
    return out


def _cell(f: Figure | None) -> str:
    if f is None:
        return "–"
    extra = f"; {f.unscored} LLM-judged, not scored" if f.unscored else ""
    if math.isnan(f.value):
        return f"not scored ({f.contexts} contexts{extra})"
    return f"{f.value:.1f} [{f.low:.1f}, {f.high:.1f}] ({f.questions} q / {f.contexts} ctx{extra})"


def ask_many_cost(steps: pd.DataFrame) -> dict[str, dict[str, float]]:
    """method -> per-context means of the answer phase (and the build phase's net tokens)."""
    from eval.tokens import cl100k_encode

    out = {}
    for method, g in steps.groupby("method"):
        ask = g[g["kind"] == "answer"]
        build = g[g["kind"] != "answer"]
        contexts = max(1, g["unit"].nunique())
        hits = [prefix_hits(list(u.sort_values("step")["prompt"].fillna("")), cl100k_encode)
                for _, u in ask.groupby("unit")]
        total, reused = sum(h[0] for h in hits), sum(h[1] for h in hits)
        usage = usage_of(ask["prompt_tokens"].fillna(0).sum(), ask["cached_tokens"].fillna(0).sum(),
                         ask["decoded_tokens"].fillna(0).sum())
        out[method] = {
            "questions": float(len(ask)) / contexts,
            "prefix_share": 100 * reused / total if total else math.nan,
            "engine_hit": 100 * usage.cached_tokens / usage.prompt_tokens if usage.prompt_tokens else math.nan,
            "net": (usage.prompt_tokens - usage.cached_tokens) / contexts,
            "cost_index": cost_index(usage) / contexts,
            "build_net": float((build["prompt_tokens"].fillna(0) - build["cached_tokens"].fillna(0)).sum()) / contexts,
        }
    return out


def mab_table(d: "RunData", judgments: pd.DataFrame | None = None) -> dict[str, Any] | None:
    """The table as data: {"columns": [...], "rows": [{"method", "cells": {col: Figure|None}, "units",
    "cost"}]}; None when the run has no MemoryAgentBench unit."""
    samples = d.samples[d.samples["task"] == TASK] if not d.samples.empty else d.samples
    if samples.empty:
        return None
    if judgments is None:
        judgments = RunStore.at(d.uri).table("judgments").to_pandas()
    scores = question_scores(judgments)
    sources = sorted({q.source for qs in scores.values() for q in qs})
    steps = d.steps[d.steps["task"] == TASK] if not d.steps.empty else d.steps
    cost = ask_many_cost(steps) if not steps.empty else {}
    rows = []
    for method in sorted(samples["method"].unique()):
        qs = scores.get(method, [])
        comp, src = competency_figures(qs), source_figures(qs)
        status = samples[samples["method"] == method]["status"].value_counts().to_dict()
        rows.append({"method": method, "cells": {**{c: comp.get(c) for c in COMPETENCIES},
                                                 **{s: src.get(s) for s in sources}},
                     "units": {k: int(v) for k, v in status.items()}, "cost": cost.get(method)})
    return {"columns": [*COMPETENCIES, *sources], "rows": rows}


def mab_markdown(d: "RunData", judgments: pd.DataFrame | None = None) -> str | None:
    table = mab_table(d, judgments)
    if table is None:
        return None
    cols = table["columns"]
    lines = ["| method | units (ok / n/a / failed) | " + " | ".join(cols) + " |",
             "|" + "---|" * (len(cols) + 2)]
    for r in table["rows"]:
        u = r["units"]
        lines.append(f"| {r['method']} | {u.get('ok', 0)} / {u.get('n/a', 0)} / {u.get('failed', 0)} | "
                     + " | ".join(_cell(r["cells"][c]) for c in cols) + " |")
    cost = ["", "Asking many (per context: the answer steps; build = the memory-building steps before them):", "",
            "| method | questions | answer-prompt prefix share (%) | engine cache hit (%) | answer net tokens | "
            "answer cost index | build net tokens |", "|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        c = r["cost"]
        if not c:
            cost.append(f"| {r['method']} | – | – | – | – | – | – |")
            continue
        num = (lambda v, f="{:.0f}": "–" if v is None or math.isnan(v) else f.format(v))  # noqa: E731
        cost.append(f"| {r['method']} | {num(c['questions'], '{:.1f}')} | {num(c['prefix_share'])} | "
                    f"{num(c['engine_hit'])} | {num(c['net'])} | {num(c['cost_index'], '{:.4f}')} | "
                    f"{num(c['build_net'])} |")
    note = ("Per source: the benchmark's table metric (SubEM for RULER-QA, EventQA and FactConsolidation; EM for "
            "DetectiveQA and the ICL sets; recall@5 for recommendation) over its questions x 100; per competency: "
            "the mean over its sources; [95% bootstrap interval over contexts]; q = questions scored, ctx = "
            "contexts. Failed contexts have no replies: counted in the units column, not in the means. "
            "LongMemEval and ∞Bench-Sum are judged by an LLM in the benchmark and not scored here.")
    return "\n".join([note, "", *lines, *cost])
