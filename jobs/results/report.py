"""`memloop report`: the papers' tables and plots from a run's Parquet tables.

Every figure is computed per repeat first (mean over samples, or a ratio of sums over samples for a
hit rate) and then shown as mean ± standard error over the repeats (seed 002 reports five samples)
with a seeded 95% bootstrap interval over samples in brackets (`memloop.eval.judges.aggregation.figure`, the
rule for means). Tables:

- SUMIE (seed 000 table 1): P / R / F1 at the first turn ("start"), the last turn and averaged over
  turns, per method. F1 is the mean of per-sample F1 values as the judge computed them.
- Scores: every other (judge, metric) per method, e.g. BooookScore, ROUGE, exact match.
  Every judge's figures come with "judged / total": the units it scored out of the method's units on
  the dataset, so a failed sample or a failed judgment never shrinks the denominator unseen.
- The papers' tables the run's config names (`paper_tables:`, laid out by `memloop.jobs.results.paper_tables`): the
  paper's rows and columns, memloop's figure beside the paper's printed number.
- Cost (seed 002 table 3, per book): means per sample, over the samples every method on a dataset
  finished (the others are listed under the table with the methods that failed them), in two labelled
  groups. The paper's, in one token base (the recorded prompts and outputs, one per step, counted in
  the run's model tokenizer when its weights are on this machine, else cl100k_base; the table says
  which): the prefix hit of section 4.2 (each prompt's longest prefix shared with the previous prompt of
  the same sample, over all tokens encoded), total, net = total minus that prefix, output, and the
  cost index (net + 3 x output) / 10^6, so hit = 1 - net / total in every row. The engine's, as
  served: radix-cache hit, prompt tokens (chat template included; the kept attempt of each step, retried attempts being
  the health table's retry overhead), net (prompt
  minus cached: reuse across samples and repeats included), decoded, and its cost index.
- Method health (`memloop.jobs.results.health`): per method and dataset, the steps by outcome, the units with a step
  that did not succeed, revisions proposed / accepted / rejected and the retry overhead; every figure
  whose steps did not succeed in more than `memloop.jobs.results.health.UNSUCCESSFUL_STEP_SHARE` of cases is marked
  with the share (paper tables, SUMIE and Scores tables, `report --json`).
Plots (PNG, matplotlib): F1 per turn, prompt and cached tokens per step, cost index against chunk size.

The formulas are `memloop.eval.judges`': start / last / avg per sample is `memloop.eval.judges.sumie.turn_summary`,
the mean over samples is the judge's declared aggregation (`memloop.eval.judges.aggregator`), the cache hit
rate and cost index are `memloop.eval.judges.cost`. This module lays the report out (`build_report`;
`headline`, its numbers for `report --json`; `report_of`, written beside the run) from modules of one job
each: `run_data` (the run's tables, loaded once), `figures`, `cost_tables`, `method_tables`, `paper_report`,
`mab_table`, `plots`, `prompt_tokens` (the token base), `run_models` (who ran and judged), `markdown`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd
from memloop.jobs.results import cells, health
from memloop.jobs.results.cost_tables import cost_table, cost_units
from memloop.jobs.results.figures import figures_of, health_rows, score_figures
from memloop.jobs.results.mab_table import mab_markdown
from memloop.jobs.results.method_tables import health_table, overview_table, scores_table, sumie_table
from memloop.jobs.results.paper_report import paper_markdown, paper_tables
from memloop.jobs.results.plots import PLOTS
from memloop.jobs.results.run_data import NOT_APPLICABLE, RunData
from memloop.jobs.results.run_models import models_of
from memloop.jobs.store.lock import describe_holder
from memloop.jobs.store.run_store import RunStore


@dataclass
class Report:
    markdown: str
    plots: dict[str, bytes] = field(default_factory=dict)
    not_written: str | None = None  # why report.md and the plots are not beside the run (e.g. it is read-only)


def units_line(samples: pd.DataFrame) -> str:
    """ "N units (a ok, b failed, c incomplete, d n/a)": a failed unit is the method's (scored 0), an
    incomplete one the infrastructure's (unknown), an n/a one applies to no method (neither)."""
    states = cells.unit_states(samples)
    base = states["base"] if not states.empty else pd.Series(dtype=str)
    counts = [
        ("ok", int((base == "ok").sum())),
        ("failed", int((base == cells.ZERO).sum())),
        ("incomplete", int((base == cells.INCOMPLETE).sum())),
        ("n/a", int((base == NOT_APPLICABLE).sum())),
    ]
    return f"{len(samples)} units ({', '.join(f'{n} {what}' for what, n in counts if n or what == 'ok')})"


def in_progress_note(d: RunData) -> list[str]:
    """The report's first words on a run being computed now: every figure below is partial."""
    h = d.computing
    if not h:
        return []
    return [
        f"**In progress, partial figures:** this run is being computed now by {describe_holder(h)}; the "
        "tables below hold the units written so far. Report it again when that run has finished.",
        "",
    ]


