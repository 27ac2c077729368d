"""One run as the viewer holds it: the report's `RunData` (one load, the report's own loader), the raw
judgments, and a unit index for the samples page (filter, sort, paginate server-side).

The per-unit score columns are `memloop.jobs.results.cells.unit_values` (one value per unit, SUMIE's turns summarised,
as
`memloop compare` pairs them); the report, its tables and plots are `memloop.jobs.results.report`'s.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

import numpy as np
import pandas as pd
from memloop.jobs.results.cells import unit_values
from memloop.jobs.results.compare import PAIR
from memloop.jobs.results.figures import figures_of
from memloop.jobs.results.prompt_tokens import PromptTokenizer
from memloop.jobs.results.report import Report, build_report
from memloop.jobs.results.run_data import NOT_APPLICABLE, RunData, run_config
from memloop.jobs.results.view.errors import ViewError
from memloop.jobs.store.lock import LOCK_NAME
from memloop.jobs.store.objects import NotFoundError
from memloop.jobs.store.run_store import RunStore

# the samples page's fixed columns (samples-table columns, plus the failed-step count); then one per score
BASE_COLUMNS = (
    "sample_id",
    "method",
    "dataset",
    "repeat",
    "status",
    "n_steps",
    "failed_steps",
    "input_tokens",
    "prompt_tokens",
    "cached_tokens",
    "decoded_tokens",
)
PAGE_SIZES = (20, 50, 100, 500)
STEP_OUTCOMES = ("any failed step", "no failed step")


def score_column(judge: str, metric: str) -> str:
    return metric if judge == metric else f"{judge}:{metric}"


@dataclass
class ViewRun:
    store: RunStore
    data: RunData
    judgments: pd.DataFrame
    index: pd.DataFrame  # one row per unit, positional id = row number (`unit_id`)
    score_columns: list[str]
    _steps_at: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _judgments_at: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _scores_at: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _report: Report | None = field(default=None, repr=False)
    _sample_data: Any = field(default=None, repr=False)

    @classmethod
    def load(cls, uri: str) -> "ViewRun":
        rs = RunStore.at(uri)
        d = RunData.load(rs)
        judgments = rs.table("judgments").to_pandas()
        index, cols = unit_index(d)
        run = cls(rs, d, judgments, index, cols)
        # row positions per unit, computed once: a unit page is then a lookup, not a scan of the tables
        run._steps_at = _positions(d.steps)
        run._judgments_at = _positions(judgments)
        run._scores_at = _positions(d.scores)
        return run

    @property
    def run_id(self) -> str:
        return self.data.run_id

    @property
    def uri(self) -> str:
        return self.data.uri

    # --- one unit ---------------------------------------------------------------------------
    def unit_row(self, unit_id: int) -> pd.Series:
        if not 0 <= unit_id < len(self.index):
            raise ViewError(
                f"run {self.run_id} has units 0..{len(self.index) - 1}, not {unit_id}; open one from its samples page"
            )
        return self.index.iloc[unit_id]

    def steps_of(self, unit: str) -> pd.DataFrame:
        return self.data.steps.iloc[self._steps_at.get(unit, [])].sort_values("step")

    def judgments_of(self, unit: str) -> pd.DataFrame:
        return self.judgments.iloc[self._judgments_at.get(unit, [])].sort_values(["judge", "index"])

    def scores_of(self, unit: str) -> pd.DataFrame:
        return self.data.scores.iloc[self._scores_at.get(unit, [])]

    def find_unit(self, dataset: str, sample_id: str, method: str, repeat: int) -> int | None:
        hit = self.index[
            (self.index["dataset"] == dataset)
            & (self.index["sample_id"] == sample_id)
            & (self.index["method"] == method)
            & (self.index["repeat"] == repeat)
        ]
        return int(hit.index[0]) if len(hit) else None

    def siblings(self, unit_id: int) -> pd.DataFrame:
        """The same sample and repeat under the run's other methods (for side by side)."""
        r = self.unit_row(unit_id)
        i = self.index
        return i[
            (i["dataset"] == r["dataset"])
            & (i["sample_id"] == r["sample_id"])
            & (i["repeat"] == r["repeat"])
            & (i.index != unit_id)
        ]

    def sample_data(self) -> Any:
        """The run's samples (input and gold), reloaded once through its config (`memloop.jobs.results.sample_data`)."""
        if self._sample_data is None:
            from memloop.jobs.results.sample_data import load_sample_data

            self._sample_data = load_sample_data(self.store)
        return self._sample_data

    # --- the run page -----------------------------------------------------------------------
    def report(self) -> Report:
        """The report `memloop report` writes, built (not written: the viewer is read-only) once."""
        if self._report is None:
            self._report = build_report(self.data)
        return self._report

    def config(self) -> dict:
        return run_config(self.data)

    def invocations(self) -> list[dict[str, Any]]:
        runs = self.data.runs
        if runs.empty:
            return []
        runs = runs.sort_values("started_at")
        out = []
        for _, r in runs.iterrows():
            out.append(
                {
                    k: _plain(r.get(k))
                    for k in (
                        "invocation",
                        "code_version",
                        "model_digest",
                        "host",
                        "ray_job_id",
                        "started_at",
                        "finished_at",
                        "wall_s",
                        "samples",
                        "computed",
                        "skipped",
                        "failed",
                    )
                }
                | {k: _json(r.get(k)) for k in ("packages_json", "template_hashes_json", "stats_json", "identity_json")}
            )
        return out

    def lock(self) -> dict | None:
        """The run lock's holder while a process computes the run (read, never taken)."""
        try:
            return json.loads(self.store.store.get(self.store.name(LOCK_NAME)))
        except (NotFoundError, ValueError):
            return None

    def status_counts(self) -> list[dict[str, Any]]:
        s = self.data.samples
        return [{"status": st, "units": int(n)} for st, n in s["status"].value_counts().sort_index().items()]

    def root_causes(self) -> list[dict[str, Any]]:
        """Units not ok, grouped by status and recorded root cause (`samples.error`), most units first."""
        s = self.data.samples[self.data.samples["status"] != "ok"]
        if s.empty:
            return []
        g = s.assign(error=s["error"].fillna("(no error recorded)")).groupby(["status", "error"])
        rows = [
            {"status": st, "error": err, "units": len(u), "methods": sorted(set(u["method"]))} for (st, err), u in g
        ]
        return sorted(rows, key=lambda r: -r["units"])

    def length_buckets(self) -> dict[str, Any]:
        return length_buckets(self.data)


