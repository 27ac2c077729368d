"""A folder of runs as the viewer's runs list (`memloop view DIR`, like `inspect view --log-dir DIR`).

`expand` turns each argument into run URIs: a run (`OUTPUT/RUN_ID`) is itself; a folder (local or
gs://, e.g. a config's `output`) stands for every run directly inside it. `MEMLOOP_LOG_DIR` is the
folder when no argument is given. `runs_rows` is one row per run (id, model, judge, methods, datasets,
date, duration, status, headline score) and `RunsQuery` sorts and filters them server-side.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Mapping

from memloop.jobs.errors import StorageError
from memloop.jobs.results.view.errors import ViewError
from memloop.jobs.store.outputs import join_uri, open_store
from memloop.jobs.store.run_store import RunStore

if TYPE_CHECKING:
    from memloop.jobs.results.view.runs import ViewRun

LOG_DIR_ENV = "MEMLOOP_LOG_DIR"
# the score first after the id, so it is in view on a laptop's screen (the text columns wrap)
COLUMNS = ("run_id", "headline", "status", "model", "judge", "methods", "datasets", "date", "duration_s")
# the column headings a user reads (and may type in ?sort=): label -> column
LABELS = {"run_id": "run id", "headline": "score", "duration_s": "duration"}
SORT_NAMES = {
    **{label: c for c, label in LABELS.items()},
    "run-id": "run_id",
    "id": "run_id",
    "duration": "duration_s",
    "headline": "headline",
}
STATUSES = ("running", "failed units", "incomplete", "ok")


def expand(uris: list[str]) -> list[str]:
    """Run URIs of the arguments (or of MEMLOOP_LOG_DIR when there are none), in the order given."""
    if not uris:
        folder = os.environ.get(LOG_DIR_ENV)
        if not folder:
            raise ViewError(f"give a run URI or a folder of runs (e.g. ./runs), or set {LOG_DIR_ENV}")
        uris = [folder]
    out: list[str] = []
    for uri in uris:
        try:
            out.append(RunStore.at(uri).uri)
            continue
        except StorageError as exc:
            not_a_run = exc
        store = open_store(uri)
        found = [join_uri(store.uri, c) for c in store.children("") if store.list(f"{c}/runs")]
        if not found:
            raise ViewError(
                f"{uri} is neither a run nor a folder holding runs ({not_a_run}); give OUTPUT/RUN_ID "
                "as printed by `memloop run`, or the `output` folder of a config"
            )
        out += found
    return list(dict.fromkeys(out))


def _headline(run: "ViewRun") -> tuple[str, float | None]:
    """The run's first judge metric (SUMIE: F1 at the last turn) per method, and the best of them."""
    from memloop.jobs.results.figures import score_figures

    figs = [f for f in score_figures(run.data)[0] if f.get("mean") is not None]
    if not figs:
        return "", None
    judge = figs[0]["judge"]
    metrics = [f["metric"] for f in figs if f["judge"] == judge]
    metric = "f1:last" if "f1:last" in metrics else metrics[0]
    chosen = [f for f in figs if f["judge"] == judge and f["metric"] == metric]
    parts = ", ".join(f"{f['method']} {f['mean']:.3f}" for f in chosen)
    return f"{judge} {metric}: {parts}", max(f["mean"] for f in chosen)


def run_row(r: int, run: "ViewRun") -> dict[str, Any]:
    from memloop.jobs.results.figures import figures_of
    from memloop.jobs.results.run_models import models_of

    runs = run.data.runs
    samples = run.data.samples
    models = models_of(run.data)
    cfg = run.config()
    if run.lock() is not None:
        status = "running"
    elif (samples["status"] == "failed").any():
        status = "failed units"
    elif any(f.get("incomplete") for f in figures_of(run.data)):
        status = "incomplete"
    else:
        status = "ok"
    text, best = _headline(run)
    wall = runs["wall_s"].dropna().sum() if "wall_s" in runs else 0.0
    return {
        "r": r,
        "run_id": run.run_id,
        "uri": run.uri,
        "model": models.get("model", ""),
        "judge": models.get("judge", "") if cfg.get("judges") else "",
        "methods": ", ".join(sorted(samples["method"].unique())),
        "datasets": ", ".join(sorted(samples["dataset"].unique())),
        "date": runs["started_at"].min().strftime("%Y-%m-%d %H:%M") if len(runs) else "",
        "duration_s": float(wall),
        "status": status,
        "headline": text,
        "headline_value": best,
        "units": len(samples),
    }


@dataclass(frozen=True)
class RunsQuery:
    q: str = ""  # a substring of any text column
    status: str = ""  # one of STATUSES, or "" for any
    sort: str = "date"
    desc: bool = True

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> "RunsQuery":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ViewError(f"the runs list has no parameter {', '.join(unknown)}; use {', '.join(sorted(known))}")
        sort = params.get("sort") or "date"
        sort = SORT_NAMES.get(sort.strip().lower(), sort)  # the headings' names too: ?sort=duration, ?sort=score
        if sort not in COLUMNS:
            raise ViewError(
                f"sort={sort!r}: sort by one of {', '.join(COLUMNS)} (or the headings' names: "
                f"{', '.join(LABELS.values())})"
            )
        status = params.get("status", "")
        if status and status not in STATUSES:
            raise ViewError(f"status={status!r}: filter by one of {', '.join(STATUSES)}")
        desc = params.get("desc", "1" if sort == "date" else "0") in ("1", "true", "on")
        return cls(q=(params.get("q") or "").strip(), status=status, sort=sort, desc=desc)

    def params(self, **changes: Any) -> dict[str, str]:
        out = {"q": self.q, "status": self.status, "sort": self.sort, "desc": "1" if self.desc else "0"}
        out.update({k: ("1" if v is True else "0" if v is False else str(v)) for k, v in changes.items()})
        return {k: v for k, v in out.items() if v}


def select_runs(rows: list[dict[str, Any]], query: RunsQuery) -> list[dict[str, Any]]:
    text = query.q.lower()
    keep = [
        r
        for r in rows
        if (not query.status or r["status"] == query.status)
        and (not text or any(text in str(r[c]).lower() for c in ("run_id", "model", "judge", "methods", "datasets")))
    ]
    key = "headline_value" if query.sort == "headline" else query.sort

    def order(r: dict[str, Any]) -> tuple[int, Any]:
        v = r[key]
        missing = v is None or (isinstance(v, float) and math.isnan(v)) or v == ""
        return (1 if missing else 0, v if not missing else 0)

    present = sorted((r for r in keep if not order(r)[0]), key=lambda r: r[key], reverse=query.desc)
    return present + [r for r in keep if order(r)[0]]  # runs without the value last, either way