def build_report(d: RunData) -> Report:
    import matplotlib

    matplotlib.use("Agg")
    n_rep = int(d.samples["repeat"].nunique()) if not d.samples.empty else 0
    parts = [
        f"# Run `{d.run_id}`",
        "",
        f"Results: `{d.uri}`",
        "",
        *in_progress_note(d),
        f"{units_line(d.samples)}, {n_rep} repeat(s); "
        "figures are mean ± standard error over repeats [95% bootstrap interval over samples]."
        if n_rep > 1
        else f"{units_line(d.samples)}, one repeat; figures are mean [95% bootstrap interval over samples].",
        "",
        "## Units",
        "",
        overview_table(d) if not d.samples.empty else "(no units written yet)",
    ]
    papers = paper_tables(d)
    if papers:
        parts += ["", "## The papers' tables: memloop beside the paper", ""]
        parts += ["\n\n".join(paper_markdown(t, laid) for t, laid in papers)]
    mab = mab_markdown(d)
    if mab:
        parts += ["", "## MemoryAgentBench: per competency and source (inject once, ask many)", "", mab]
    own = " (the run's own judging)" if d.judgings else ""
    for title, table in (
        (f"SUMIE: precision / recall / F1 per turn (seed 000, table 1){own}", sumie_table(d)),
        (f"Scores{own}", scores_table(d)),
        ("Cost (seed 002, table 3)", cost_table(d)),
        ("Method health: step outcomes and retries", health_table(d)),
    ):
        if table:
            parts += ["", f"## {title}", "", table]
    if d.judgings:
        parts += [
            "",
            "## Re-judgings (`memloop rescore`)",
            "",
            "The run's outputs judged again; each re-judging is kept under its own judging id beside the "
            "run's own judgments.",
        ]
        for j in d.judgings:
            sm, jd = j.summary(), d.judged_by(j)
            parts += [
                "",
                f"### Re-judging `{j.judging_id}`: {j.label}",
                "",
                f"{sm['ok']} units judged, {sm['failed']} failed.",
            ]
            for table in (sumie_table(jd), scores_table(jd)):
                if table:
                    parts += ["", table]
    plots = {}
    for name, fn in PLOTS.items():
        png = fn(d)
        if png:
            plots[name] = png
    if plots:
        parts += ["", "## Plots", ""] + [f"![{n[:-4]}]({n})" for n in plots]
    return Report("\n".join(parts) + "\n", plots)


def headline(d: RunData) -> dict:
    """The report's numbers as data (`memloop report --json`): units per (method, dataset), every
    judge metric (SUMIE at start/last/avg) and cost figure as the Markdown tables show it, by the rule
    for means (`memloop.eval.judges.aggregation.figure`): `mean` (failed units as 0), `se` over repeats,
    `lo`/`hi` the 95% bootstrap interval over samples, `mean_judged`, the counts (`judged`, `zeroed`,
    `n/a`, `incomplete_units`, `total`, `samples`, `repeats`) and `incomplete`. The cost figures (seed
    002's and the engine's, `cost_cells`: the same mean, s.e. and bootstrap interval over samples) are over the samples
    every method finished (`samples` of `total`; left-out samples under
    `cost_excluded`), the judge figures over the samples every method ran (`score_excluded`);
    `incomplete` at the top is true when any figure is, or while the run is being computed (`in_progress`: its
    lock holder, else None; every figure is then partial and marked `partial`). `models`: the model under test and the
    judge
    model. `paper_tables`: the tables of the papers the run's config names (`memloop.jobs.results.paper_tables`),
    memloop's cell and the paper's number side by side."""
    units = [
        {
            "method": m,
            "dataset": ds,
            "ok": int((g["status"] == "ok").sum()),
            "failed": int((g["status"] == "failed").sum()),
            **({"n/a": int((g["status"] == "n/a").sum())} if (g["status"] == "n/a").any() else {}),
        }
        for (m, ds), g in d.samples.groupby(["method", "dataset"], sort=True)
    ]
    _, excluded = cost_units(d)
    figures = figures_of(d)
    if d.computing:
        figures = [dict(f, partial=True) for f in figures]
    return {
        "run_id": d.run_id,
        "uri": d.uri,
        "units": units,
        "figures": figures,
        "cost_excluded": excluded,
        "score_excluded": score_figures(d)[1],
        "in_progress": d.computing,
        "incomplete": bool(d.computing) or any(f.get("incomplete") for f in figures),
        "models": models_of(d),
        "paper_tables": [laid for _, laid in paper_tables(d)],
        "health": health_rows(d),
        "unsuccessful_step_share": health.UNSUCCESSFUL_STEP_SHARE,
        "judgings": [dict(j.summary(), figures=score_figures(d.judged_by(j))[0]) for j in d.judgings],
    }


def write_report(run_uri: str) -> tuple[str, Report]:
    """Build the report of the run at `run_uri`, write report.md and PNGs next to its tables
    (two runs are compared by `memloop compare`, into a directory of its own)."""
    rs, _, rep = report_of(run_uri)
    return rs.uri, rep


def report_of(run_uri: str) -> tuple[RunStore, RunData, Report]:
    """Load the run once, build its report and write it next to the tables; the loaded data is
    returned too (`report --json` reads its numbers from the same load)."""
    from memloop.jobs.errors import StorageError, error_text

    rs = RunStore.at(run_uri)
    d = RunData.load(rs)
    rep = build_report(d)
    try:
        for name, png in rep.plots.items():
            rs.put_file(name, png)
        rs.put_file("report.md", rep.markdown.encode())
    except StorageError as exc:  # a read-only run (an archive, a colleague's bucket) is still reported
        what = error_text(exc).split("; ")[0]  # what failed; the store's advice is for `run` and its `output`
        rep.not_written = (
            f"report.md and the plots were not written next to the run ({what[:300]}); "
            "the report is printed only: copy the run somewhere writable to keep them"
        )
    return rs, d, rep
