"""MemoryAgentBench's table from a finished run: rows = methods (the long-context baseline among them),
columns = the four competencies, then each source, then the cost of asking many.

A cell is the benchmark's figure (`memloop.eval.judges.mab`): per source the mean of the source's table metric
over its questions x 100, per competency the mean over its sources, with a 95% bootstrap interval over
contexts and the counts — questions scored, contexts judged, contexts n/a (the method does not apply:
a summariser, the long context beyond the window), contexts whose method failed (each of their
questions a zero in the means, as every table counts a method's failure: `samples.items_json` records
how many questions and of which source), contexts incomplete (the infrastructure or the judge failed:
out of the means, counted), questions not scored because the benchmark judges them with an LLM and the
run used `mab` rather than `mab-llm`.
The cost columns are the ask-many phase's (the "answer" steps) beside the memory-building phase's:
the prefix share of the recorded answer prompts (each prompt's longest prefix shared with the previous
answer prompt of the same context, in cl100k_base tokens: what a prefix cache can reuse), the engine's
own cache hit where it reports one, net prompt tokens and the cost index ((net + 3 x output) / 10^6) per context.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable

import pandas as pd
from memloop.eval.judges.aggregation import INCOMPLETE, ZERO
from memloop.eval.judges.cost import cost_index, prefix_hits, usage_of
from memloop.eval.judges.mab import (
    COMPETENCIES,
    OVERALL,
    Figure,
    QuestionScore,
    base_competency,
    competency_figures,
    source_figures,
)
from memloop.jobs.results.cells import unit_states
from memloop.jobs.results.mab_contexts import contexts_note
from memloop.jobs.results.mab_fifo import fifo_note
from memloop.jobs.results.mab_published import published_markdown
from memloop.jobs.results.run_data import RunData
from memloop.jobs.store.run_store import RunStore

TASK = "memoryagentbench"


JUDGES = ("mab-llm", "mab")  # the first present is read: `mab-llm` also scores the LLM-judged sources


def judge_of(judgments: pd.DataFrame) -> str:
    present = set(judgments["judge"]) if not judgments.empty else set()
    return next((j for j in JUDGES if j in present), JUDGES[-1])


def question_scores(judgments: pd.DataFrame, samples: pd.DataFrame | None = None) -> dict[str, list[QuestionScore]]:
    """method -> one QuestionScore per question: each judged question's primary metric (the run's own
    judging), and a zero for every question of a context whose method failed (`samples.items_json`
    says how many and where they belong), as every table counts a method's failure."""
    judge = judge_of(judgments)
    rows = judgments[(judgments["judge"] == judge) & (judgments["index"] >= 0)] if not judgments.empty else judgments
    if "judging_id" in rows:
        rows = rows[rows["judging_id"].isna()]
    out: dict[str, list[QuestionScore]] = {}
    for r in rows.itertuples():
        label = json.loads(r.record_json).get("label") or {}
        metric = label.get("primary")
        if metric is None:  # a judge call behind a question's verdict, not a question
            continue
        value = (label.get("metrics") or {}).get(metric)
        out.setdefault(r.method, []).append(
            QuestionScore(
                label.get("source", "?"),
                label.get("competency") or "?",
                r.sample_id,
                None if value is None else float(value),
            )
        )
    if samples is not None and not samples.empty:
        states = unit_states(samples)
        for r in states[states["base"] == ZERO].itertuples():
            items = json.loads(r.items_json) if isinstance(getattr(r, "items_json", None), str) else None
            if items is None:  # written before the count was recorded: incomplete, counted in the units
                continue
            out.setdefault(r.method, []).extend(
                QuestionScore(items["source"], items["competency"], r.sample_id, 0.0) for _ in range(items["count"])
            )
    return out


