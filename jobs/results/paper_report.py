"""The papers' tables a run's config names (`paper_tables:`), laid out from the run's figures by
`memloop.jobs.results.paper_tables` (memloop's cell beside the paper's number), each with its procedure card, and
their Markdown."""

from __future__ import annotations

from typing import Any

import pandas as pd
from memloop.eval.judges.aggregation import paired_difference
from memloop.jobs.results import cells, health
from memloop.jobs.results.figures import binding_figures, context_figures, figures_of, memory_figures, step_shares
from memloop.jobs.results.markdown import markdown_table
from memloop.jobs.results.paper_tables import TABLES, PaperTable, layout, method_status
from memloop.jobs.results.run_data import RunData, run_config
from memloop.jobs.results.run_models import models_of


def paper_tables(d: RunData) -> list[tuple[PaperTable, dict]]:
    """The papers' tables the run's config names, each laid out from the run's figures."""
    ids = [i for i in run_config(d).get("paper_tables") or () if i in TABLES]
    if not ids:
        return []
    figures = list(figures_of(d))
    if any(c.metric == "memory_tokens" for i in ids for c in TABLES[i].columns):
        figures += health.annotate(memory_figures(d), step_shares(d))
    if any(c.metric == "context_tokens" for i in ids for c in TABLES[i].columns):
        figures += health.annotate(context_figures(d), step_shares(d))
    if any(c.metric == "k_bound" for i in ids for c in TABLES[i].columns):
        figures += health.annotate(binding_figures(d), step_shares(d))
    status = method_status(d.samples)
    by_cell, _, _ = cells.score_cells(d.samples, d.scores, d.judge_failures)
    models = models_of(d)

    def paired(a: str, b: str, col: Any, turn: str | None, dataset: str | None) -> dict | None:
        keys = sorted(
            k
            for k in by_cell
            if k[0] == a
            and k[2] == col.judge
            and k[3] == col.metric
            and (col.task is None or k[1].split(":", 1)[0] == col.task)
            and (dataset is None or k[1].endswith(dataset))
        )
        if not keys or (b, keys[0][1], col.judge, col.metric) not in by_cell:
            return None
        return paired_difference(by_cell[keys[0]], by_cell[(b, keys[0][1], col.judge, col.metric)])

    out = []
    for i in ids:
        laid = layout(TABLES[i], figures, status, paired, models)
        laid["procedure_card"] = _procedure_card(i, run_config(d))
        if any(c.task == "repoqa" for c in TABLES[i].columns):
            laid["describers"] = describer_shares(d.samples)
        out.append((TABLES[i], laid))
    return out


def _procedure_card(table_id: str, config: dict) -> str:
    """The table's procedure card for the run's own config (`memloop.jobs.results.procedure_cards`); a
    config this version cannot read (a run made by an older memloop) says so instead."""
    from memloop.jobs.results.procedure_cards import card, card_markdown
    from memloop.jobs.run.config import parse_config

    from memloop.errors import MemloopError

    try:
        return card_markdown(card(table_id, parse_config(config, "the run's config"), window=True))
    except MemloopError as exc:
        return f"#### Procedure card: {table_id}\n\nnot available: the run's config does not load here ({exc})"


def paper_markdown(table: PaperTable, laid: dict[str, Any]) -> str:
    header = ["row"]
    for col in table.columns:
        header += [f"{col.label}, memloop", f"{col.label}, {table.paper_label}"]
    body = [
        [r["label"]]
        + [x for c in table.columns for x in (r["cells"][c.label]["text"], r["cells"][c.label]["paper"] or "")]
        for r in laid["rows"]
    ]
    body += [
        [f"Δ {d['label']} (paired)"] + [x for c in table.columns for x in (d["cells"][c.label]["text"], "")]
        for d in laid.get("differences", ())
    ]
    out = f"### {table.title}\n\n" + markdown_table(header, body)
    if laid.get("differences"):
        out += (
            "\n\nΔ rows: the paired difference (second minus first) on the samples both methods ran, "
            "a failed unit counted as 0, with its 95% bootstrap interval over samples (as `memloop compare`)."
        )
    out += f"\n\n{laid['note']}" if laid.get("note") else ""
    if laid.get("describers"):
        rows = [
            [
                r["method"],
                r["dataset"],
                f"{r['model']} / {r['samples']}",
                f"{r['fallback']} / {r['samples']}",
                f"{r['rule']} / {r['samples']}",
            ]
            for r in laid["describers"]
        ]
        out += (
            "\n\nRepoQA queries by who described the needle, per cell (model: the describer model's or the "
            "release's own description; fallback: the labelled rule-based one, where the model's was missing or "
            "rejected; rule-based: no describer configured):\n\n"
            + markdown_table(["method", "dataset", "model", "fallback", "rule-based"], rows)
        )
    return out + (f"\n\n{laid['procedure_card']}" if laid.get("procedure_card") else "")


def describer_shares(samples: pd.DataFrame, task: str = "repoqa") -> list[dict[str, Any]]:
    """Per cell (method, dataset) of `task`: how many distinct samples' queries a model described, how many
    fell back to the labelled rule-based description, how many were rule-based by config (`describer`)."""
    if samples.empty or "describer" not in samples or "task" not in samples:
        return []
    rows = samples[(samples["task"] == task) & samples["describer"].notna()]
    out = []
    for (method, ds), g in rows.groupby(["method", "dataset"], sort=True):
        who = g.drop_duplicates("sample_id")["describer"].astype(str)
        fallback = int(who.str.startswith("code fallback").sum())
        rule = int((who == "code").sum())
        out.append(
            {
                "method": method,
                "dataset": ds,
                "samples": int(len(who)),
                "fallback": fallback,
                "rule": rule,
                "model": int(len(who)) - fallback - rule,
            }
        )
    return out