def _positions(df: pd.DataFrame) -> dict[str, np.ndarray]:
    if df.empty:
        return {}
    return {k: v for k, v in df.groupby("unit", sort=False).indices.items()}


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, pd.Timestamp):
        return v.isoformat(timespec="seconds")
    return v.item() if hasattr(v, "item") else v


def _json(v: Any) -> Any:
    return json.loads(v) if isinstance(v, str) and v else None


def unit_index(d: RunData) -> tuple[pd.DataFrame, list[str]]:
    """The samples page's rows: every unit with its counts and one column per (judge, metric)."""
    s = d.samples.reset_index(drop=True)
    if "input_tokens" not in s:  # a run written before the column existed
        s["input_tokens"] = pd.NA
    st = d.steps
    failed = st[st["error"].notna()].groupby("unit").size() if not st.empty else pd.Series(dtype=int)
    idx = s[["unit"] + list(c for c in BASE_COLUMNS if c != "failed_steps") + ["error"]].copy()
    idx["failed_steps"] = idx["unit"].map(failed).fillna(0).astype(int)
    # the outcomes of the unit's steps (`memloop.eval.methods.outcomes`), for the step-outcome filter
    outcomes = (
        st.dropna(subset=["outcome"]).groupby("unit")["outcome"].agg(lambda o: ",".join(sorted(set(o))))
        if not st.empty and "outcome" in st
        else pd.Series(dtype=str)
    )
    idx["outcomes"] = idx["unit"].map(outcomes).fillna("")
    u = unit_values(d.scores)
    cols: list[str] = []
    if not u.empty:
        u = u.assign(column=[score_column(j, m) for j, m in zip(u["judge"], u["metric"])])
        wide = u.pivot_table(index=PAIR, columns="column", values="value", aggfunc="first").reset_index()
        cols = sorted(c for c in wide.columns if c not in PAIR)
        idx = idx.merge(wide, on=PAIR, how="left")
    return idx, cols