def unit_counts(samples: pd.DataFrame, judge_failures: pd.DataFrame) -> dict[str, int]:
    """ok / n/a / failed (the method: its questions count as zeros) / incomplete (the infrastructure
    failed, or the judge failed on an ok unit: out of the means)."""
    states = unit_states(samples)
    failed_judging = set(judge_failures["unit"]) if not judge_failures.empty and "unit" in judge_failures else set()
    judge_failed = int(((states["base"] == "ok") & states["unit"].isin(failed_judging)).sum())
    no_count = int(((states["base"] == ZERO) & _no_items(states)).sum())
    return {
        "ok": int((states["base"] == "ok").sum()) - judge_failed,
        "n/a": int((states["base"] == "n/a").sum()),
        "failed": int((states["base"] == ZERO).sum()) - no_count,
        "incomplete": int((states["base"] == INCOMPLETE).sum()) + judge_failed + no_count,
    }


def _no_items(states: pd.DataFrame) -> pd.Series:
    if "items_json" not in states:
        return pd.Series(True, index=states.index)
    return ~states["items_json"].apply(lambda v: isinstance(v, str))


def _cell(f: Figure | None) -> str:
    if f is None:
        return "–"
    extra = f"; {f.unscored} LLM-judged, not scored" if f.unscored else ""
    if math.isnan(f.value):
        return f"not scored ({f.contexts} contexts{extra})"
    interval = "" if math.isnan(f.low) else f" [{f.low:.1f}, {f.high:.1f}]"
    return f"{f.value:.1f}{interval} ({f.questions} q / {f.contexts} ctx{extra})"


def ask_many_cost(steps: pd.DataFrame) -> dict[str, dict[str, float]]:
    """method -> per-context means of the answer phase (and the build phase's net tokens)."""
    from memloop.eval.tokens import cl100k_encode

    out = {}
    for method, g in steps.groupby("method"):
        ask = g[g["kind"] == "answer"]
        build = g[g["kind"] != "answer"]
        contexts = max(1, g["unit"].nunique())
        hits = [
            prefix_hits(list(u.sort_values("step")["prompt"].fillna("")), cl100k_encode) for _, u in ask.groupby("unit")
        ]
        total, reused = sum(h[0] for h in hits), sum(h[1] for h in hits)
        usage = usage_of(
            ask["prompt_tokens"].fillna(0).sum(),
            ask["cached_tokens"].fillna(0).sum(),
            ask["decoded_tokens"].fillna(0).sum(),
        )
        out[method] = {
            "questions": float(len(ask)) / contexts,
            "prefix_share": 100 * reused / total if total else math.nan,
            "engine_hit": 100 * usage.cached_tokens / usage.prompt_tokens if usage.prompt_tokens else math.nan,
            "net": (usage.prompt_tokens - usage.cached_tokens) / contexts,
            "cost_index": cost_index(usage) / contexts,
            "build_net": float((build["prompt_tokens"].fillna(0) - build["cached_tokens"].fillna(0)).sum()) / contexts,
        }
    return out


def mab_table(d: RunData, judgments: pd.DataFrame | None = None) -> dict[str, Any] | None:
    """The table as data: {"columns": [...], "rows": [{"method", "cells": {col: Figure|None}, "units",
    "cost"}]}; None when the run has no MemoryAgentBench unit."""
    samples = d.samples[d.samples["task"] == TASK] if not d.samples.empty else d.samples
    if samples.empty:
        return None
    if judgments is None:
        judgments = RunStore.at(d.uri).table("judgments").to_pandas()
    scores = question_scores(judgments, samples)
    sources = sorted({q.source for qs in scores.values() for q in qs})
    steps = d.steps[d.steps["task"] == TASK] if not d.steps.empty else d.steps
    cost = ask_many_cost(steps) if not steps.empty else {}
    rows, figures = [], {}
    for method in sorted(samples["method"].unique()):
        qs = scores.get(method, [])
        figures[method] = {**competency_figures(qs), **source_figures(qs)}
    columns = [*competency_columns(figures.values()), *sources]
    for method, figs in figures.items():
        mine = samples[samples["method"] == method]
        failures = d.judge_failures
        if not failures.empty and "judge" in failures:
            failures = failures[failures["judge"].isin(JUDGES) & failures["unit"].isin(mine["unit"])]
        rows.append(
            {
                "method": method,
                "cells": {c: figs.get(c) for c in columns},
                "units": unit_counts(mine, failures),
                "cost": cost.get(method),
            }
        )
    return {
        "columns": columns,
        "rows": rows,
        "judge": judge_of(judgments),
        "contexts": contexts_note(samples),
        "fifo": fifo_note(samples),
    }


