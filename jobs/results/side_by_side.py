"""Several runs side by side (`memloop compare A B C ...`, and `memloop run --report` on a config with
`models:`): the runs restricted to the units they all have, then each run after the first compared with
the first by `memloop compare`'s own rows (`score_rows`, `headline_rows`: the same pairing, the same
rule for failed and incomplete units, the same bootstrap). This module only lines the pairs up, so the
first run's figure is the same in every pair. Columns are named by the run's model
(`memloop.jobs.results.compare.run_label`), so a config's models read as a table of models.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from functools import reduce
from typing import Any

import pandas as pd
from memloop.jobs.results.compare import PAIR, CompareError, Row, _f, headline_rows, load, run_label, score_rows
from memloop.jobs.results.markdown import markdown_table
from memloop.jobs.results.run_data import RunData
from memloop.jobs.store.outputs import join_uri, open_store


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


def _restricted(d: RunData, units: pd.DataFrame) -> RunData:
    """The run with only the given units (dataset, sample_id, method, repeat) in its tables."""

    def keep(df: pd.DataFrame) -> pd.DataFrame:
        return df.merge(units, on=PAIR) if not df.empty else df

    return replace(d, samples=keep(d.samples), steps=keep(d.steps), scores=keep(d.scores), judgings=[], derived={})


def side_by_side(runs: list[RunData]) -> SideBySide:
    if len(runs) < 2:
        raise CompareError("side by side needs at least two runs")
    common = reduce(set.__and__, (set(map(tuple, d.applicable[PAIR].values.tolist())) for d in runs))
    if not common:
        raise CompareError(
            f"runs {', '.join(d.run_id for d in runs)} share no unit (paired by dataset, sample_id, "
            "method and repeat); compare runs of the same datasets and methods"
        )
    units = pd.DataFrame(sorted(common), columns=PAIR)
    units["repeat"] = units["repeat"].astype(runs[0].samples["repeat"].dtype)
    same = [_restricted(d, units) for d in runs]
    pairs = [score_rows(same[0], d) + headline_rows(same[0], d) for d in same[1:]]
    keys = sorted({(r.dataset, r.method, r.judge, r.metric) for p in pairs for r in p})
    by = [{(r.dataset, r.method, r.judge, r.metric): r for r in p} for p in pairs]
    rows = []
    for key in keys:
        got = [b.get(key) for b in by]
        first = next(r for r in got if r is not None)
        rows.append(
            dict(
                dataset=key[0],
                method=key[1],
                judge=key[2],
                metric=key[3],
                n=first.n,
                values=[first.a] + [r.b if r is not None else None for r in got],
                deltas=[[r.delta, r.delta_lo, r.delta_hi] if r is not None else None for r in got],
            )
        )
    return SideBySide([d.uri for d in runs], [d.run_id for d in runs], _labels(runs), len(common), rows, pairs)


def _delta(d: list[float] | None) -> str:
    if d is None:
        return "–"
    delta, lo, hi = d
    return f"{_f(delta)} [{_f(lo)}, {_f(hi)}]" + ("" if math.isnan(lo) or lo <= 0 <= hi else " *")


def to_markdown(s: SideBySide) -> str:
    parts = ["# Runs side by side", ""]
    parts += [f"- {lab}: `{rid}` (`{uri}`)" for lab, rid, uri in zip(s.labels, s.run_ids, s.uris)]
    parts += [
        "",
        f"{s.shared_units} units in every run (paired by dataset, sample, method, repeat); figures as "
        f"`memloop compare` computes them over those units, Δ each run minus {s.labels[0]} with its 95% "
        "paired bootstrap interval (* when it excludes 0).",
        "",
    ]
    header = ["method", "dataset", "metric", "n"] + s.labels + [f"Δ {lab} − {s.labels[0]}" for lab in s.labels[1:]]
    body = []
    for r in s.rows:
        metric = f"{r['judge']}: {r['metric']}" if r["judge"] and r["judge"] != r["metric"] else r["metric"]
        body.append(
            [r["method"], r["dataset"], metric, str(r["n"])]
            + [_f(v) if v is not None else "–" for v in r["values"]]
            + [_delta(d) for d in r["deltas"]]
        )
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
