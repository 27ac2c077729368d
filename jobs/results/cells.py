"""Which units a table's cell counts, in which state: the rule of `memloop.eval.judges.aggregation` laid on a run.

Per dataset, a table compares methods on one common set of samples: the samples for which every
method run on the dataset wrote a unit; the others are left out for every method and named
(`excluded`). A method's repeats are all those it wrote units for. Every (judge, metric) the dataset was scored by is
then one column over those
same units, each unit in one state (`memloop.eval.judges.aggregation.STATES`):

- a unit whose method failed (`samples.failure` = "method") scores the metric's zero;
- a unit the method does not apply to ("n/a") stays out and is counted;
- a unit that failed for the infrastructure (`samples.failure` = "infrastructure", or for runs
  written before that column an error of the engine, Ray or a connection: `memloop.jobs.errors.failure_kind`)
  is incomplete, as is an ok unit that a judge of the dataset left without a score (the judge failed:
  its cause is in `judgments.error`); a judge that failed on every unit of a dataset keeps its
  headline columns (`memloop.eval.judges.headline_metrics`), every unit incomplete, rather than losing them;
- an ok unit with the judge's score is judged (an empty output is scored by the judge itself: zero).

SUMIE's per-turn metrics enter as start / last / avg per unit (`memloop.eval.judges.sumie.turn_summary`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from memloop.eval.judges import aggregator, headline_metrics
from memloop.eval.judges.aggregation import INCOMPLETE, JUDGED, NOT_APPLICABLE, ZERO, Unit, figure  # noqa: F401 (re-exported)
from memloop.eval.judges.sumie import METRICS as SUMIE_METRICS
from memloop.eval.judges.sumie import turn_summary
from memloop.jobs.errors import INFRASTRUCTURE, failure_kind

UNIT_KEY = ["repeat", "sample_id"]
TURN_SUMMARIES = ("start", "last", "avg")


def unit_states(samples: pd.DataFrame) -> pd.DataFrame:
    """samples with a `base` column: "ok", "n/a", ZERO (method failure) or INCOMPLETE (infrastructure)."""
    s = samples.copy()
    if s.empty:
        return s.assign(base=pd.Series(dtype=str))
    recorded = s["failure"] if "failure" in s else pd.Series([None] * len(s), index=s.index)
    base = []
    for status, error, rec in zip(s["status"], s["error"], recorded):
        if status == "failed":
            base.append(INCOMPLETE if failure_kind(error, rec) == INFRASTRUCTURE else ZERO)
        else:
            base.append(status)
    return s.assign(base=base)


def common_units(samples: pd.DataFrame) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """The units of each dataset's common sample set (the samples every method run on the dataset
    wrote a unit for, in any repeat), and the (dataset, sample) pairs left out with the methods that
    wrote none for them."""
    s = unit_states(samples)
    if s.empty:
        return s, []
    keep, excluded = [], []
    for ds, g in s.groupby("dataset", sort=True):
        methods = set(g["method"].unique())
        for sid, u in g.groupby("sample_id", sort=True):
            have = set(u["method"])
            if have == methods:
                keep.append(u)
            else:
                excluded.append({"dataset": ds, "sample_id": str(sid), "methods": sorted(methods - have)})
    return (pd.concat(keep) if keep else s.iloc[0:0]), excluded


def unit_values(scores: pd.DataFrame) -> pd.DataFrame:
    """One value per (method, dataset, judge, metric, repeat, sample): whole-sample metrics as scored,
    SUMIE's per-turn metrics as "{metric}:start|last|avg" from `turn_summary`."""
    cols = ["method", "dataset", "judge", "metric", "repeat", "sample_id", "value"]
    if scores.empty:
        return pd.DataFrame(columns=cols)
    turn = scores["turn"].notna() & scores["metric"].isin(SUMIE_METRICS)
    whole = scores[
        scores["turn"].isna()
        & ~scores["metric"].isin(SUMIE_METRICS)
        & ~scores["metric"].str.match(r"^(start|last|avg):")
    ]  # the judge's own summaries: recomputed
    rows = [whole[cols]]
    per_turn = scores[turn]
    if not per_turn.empty:
        out = []
        keys = ["method", "dataset", "judge", "repeat", "sample_id", "metric"]
        for (m, ds, j, rep, sid, metric), g in per_turn.groupby(keys, sort=False):
            for which, v in turn_summary(dict(zip(g["turn"], g["value"]))).items():
                out.append((m, ds, j, f"{metric}:{which}", rep, sid, v))
        rows.append(pd.DataFrame(out, columns=cols))
    return pd.concat(rows, ignore_index=True)


Key = tuple  # (method, dataset, judge, metric)


def score_columns(values: pd.DataFrame, judge_failures: pd.DataFrame | None = None) -> dict[str, list[tuple[str, str]]]:
    """{dataset: its (judge, metric) columns}: those scored there, and for a judge that failed on the
    dataset and scored nothing there, its headline metrics (so a judge that failed everywhere shows as
    incomplete, not as a missing column)."""
    cols: dict[str, set[tuple[str, str]]] = {}
    for ds, j, m in zip(values["dataset"], values["judge"], values["metric"]):
        cols.setdefault(ds, set()).add((j, m))
    if judge_failures is not None and not judge_failures.empty:
        for ds, j in set(zip(judge_failures["dataset"], judge_failures["judge"])):
            if not any(judge == j for judge, _ in cols.get(ds, ())):
                cols.setdefault(ds, set()).update((j, m) for m in headline_metrics(j))
    return {ds: sorted(c) for ds, c in cols.items()}