# ---------------------------------------------------------------------------------------------
# the samples page's query


@dataclass(frozen=True)
class Query:
    method: str = ""
    dataset: str = ""
    status: str = ""
    steps: str = ""  # one of STEP_OUTCOMES, or "" for any
    score: str = ""  # a score column the range applies to
    min: float | None = None
    max: float | None = None
    q: str = ""  # a substring of the sample id
    cause: str = ""  # a failed (or n/a) unit's recorded root cause, exactly as the run page lists it
    sort: str = ""
    desc: bool = False
    page: int = 1
    size: int = 50

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> "Query":
        def num(name: str) -> float | None:
            v = (params.get(name) or "").strip()
            if not v:
                return None
            try:
                return float(v)
            except ValueError:
                raise ViewError(f"{name}={v!r} is not a number; give the score bound as e.g. 0.5") from None

        def whole(name: str, default: int) -> int:
            v = (params.get(name) or "").strip()
            try:
                return int(v) if v else default
            except ValueError:
                raise ViewError(f"{name}={v!r} is not a whole number") from None

        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:  # a misspelt filter would otherwise show every unit as if it matched
            raise ViewError(f"the samples page has no parameter {', '.join(unknown)}; use {', '.join(sorted(known))}")
        return cls(
            cause=params.get("cause", ""),
            method=params.get("method", ""),
            dataset=params.get("dataset", ""),
            status=params.get("status", ""),
            steps=params.get("steps", ""),
            score=params.get("score", ""),
            min=num("min"),
            max=num("max"),
            q=(params.get("q") or "").strip(),
            sort=params.get("sort", ""),
            desc=params.get("desc", "") in ("1", "true", "on"),
            page=max(1, whole("page", 1)),
            size=whole("size", 50),
        )

    def params(self, **changes: Any) -> dict[str, str]:
        """This query's parameters with some changed, for links (empty ones left out)."""
        out = {
            k: getattr(self, k)
            for k in (
                "method",
                "dataset",
                "status",
                "steps",
                "cause",
                "score",
                "min",
                "max",
                "q",
                "sort",
                "desc",
                "page",
                "size",
            )
        } | changes
        return {k: ("1" if v is True else str(v)) for k, v in out.items() if v not in ("", None, False)}


def step_choices(run: ViewRun) -> list[str]:
    """The step filter's values: any / no failed step, then each step outcome the run's steps have."""
    seen = sorted({o for os_ in run.index["outcomes"] for o in os_.split(",") if o})
    return list(STEP_OUTCOMES) + seen


def cause_choices(run: ViewRun) -> list[str]:
    """The cause filter's values: the recorded root causes of the units that are not ok."""
    i = run.index
    return sorted(set(i.loc[(i["status"] != "ok") & i["error"].notna(), "error"]))