def competency_columns(figures: Iterable[dict[str, Figure]]) -> list[str]:
    """The competency columns, in the paper's order: each competency as the paper averages it, or as some
    row has it instead ("TTL (MCC only)": the run lacks one of the paper's columns), then Overall where some
    row has the paper's Overall. A competency no row has keeps its column (every cell "–")."""
    labels = {label for figs in figures for label in figs}
    out: list[str] = []
    for comp in COMPETENCIES:
        held = sorted((lb for lb in labels if base_competency(lb) == comp and lb != comp), key=len)
        out += [comp] if comp in labels or not held else []
        out += held
    return out + ([OVERALL] if OVERALL in labels else [])


def mab_markdown(d: RunData, judgments: pd.DataFrame | None = None) -> str | None:
    table = mab_table(d, judgments)
    if table is None:
        return None
    cols = table["columns"]
    lines = [
        "| method | units (ok / n/a / failed / incomplete) | " + " | ".join(cols) + " |",
        "|" + "---|" * (len(cols) + 2),
    ]
    for r in table["rows"]:
        u = r["units"]
        lines.append(
            f"| {r['method']} | {u['ok']} / {u['n/a']} / {u['failed']} / {u['incomplete']} | "
            + " | ".join(_cell(r["cells"][c]) for c in cols)
            + " |"
        )
    cost = [
        "",
        "Asking many (per context: the answer steps; build = the memory-building steps before them):",
        "",
        "| method | questions | answer-prompt prefix share (%) | engine cache hit (%) | answer net tokens | "
        "answer cost index | build net tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        c = r["cost"]
        if not c:
            cost.append(f"| {r['method']} | – | – | – | – | – | – |")
            continue
        num = lambda v, f="{:.0f}": "–" if v is None or math.isnan(v) else f.format(v)  # noqa: E731
        cost.append(
            f"| {r['method']} | {num(c['questions'], '{:.1f}')} | {num(c['prefix_share'])} | "
            f"{num(c['engine_hit'])} | {num(c['net'])} | {num(c['cost_index'], '{:.4f}')} | "
            f"{num(c['build_net'])} |"
        )
    note = (
        "Per source: the benchmark's table metric (SubEM for RULER-QA, EventQA and FactConsolidation; EM for "
        "DetectiveQA and the ICL sets; recall@5 for recommendation; the judge model's verdicts for LongMemEval "
        "and ∞Bench-Sum) over its questions x 100; per competency: the mean over its sources (the ICL sets first "
        "averaged into one column, the paper's MCC, and TTL the mean of MCC and the recommendation set, the "
        'paper\'s Recom.; without Recom. the column reads "TTL (MCC only)", and a competency with a '
        'source the run could not score names it, e.g. "AR (without longmemeval_s)"); overall: the mean of the four '
        "competencies when all four are scored as the paper averages them (the paper's Overall; left out "
        "otherwise); [95% bootstrap interval over contexts, none where a source has a single context]; q = questions "
        "scored, ctx = "
        "contexts. A context whose method failed scores 0 on each of its questions (in the means and in "
        "q); n/a (the method does not apply) and incomplete (the infrastructure or the judge failed) "
        "contexts are counted in the units column and left out of the means. "
        + (
            "LongMemEval and ∞Bench-Sum: judged by the run's judge model with the benchmark's LLM-judge "
            "procedure (judge `mab-llm`)."
            if table["judge"] == "mab-llm"
            else "LongMemEval and ∞Bench-Sum are judged by an LLM in the benchmark: not scored under the `mab` "
            "judge (use `mab-llm` with a judge model)."
        )
    )
    fifo = ["", table["fifo"]] if table["fifo"] else []
    return "\n".join([note, "", table["contexts"], *fifo, "", *lines, *cost, "", published_markdown()])
