"""A run's figures as data, each computed once per load (`RunData.derived`): every judge metric and cost
figure per (method, dataset) (`figures_of`), the memory sizes, the share of turns that hit the memory
bound and the input one step reads (for the papers' tables), and the method-health rows and markers
(`memloop.jobs.results.health`)."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
from memloop.eval.judges.aggregation import mean_se
from memloop.jobs.results import cells, health
from memloop.jobs.results.cost_tables import PAPER_COST_METRICS, cost_cells, cost_frame
from memloop.jobs.results.prompt_tokens import budget_tokenizer, prompt_tokenizer
from memloop.jobs.results.run_data import RunData, run_config


def health_rows(d: RunData) -> list[dict]:
    """Per (method, dataset): steps by outcome, units with a failed step, retry overhead (once per load)."""
    if "health" not in d.derived:
        d.derived["health"] = health.health_rows(d.samples, d.steps)
    return d.derived["health"]


def step_shares(d: RunData) -> dict[tuple[str, str], float]:
    return health.shares(health_rows(d))


def health_marker(d: RunData, method: str, dataset: str) -> str:
    """The health mark of a (method, dataset) cell: its share of unsuccessful steps, where it is too high."""
    return health.marker(step_shares(d).get((method, dataset)))


def score_figures(d: RunData) -> tuple[list[dict], list[dict]]:
    """Every judge metric per (method, dataset) by the rule for means (`memloop.jobs.results.cells`), and the samples
    left out of the comparison (computed once per load)."""
    if "score_figures" not in d.derived:
        d.derived["score_figures"] = cells.score_figures(d.samples, d.scores, d.judge_failures)
    return d.derived["score_figures"]


def figures_of(d: RunData) -> list[dict]:
    """Every headline figure of the run (computed once per load)."""
    if "figures" not in d.derived:
        d.derived["figures"] = health.annotate(_figures(d), step_shares(d))
    return d.derived["figures"]


def _figures(d: RunData) -> list[dict]:
    figures = list(score_figures(d)[0])
    tok = prompt_tokenizer(d)
    c = cost_frame(d, tok)
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    for (m, ds), g in c.groupby(["method", "dataset"], sort=True) if not c.empty else ():
        for metric, fig in cost_cells(g).items():
            figures.append(
                {
                    "method": m,
                    "dataset": ds,
                    "judge": "",
                    "metric": metric,
                    **fig,
                    "total": int(totals[(m, ds)]),
                    **({"tokenizer": tok.label} if metric in PAPER_COST_METRICS else {}),
                }
            )
    return figures


def memory_figures(d: RunData) -> list[dict]:
    """`memory_tokens` per (method, dataset): the existing information each turn's prompt receives
    (`memloop.eval.judges.memory_size`: the memory carried out of the turn before, in its prompt rendering
    and the run model's tokenizer: the step's recorded `memory_text` where the method records one,
    e.g. PRISM's indented in-place JSON or base plus amendment lines, else the compact JSON),
    averaged over a sample's turns, then over its samples (per repeat; seed 000 appendix A).
    Tokenised once per load: the Markdown and `report --json` read it."""
    if "memory_figures" not in d.derived:
        d.derived["memory_figures"] = _memory_figures(d)
    return d.derived["memory_figures"]


def _memory_figures(d: RunData) -> list[dict]:
    st = d.steps
    if st.empty or "memory_json" not in st or st["memory_json"].isna().all():
        return []
    from memloop.eval.judges.memory_size import carried_memories
    from memloop.eval.methods.parsing import as_text

    tok = budget_tokenizer(d)
    rows = []
    for key, g in st.sort_values("step").groupby(["method", "dataset", "repeat", "sample_id"], sort=True):
        extras = [json.loads(x or "{}") for x in g["extra_json"]]
        memories = [json.loads(m) if isinstance(m, str) else None for m in g["memory_json"]]
        # the text the prompt carried: the recorded rendering, else the memory's compact JSON
        texts = [
            e["memory_text"] if "memory_text" in e else (None if m is None else as_text(m))
            for e, m in zip(extras, memories)
        ]
        sizes = [len(tok.encode(t)) for t in carried_memories(zip((e.get("chunk_index") for e in extras), texts))]
        if sizes:
            rows.append(
                dict(zip(("method", "dataset", "repeat", "sample_id"), key), memory_tokens=sum(sizes) / len(sizes))
            )
    if not rows:
        return []
    per_sample = pd.DataFrame(rows)
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    out = []
    for (m, ds), g in per_sample.groupby(["method", "dataset"], sort=True):
        out.append(
            _cell(m, ds, "memory_tokens", cells.cost_figure(g, "memory_tokens"), len(g), totals, tokenizer=tok.label)
        )
    return out


def binding_figures(d: RunData) -> list[dict]:
    """`k_bound` per (method, dataset): the share of a sample's turns (chunks) whose memory went over K and
    was compressed or trimmed (a `compress` step at that turn), averaged over samples per repeat. A cell
    at 0 says the limited-memory condition never occurred (seed 000 figure 3)."""
    st = d.steps
    if st.empty or "kind" not in st:
        return []
    rows = []
    for key, g in st.groupby(["method", "dataset", "repeat", "sample_id"], sort=True):
        chunks = [json.loads(x or "{}").get("chunk_index") for x in g["extra_json"]]
        turns = {c for c in chunks if c is not None}
        bound = {c for c, k in zip(chunks, g["kind"]) if c is not None and k == "compress"}
        if turns:
            rows.append(dict(zip(("method", "dataset", "repeat", "sample_id"), key), k_bound=len(bound) / len(turns)))
    if not rows:
        return []
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    return [
        _cell(m, ds, "k_bound", cells.cost_figure(g, "k_bound"), len(g), totals)
        for (m, ds), g in pd.DataFrame(rows).groupby(["method", "dataset"], sort=True)
    ]


def context_figures(d: RunData) -> list[dict]:
    """`context_tokens` per (method, dataset): the input one step of the method reads, per sample (seed 002
    table 2's "Ch. Tokens"): the whole input (cl100k, the samples table's `input_tokens`) for a method that
    reads it at once (the long-context ceiling), else the dataset's chunk size (in the run model's tokenizer)."""
    from memloop.jobs.run.chunk_fit import WHOLE_INPUT_METHODS

    ok = d.ok
    if ok.empty:
        return []
    names = {m.get("label") or m.get("name"): m.get("name") for m in run_config(d).get("methods") or ()}
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    out = []
    for (m, ds), g in ok.groupby(["method", "dataset"], sort=True):
        column = "input_tokens" if names.get(m, m) in WHOLE_INPUT_METHODS else "chunk_tokens"
        g = g.dropna(subset=[column])
        if g.empty:
            continue
        fig = _figure([float(r[column].mean()) for _, r in g.groupby("repeat")])
        tokenizer = "cl100k_base" if column == "input_tokens" else "run model"
        out.append(_cell(m, ds, "context_tokens", fig, len(g), totals, tokenizer=tokenizer))
    return out


def _cell(
    method: str,
    dataset: str,
    metric: str,
    fig: dict[str, Any],
    samples: int,
    totals: dict[tuple[str, str], int],
    **extra: str,
) -> dict[str, Any]:
    """One per-sample figure's row of a (method, dataset) cell, in the columns every such figure has: its
    `samples` of the cell's `totals` (applicable units; the samples themselves where none are counted)."""
    return {
        "method": method,
        "dataset": dataset,
        "judge": "",
        "metric": metric,
        **fig,
        "samples": int(samples),
        "total": int(totals.get((method, dataset), samples)),
        **extra,
    }


def _figure(values: list[float]) -> dict[str, float | int | None]:
    m, se = mean_se(values)
    return {"mean": None if math.isnan(m) else m, "se": se, "repeats": len(values)}
