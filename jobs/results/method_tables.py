"""The report's tables per method and dataset, in Markdown: the units (`overview_table`), SUMIE's precision /
recall / F1 per turn (seed 000, table 1), every other judge's scores, and the method health."""

from __future__ import annotations

from memloop.eval.judges.sumie import METRICS as SUMIE_METRICS
from memloop.jobs.results import cells, health
from memloop.jobs.results.cells import TURN_SUMMARIES
from memloop.jobs.results.figures import health_marker, health_rows, score_figures
from memloop.jobs.results.markdown import markdown_table
from memloop.jobs.results.run_data import NOT_APPLICABLE, RunData
from memloop.jobs.results.run_models import models_of


def overview_table(d: RunData) -> str:
    """Units per (method, dataset) by the cells' own reading (`cells.unit_states`): a unit that failed for the
    infrastructure (an endpoint's 401, a lost worker) is incomplete, not the method's failure."""
    rows = []
    states = cells.unit_states(d.samples)
    na = (states["base"] == NOT_APPLICABLE).any()
    incomplete = (states["base"] == cells.INCOMPLETE).any()
    for (ds, method), g in states.groupby(["dataset", "method"], sort=True):
        broken = g[g["status"] == "failed"]
        skipped = g[g["base"] == NOT_APPLICABLE]
        err = broken["error"].dropna().iloc[0][:80] if len(broken) else ""
        why = skipped["error"].dropna().iloc[0][:80] if len(skipped) and not err else ""
        rows.append(
            [method, ds, str((g["base"] == "ok").sum()), str((g["base"] == cells.ZERO).sum())]
            + ([str((g["base"] == cells.INCOMPLETE).sum())] if incomplete else [])
            + ([str(len(skipped))] if na else [])
            + [str(g["repeat"].nunique()), (err or why).replace("|", "/").replace("\n", " ")]
        )
    return markdown_table(
        ["method", "dataset", "ok", "failed"]
        + (["incomplete"] if incomplete else [])
        + (["n/a"] if na else [])
        + ["repeats", "first error"],
        rows,
    )


def _excluded_note(excluded: list[dict]) -> str:
    if not excluded:
        return ""
    return "\n\nLeft out of the comparison (a method wrote no unit for the sample):\n" + "\n".join(
        f"- {e['dataset']} {e['sample_id']}: none for {', '.join(e['methods'])}" for e in excluded
    )


def sumie_table(d: RunData) -> str | None:
    figs, excluded = score_figures(d)
    f = [x for x in figs if x["metric"].split(":")[0] in SUMIE_METRICS and ":" in x["metric"]]
    if not f:
        return None
    by = {(x["method"], x["dataset"], x["judge"], x["metric"]): x for x in f}
    header = ["method", "dataset", "judge", "judged / total"] + [
        f"{m[0].upper() if m != 'f1' else 'F1'} {w}" for w in TURN_SUMMARIES for m in SUMIE_METRICS
    ]
    rows = []
    for method, ds, judge in sorted({k[:3] for k in by}):
        first = by.get((method, ds, judge, "f1:last")) or next(v for k, v in by.items() if k[:3] == (method, ds, judge))
        cells_ = [
            method + health_marker(d, method, ds),
            ds,
            judge,
            f"{first['judged']} / {first['total']}" + cells.counts_text(dict(first, judged=first["total"])),
        ]
        for which in TURN_SUMMARIES:
            for metric in SUMIE_METRICS:
                cells_.append(cells.cell_text(by.get((method, ds, judge, f"{metric}:{which}")), counts=False))
        rows.append(cells_)
    return markdown_table(header, rows) + "\n\n" + table_note(d) + _excluded_note(excluded)


MEANS_NOTE = (
    'Figures: mean over units, a failed unit counted as 0, "n/a" left out; ± the standard error over '
    'repeats (several repeats); [95% interval, bootstrap over samples]. docs/judges.md, "Means and '
    'intervals".'
)


def table_note(d: RunData) -> str:
    """The means note and who judged whom (the model under test, the judge, self-judged or not)."""
    m = models_of(d)
    if not m:
        return MEANS_NOTE
    who = f" Model under test: {m['model']}; judge: {m['judge']}"
    return MEANS_NOTE + who + (" (self-judged)." if m["self_judged"] else ".")


def scores_table(d: RunData) -> str | None:
    figs, excluded = score_figures(d)
    s = [x for x in figs if x["metric"].split(":")[0] not in SUMIE_METRICS or ":" not in x["metric"]]
    if not s:
        return None
    # each judge's metrics, then its units column (metric None)
    judges = sorted({x["judge"] for x in s})
    cols = [(j, m) for j in judges for m in sorted({x["metric"] for x in s if x["judge"] == j}) + [None]]
    by = {(x["method"], x["dataset"], x["judge"], x["metric"]): x for x in s}
    rows = []
    for method, ds in sorted({k[:2] for k in by}):
        row = [method + health_marker(d, method, ds), ds]
        for j, m in cols:
            if m is None:
                any_fig = next((v for k, v in by.items() if k[:3] == (method, ds, j)), None)
                row.append(
                    "–"
                    if any_fig is None
                    else f"{any_fig['judged']} / {any_fig['total']}"
                    + cells.counts_text(dict(any_fig, judged=any_fig["total"]))
                )
                continue
            row.append(cells.cell_text(by.get((method, ds, j, m)), counts=False))
        rows.append(row)
    names = [f"{j}: judged / total" if m is None else m if m == j else f"{j}: {m}" for j, m in cols]
    return markdown_table(["method", "dataset"] + names, rows) + "\n\n" + table_note(d) + _excluded_note(excluded)


def health_table(d: RunData) -> str | None:
    rows = health_rows(d)
    if not rows:
        return None
    header, body = health.health_cells(rows)
    return markdown_table(header, body) + "\n\n" + health.note()
