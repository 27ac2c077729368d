"""Several runs side by side (`memloop compare A B C ...`, and `memloop run --report` on a config with
`models:`): every figure of each run over the units that are ok in all of them, and each run's delta
against the first with the paired bootstrap interval of `jobs.results.compare` (same pairing, same
per-unit values, same resampling; this module only lines the runs up). Columns are named by the run's
model (`jobs.run.config.model_label`), so a config's models read as a table of models.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field
from functools import reduce
from typing import Any

import pandas as pd

from eval.judges.cost import cost_index, usage_of
from jobs.results.compare import (PAIR, CompareError, Row, _f, _ok_units, load, paired_mean_delta, run_label,
                                  unit_scores)
from jobs.results.report import RunData, markdown_table
from jobs.store.storage import join_uri, open_store


@dataclass
class SideBySide:
    uris: list[str]
    run_ids: list[str]
    labels: list[str]
    shared_units: int
    rows: list[dict[str, Any]]  # dataset, method, judge, metric, n, values (one per run), deltas vs the first
    pairs: list[list[Row]] = field(default_factory=list)  # per run after the first: its Rows against the first

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), pairs=[[asdict(r) for r in p] for p in self.pairs])


def _labels(runs: list[RunData]) -> list[str]:
    labels = [run_label(d) for d in runs]
    return [f"{lab} ({d.run_id})" if labels.count(lab) > 1 else lab for lab, d in zip(labels, runs)]


def _lined_up(frames: list[pd.DataFrame], on: list[str], column: str) -> pd.DataFrame:
    renamed = [f.rename(columns={column: f"v{i}"})[on + [f"v{i}"]] for i, f in enumerate(frames)]
    return reduce(lambda a, b: a.merge(b, on=on), renamed).dropna()


def _row(key: dict[str, Any], g: pd.DataFrame, n_runs: int) -> tuple[dict[str, Any], list[Row]]:
    vals = [g[f"v{i}"].to_numpy(float) for i in range(n_runs)]
    pairs = []
    for v in vals[1:]:
        delta, lo, hi = paired_mean_delta(vals[0], v)
        pairs.append(Row(key["dataset"], key["method"], key["judge"], key["metric"], len(g), float(vals[0].mean()),
                         float(v.mean()), delta, lo, hi))
    return (dict(key, n=len(g), values=[float(v.mean()) for v in vals],
                 deltas=[[p.delta, p.delta_lo, p.delta_hi] for p in pairs]), pairs)


def side_by_side(runs: list[RunData]) -> SideBySide:
    if len(runs) < 2:
        raise CompareError("side by side needs at least two runs")
    shared = reduce(set.__and__, (set(map(tuple, d.ok[PAIR].values.tolist())) for d in runs))
    if not shared:
        raise CompareError(f"runs {', '.join(d.run_id for d in runs)} share no unit that is ok in all of them (paired "
                           "by dataset, sample_id, method and repeat); compare runs of the same datasets and methods")
    rows: list[dict[str, Any]] = []
    pairs: list[list[Row]] = [[] for _ in runs[1:]]

    def add(key: dict[str, Any], g: pd.DataFrame) -> None:
        row, rs = _row(key, g, len(runs))
        rows.append(row)
        for p, r in zip(pairs, rs):
            p.append(r)

    scores = _lined_up([unit_scores(d) for d in runs], PAIR + ["judge", "metric"], "value")
    for (ds, method, judge, metric), g in scores.groupby(["dataset", "method", "judge", "metric"], sort=True):
        add(dict(dataset=ds, method=method, judge=judge, metric=metric), g)
    costs = []
    for d in runs:  # seed 002's cost index per unit, from its one home in eval.judges.cost
        u = _ok_units(d)
        costs.append(u[PAIR].assign(value=[cost_index(usage_of(p, c, dec)) for p, c, dec in
                                           zip(u["prompt_tokens"], u["cached_tokens"], u["decoded_tokens"])]))
    for (ds, method), g in _lined_up(costs, PAIR, "value").groupby(["dataset", "method"], sort=True):
        add(dict(dataset=ds, method=method, judge="", metric="cost_index"), g)
    return SideBySide([d.uri for d in runs], [d.run_id for d in runs], _labels(runs), len(shared), rows, pairs)


def to_markdown(s: SideBySide) -> str:
    parts = ["# Runs side by side", ""]
    parts += [f"- {lab}: `{rid}` (`{uri}`)" for lab, rid, uri in zip(s.labels, s.run_ids, s.uris)]
    parts += ["", f"{s.shared_units} units ok in every run (paired by dataset, sample, method, repeat); figures are "
              f"means over them, Δ is each run minus {s.labels[0]} with its 95% paired bootstrap interval.", ""]
    header = ["method", "dataset", "metric", "n"] + s.labels + [f"Δ {lab} − {s.labels[0]}" for lab in s.labels[1:]]
    body = []
    for r in s.rows:
        metric = f"{r['judge']}: {r['metric']}" if r["judge"] and r["judge"] != r["metric"] else r["metric"]
        body.append([r["method"], r["dataset"], metric, str(r["n"])] + [_f(v) for v in r["values"]]
                    + [f"{_f(d)} [{_f(lo)}, {_f(hi)}]" + ("" if lo <= 0 <= hi or math.isnan(lo) else " *")
                       for d, lo, hi in r["deltas"]])
    parts.append(markdown_table(header, body))
    return "\n".join(parts) + "\n"


def default_out(s: SideBySide) -> str:
    """`{first run}/side-by-side-{hash of the run ids}/`: one directory per set of runs."""
    digest = hashlib.sha256("|".join(s.run_ids).encode()).hexdigest()[:12]
    return join_uri(s.uris[0], f"side-by-side-{digest}")


def write(s: SideBySide, out: str | None = None) -> str:
    """side-by-side.md and side-by-side.json under `out` (default `default_out`); returns where."""
    store = open_store(out or default_out(s))
    store.put("side-by-side.md", to_markdown(s).encode(), mode="overwrite")
    store.put("side-by-side.json", json.dumps(s.to_dict(), default=str, indent=1).encode(), mode="overwrite")
    return store.uri


def write_side_by_side(uris: list[str], out: str | None = None) -> tuple[str, str]:
    """Load the runs, line them up and write the result; returns (where, the Markdown)."""
    s = side_by_side([load(u) for u in uris])
    return write(s, out), to_markdown(s)