def select(run: ViewRun, query: Query) -> tuple[pd.DataFrame, int]:
    """(the page of units, how many match) for `query`."""
    i = run.index
    if query.size not in PAGE_SIZES:
        raise ViewError(f"size={query.size}: pages hold {', '.join(map(str, PAGE_SIZES))} units")
    mask = np.ones(len(i), bool)
    for col in ("method", "dataset", "status"):
        v = getattr(query, col)
        if v:
            mask &= (i[col] == v).to_numpy()
    if query.steps:
        choices = step_choices(run)
        if query.steps not in choices:
            raise ViewError(f"steps={query.steps!r}: choose one of {', '.join(choices)}")
        if query.steps in STEP_OUTCOMES:
            failed = (i["failed_steps"] > 0).to_numpy()
            mask &= failed if query.steps == STEP_OUTCOMES[0] else ~failed
        else:  # units with at least one step of this outcome
            mask &= i["outcomes"].str.split(",").apply(lambda o: query.steps in o).to_numpy(bool)
    if query.cause:
        causes = cause_choices(run)
        if query.cause not in causes:
            raise ViewError(
                f"cause={query.cause[:200]!r}: no unit of this run failed with it; the run's causes are "
                "on its run page (Root causes)"
            )
        mask &= (i["error"] == query.cause).to_numpy(bool)
    if query.min is not None or query.max is not None:
        if query.score not in run.score_columns:
            raise ViewError(
                f"a score range needs a score column; this run has {', '.join(run.score_columns) or 'no scores'}"
            )
        v = i[query.score].to_numpy(float)
        if query.min is not None:
            mask &= v >= query.min  # NaN (unscored) compares False: out of any range
        if query.max is not None:
            mask &= v <= query.max
    if query.q:
        mask &= i["sample_id"].str.contains(query.q, case=False, regex=False).to_numpy()
    hit = i[mask]
    if query.sort:
        if query.sort not in BASE_COLUMNS and query.sort not in run.score_columns:
            raise ViewError(f"sort={query.sort!r}: sort by one of the table's columns")
        hit = hit.sort_values(query.sort, ascending=not query.desc, kind="stable", na_position="last")
    start = (query.page - 1) * query.size
    return hit.iloc[start : start + query.size], len(hit)


# ---------------------------------------------------------------------------------------------
# scores by input length


def bucket_of(tokens: Any) -> tuple[int, str]:
    """(sort key, label) of the power-of-two input-length bucket (the long-context suites' lengths:
    RULER's 4k, 8k, 16k ...; LongBench-E's 0-4k, 4-8k, 8k+ are unions of these)."""
    if tokens is None or pd.isna(tokens):
        return (1 << 62, "not recorded")
    hi = 1 << max(8, math.ceil(math.log2(max(int(tokens), 1))))
    return hi, f"{_k(hi // 2 if hi > 256 else 0)}–{_k(hi)}"


def _k(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def length_buckets(d: RunData) -> dict[str, Any]:
    """The report's figures (`figures_of`: each judge's aggregation per repeat, then mean ± se) over
    the units of each input-length bucket: {"buckets": [(label, units)], "rows": [{method, dataset,
    metric, cells: {label: figure}}]}."""
    s = d.samples
    if s.empty:
        return {"buckets": [], "rows": []}
    tokens = s["input_tokens"] if "input_tokens" in s else pd.Series([None] * len(s), index=s.index)
    keys = [bucket_of(t) for t in tokens]
    labels = dict(sorted(set(keys)))
    bucket = pd.Series([k[1] for k in keys], index=s.index)
    # a bucket's own RunData: its samples and their scores (no steps: the cost figures' token counts
    # come from the samples table; the paper's prefix hit needs prompts and stays out)
    no_prompts = PromptTokenizer(lambda text: [], "not counted per bucket")
    rows: dict[tuple[str, str, str], dict[str, Any]] = {}
    order = []
    for hi, label in sorted(labels.items()):
        part = s[bucket == label]
        units = set(part["unit"])
        sub = RunData(
            d.uri,
            d.run_id,
            part,
            d.steps.iloc[0:0],
            d.scores[d.scores["unit"].isin(units)],
            d.runs,
            judge_failures=d.judge_failures[d.judge_failures["unit"].isin(units)]
            if not d.judge_failures.empty
            else d.judge_failures,
        )
        sub.derived["tokenizer"] = no_prompts
        order.append((label, len(part)))
        for f in figures_of(sub):
            if f["metric"] == "prefix_hit_paper":
                continue
            key = (f["method"], f["dataset"], score_column(f["judge"], f["metric"]) if f["judge"] else f["metric"])
            rows.setdefault(key, {"method": key[0], "dataset": key[1], "metric": key[2], "cells": {}})
            rows[key]["cells"][label] = f
    return {"buckets": order, "rows": [rows[k] for k in sorted(rows)]}


__all__ = [
    "ViewRun",
    "Query",
    "select",
    "step_choices",
    "cause_choices",
    "length_buckets",
    "bucket_of",
    "unit_index",
    "NOT_APPLICABLE",
]