def score_cells(
    samples: pd.DataFrame, scores: pd.DataFrame, judge_failures: pd.DataFrame | None = None
) -> tuple[dict[Key, list[Unit]], dict[tuple, list[int]], list[dict[str, Any]]]:
    """{(method, dataset, judge, metric): the cell's units in their states}, {(method, dataset): its
    repeats}, and the samples left out of the comparison. `judge_failures`: the `judgments` rows with
    an error (dataset and judge columns at least), whose judges keep their columns (`score_columns`)."""
    units, excluded = common_units(samples)
    values = unit_values(scores)
    columns = score_columns(values, judge_failures)
    if units.empty or not columns:
        return {}, {}, excluded
    by_unit = {
        k: float(v)
        for k, v in zip(
            zip(
                values["method"],
                values["dataset"],
                values["judge"],
                values["metric"],
                values["repeat"],
                values["sample_id"],
            ),
            values["value"],
        )
    }
    out: dict[Key, list[Unit]] = {}
    repeats: dict[tuple, list[int]] = {}
    for (method, ds), g in units.groupby(["method", "dataset"], sort=True):
        repeats[(method, ds)] = sorted(int(r) for r in g["repeat"].unique())
        for judge, metric in columns.get(ds, ()):
            cell = []
            for rep, sid, base in zip(g["repeat"], g["sample_id"], g["base"]):
                if base == "ok":
                    v = by_unit.get((method, ds, judge, metric, rep, sid))
                    cell.append(
                        Unit(int(rep), str(sid), JUDGED, v) if v is not None else Unit(int(rep), str(sid), INCOMPLETE)
                    )
                else:
                    cell.append(Unit(int(rep), str(sid), base if base != "n/a" else NOT_APPLICABLE))
            out[(method, ds, judge, metric)] = cell
    return out, repeats, excluded


def score_figures(
    samples: pd.DataFrame, scores: pd.DataFrame, judge_failures: pd.DataFrame | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (method, dataset, judge, metric) cell by the rule, and the samples left out of the comparison."""
    by_cell, repeats, excluded = score_cells(samples, scores, judge_failures)
    figures = []
    for (method, ds, judge, metric), cell in by_cell.items():
        fig = figure(cell, aggregator(judge), repeats=repeats[(method, ds)])
        if fig["judged"] and fig["mean_judged"] is None:
            # the metric is undefined for this method wherever it was judged (GO has no start or
            # average turn): no figure, rather than the zeros of its failed units
            fig.update(mean=None, se=None, lo=None, hi=None)
        figures.append({"method": method, "dataset": ds, "judge": judge, "metric": metric, **fig})
    return figures, excluded


def cost_figure(units: pd.DataFrame, value: str, weight: str | None = None) -> dict[str, Any]:
    """A cost cell over `units` (all counted: the samples every method finished): column `value` per
    unit, and for a ratio of sums (a cache hit) column `weight` its denominator. A unit whose value is
    unknown (NaN: no recorded prompt) leaves the figure undefined rather than biased."""
    if units[value].isna().any() or (weight is not None and units[weight].isna().any()):
        return figure([])
    cell = [
        Unit(int(r), str(sid), JUDGED, float(v), None if weight is None else float(w))
        for r, sid, v, w in zip(
            units["repeat"],
            units["sample_id"],
            units[value],
            units[weight] if weight is not None else [None] * len(units),
        )
    ]
    return figure(cell)


def cell_text(fig: dict[str, Any] | None, digits: int = 3, scale: float = 1.0, counts: bool = True) -> str:
    """ "mean ± s.e. [lo, hi]" in `scale` units with the counts that are not the whole: "(judged / total,
    k zero, m incomplete)"; "–" where there is no figure."""
    if fig is None or fig.get("mean") is None:
        text = "–"
    else:
        text = f"{fig['mean'] * scale:.{digits}f}"
        if fig.get("se") is not None:
            text += f" ± {fig['se'] * scale:.{digits}f}"
        if fig.get("lo") is not None and fig.get("hi") is not None:
            text += f" [{fig['lo'] * scale:.{digits}f}, {fig['hi'] * scale:.{digits}f}]"
    if counts and fig is not None:
        text += counts_text(fig)
    return text


def counts_text(fig: dict[str, Any]) -> str:
    parts = []
    judged, total = fig.get("judged"), fig.get("total")
    if judged is not None and total is not None and judged < total:
        parts.append(f"{judged} / {total} judged")
    if fig.get("zeroed"):
        parts.append(f"{fig['zeroed']} failed = 0")
    if fig.get("n/a"):
        parts.append(f"{fig['n/a']} n/a")
    if fig.get("incomplete"):
        parts.append(
            f"incomplete: {fig.get('incomplete_units', 0)} unknown"
            + (
                f", {fig['repeats_without_result']} repeat(s) without result"
                if fig.get("repeats_without_result")
                else ""
            )
        )
    return f" ({'; '.join(parts)})" if parts else ""
