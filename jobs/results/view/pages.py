"""The viewer's pages as HTML strings, shared by the server (`app`) and the static bundle (`bundle`).

Templates are Jinja2 with autoescaping forced on: every value a run recorded (model outputs, prompts,
memories, book text, error messages) is text, never markup. The report's and the comparison's
Markdown is rendered by markdown-it with raw HTML off, so a table cell holding `<script>` shows it.
Links come from a `Links` object: absolute routes for the server, relative files for the bundle.
"""

from __future__ import annotations

import json
import math
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable
from urllib.parse import quote, urlencode

import jinja2
import pandas as pd
from markdown_it import MarkdownIt
from memloop.jobs.results.view.gold import gold_view
from memloop.jobs.results.view.runs import BASE_COLUMNS, PAGE_SIZES, Query, ViewRun, cause_choices, select, step_choices
from memloop.jobs.results.view.timeline import timeline, verdicts

if TYPE_CHECKING:
    from memloop.jobs.results.view.log_dir import RunsQuery

TEMPLATES = Path(__file__).with_name("templates")
_MD = MarkdownIt("commonmark", {"html": False}).enable("table")


def markdown(text: str) -> str:
    return _MD.render(text)


class Links:
    """Where each page lives. The server's routes; `BundleLinks` overrides for files on disk."""

    static = False
    # the viewer's runs (`Pages.runs`, the same list): a link names a run by its id, so it can be shared and
    # stays right when the runs list grows or is sorted
    runs: list[ViewRun] = []

    def _id(self, r: int) -> str:
        return quote(self.runs[r].run_id, safe="")

    def home(self) -> str:
        return "/"

    def runs_list(self, params: dict[str, str] | None = None) -> str:
        return "/" + (f"?{urlencode(params)}" if params else "")

    def run(self, r: int) -> str:
        return f"/run/{self._id(r)}/"

    def plot_base(self, r: int) -> str:
        return f"/run/{self._id(r)}/"  # the report's Markdown names its plots relative to the run page

    def samples(self, r: int, params: dict[str, str] | None = None) -> str:
        return f"/run/{self._id(r)}/samples" + (f"?{urlencode(params)}" if params else "")

    def unit(self, r: int, i: int) -> str:
        return f"/run/{self._id(r)}/unit/{i}"

    def unit_json(self, r: int, i: int) -> str:
        return f"/run/{self._id(r)}/unit/{i}.json"

    def side(self, a: tuple[int, int], b: tuple[int, int]) -> str:
        return f"/side?{urlencode({'a': f'{self.runs[a[0]].run_id}:{a[1]}', 'b': f'{self.runs[b[0]].run_id}:{b[1]}'})}"

    def compare(self, a: int, b: int) -> str | None:
        return f"/compare?{urlencode({'a': self.runs[a].run_id, 'b': self.runs[b].run_id})}"

    def compare_plot(self, a: int, b: int, name: str) -> str:
        return f"/compare/{self._id(a)}/{self._id(b)}/{name}"


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return str(v)


def _figure(f: dict[str, Any] | None) -> str:
    """A report figure (mean, se over repeats) as the report prints one."""
    if not f or f.get("mean") is None:
        return "–"
    m, se = f["mean"], f.get("se")
    return f"{m:.3f}" if se is None else f"{m:.3f} ± {se:.3f}"


def _json_text(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, indent=1, sort_keys=True, ensure_ascii=False, default=str)


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(fmt=_fmt, figure=_figure, json_text=_json_text)
    return env


RESCAN_S = 2.0  # the runs list looks at its folders again at most this often


@dataclass
class Pages:
    runs: list[ViewRun]
    links: Links
    env: jinja2.Environment
    _rows: list[dict[str, Any]] | None = None  # the runs list's rows, computed on first view
    # the folders (and runs) the viewer was given: scanned again so that a run added later appears
    sources: list[str] = field(default_factory=list)
    _scanned: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def of(cls, runs: list[ViewRun], links: Links | None = None, sources: list[str] | None = None) -> "Pages":
        links = links or Links()
        links.runs = runs
        return cls(runs, links, environment(), sources=list(sources or []), _scanned=time.monotonic())

    def rescan(self, force: bool = False) -> None:
        """Load the runs that appeared in the viewer's folders since the last look (a run that cannot be read
        yet, e.g. one still writing its first shard, is tried again next time)."""
        from memloop.jobs.results.view.log_dir import expand

        from memloop.errors import MemloopError

        if not self.sources or (not force and time.monotonic() - self._scanned < RESCAN_S):
            return
        with self._lock:
            self._scanned = time.monotonic()
            try:
                uris = expand(self.sources)
            except MemloopError:
                return
            known = {run.uri for run in self.runs}
            for uri in uris:
                if uri in known:
                    continue
                try:
                    self.runs.append(ViewRun.load(uri))
                except MemloopError:
                    continue
                self._rows = None

    def index_of(self, run_id: str) -> int:
        """The run with this id (rescanning the folders once when it is not held yet)."""
        from memloop.jobs.results.view.errors import ViewNotFound

        for attempt in (0, 1):
            for r, run in enumerate(self.runs):
                if run.run_id == run_id:
                    return r
            if attempt == 0:
                self.rescan(force=True)
        raise ViewNotFound(f"this viewer holds no run {run_id!r}; the runs list (/) shows the runs it holds")

    def _render(self, name: str, **ctx: Any) -> str:
        return self.env.get_template(name).render(
            links=self.links, runs=self.runs, nonce=secrets.token_urlsafe(12), **ctx
        )

    def run_of(self, r: int) -> ViewRun:
        from memloop.jobs.results.view.errors import ViewError

        if not 0 <= r < len(self.runs):
            raise ViewError(f"the viewer holds {len(self.runs)} runs, not a run number {r}")
        return self.runs[r]

    def home(self, query: "RunsQuery | None" = None) -> str:
        """The runs list: one row per run, sorted and filtered by `query` (`memloop.jobs.results.view.log_dir`)."""
        from memloop.jobs.results.view.log_dir import COLUMNS, LABELS, STATUSES, RunsQuery, run_row, select_runs

        query = query or RunsQuery()
        self.rescan()
        if self._rows is None:
            self._rows = [run_row(r, run) for r, run in enumerate(self.runs)]
        shown = select_runs(self._rows, query)
        return self._render(
            "home.html",
            title="memloop view",
            rows=shown,
            query=query,
            columns=COLUMNS,
            labels=LABELS,
            statuses=STATUSES,
            total=len(self._rows),
        )

    def run(self, r: int) -> str:
        run = self.run_of(r)
        rep = run.report()
        return self._render(
            "run.html",
            title=f"run {run.run_id}",
            r=r,
            run=run,
            report_html=markdown(rep.markdown),
            config=json.dumps(run.config(), indent=1, sort_keys=True),
            lock=run.lock(),
            invocations=run.invocations(),
            statuses=run.status_counts(),
            causes=run.root_causes(),
            lengths=run.length_buckets(),
        )

    def samples(self, r: int, query: Query) -> str:
        run = self.run_of(r)
        if self.links.static:  # one page of every unit; the page's script filters and sorts
            rows, total = run.index, len(run.index)
        else:
            rows, total = select(run, query)
        i = run.index
        return self._render(
            "samples.html",
            title=f"samples of {run.run_id}",
            r=r,
            run=run,
            q=query,
            rows=list(zip(rows.index.tolist(), rows.to_dict("records"))),
            total=total,
            pages=max(1, math.ceil(total / query.size)),
            columns=list(BASE_COLUMNS) + run.score_columns,
            sizes=PAGE_SIZES,
            outcomes=step_choices(run),
            causes=cause_choices(run),
            methods=sorted(set(i["method"])),
            datasets=sorted(set(i["dataset"])),
            statuses=sorted(set(i["status"])),
        )

    def unit_data(self, r: int, i: int) -> dict[str, Any]:
        run = self.run_of(r)
        row = run.unit_row(i)
        steps = timeline(run, row["unit"])
        return {
            "run_id": run.run_id,
            "unit": row["unit"],
            "row": {k: _plain(v) for k, v in row.items()},
            "steps": [dict(s, diff=vars(s["diff"])) for s in steps],
            "verdicts": verdicts(run, row["unit"]),
            "gold": gold_view(run, dict(row)),
        }

    def unit(self, r: int, i: int) -> str:
        run = self.run_of(r)
        row = dict(run.unit_row(i))
        sample = run.data.samples.iloc[i]
        others = [(int(j), m) for j, m in run.siblings(i)["method"].items()]
        elsewhere = [
            (s, j)
            for s, other in enumerate(self.runs)
            if s != r
            for j in [other.find_unit(row["dataset"], row["sample_id"], row["method"], int(row["repeat"]))]
            if j is not None
        ]
        return self._render(
            "unit.html",
            title=f"{row['sample_id']} · {row['method']}",
            r=r,
            i=i,
            run=run,
            row=row,
            output=_output(sample.get("output_json")),
            started=sample.get("started_at"),
            finished=sample.get("finished_at"),
            steps=timeline(run, row["unit"]),
            verdicts=verdicts(run, row["unit"]),
            gold=gold_view(run, row),
            others=others,
            elsewhere=elsewhere,
        )

    def side(self, a: tuple[int, int], b: tuple[int, int]) -> str:
        sides = []
        for r, i in (a, b):
            run = self.run_of(r)
            row = dict(run.unit_row(i))
            sides.append({"r": r, "i": i, "run": run, "row": row, "steps": timeline(run, row["unit"])})
        return self._render(
            "side.html", title="side by side", sides=sides, rows=align(sides[0]["steps"], sides[1]["steps"])
        )

    def compare(self, a: int, b: int) -> str:
        from memloop.jobs.results.compare import CompareError, compare_runs, to_markdown

        ra, rb = self.run_of(a), self.run_of(b)
        try:
            c = compare_runs(ra.data, rb.data)
        except CompareError as exc:
            return self._render("compare.html", title="compare", a=a, b=b, error=str(exc), body="", plots=[])
        return self._render(
            "compare.html",
            title="compare",
            a=a,
            b=b,
            error=None,
            body=markdown(to_markdown(c)),
            plots=sorted(compare_plots(ra, rb)),
        )


def compare_plots(ra: ViewRun, rb: ViewRun) -> dict[str, bytes]:
    """`memloop compare`'s plots of two runs (computed on each request: a comparison is not cached)."""
    import matplotlib

    matplotlib.use("Agg")
    from memloop.jobs.results.compare import compare_runs, plots

    return plots(ra.data, rb.data, compare_runs(ra.data, rb.data))


def align(left: list[dict], right: list[dict]) -> list[dict[str, Any]]:
    """Rows of two timelines aligned by the chunk read (steps without a chunk, e.g. a final answer or a
    merge, follow in their own order after the chunks)."""

    def by_chunk(steps: list[dict]) -> dict[Any, list[dict]]:
        out: dict[Any, list[dict]] = {}
        for s in steps:
            key = ("chunk", s["chunk_index"]) if s["chunk_index"] is not None else ("after", s["kind"])
            out.setdefault(key, []).append(s)
        return out

    lb, rb = by_chunk(left), by_chunk(right)
    chunks = sorted({k for k in (*lb, *rb) if k[0] == "chunk"}, key=lambda k: k[1])
    rest = list(dict.fromkeys(k for k in (*lb, *rb) if k[0] == "after"))
    return [
        {"label": f"chunk {k[1]}" if k[0] == "chunk" else str(k[1]), "left": lb.get(k, []), "right": rb.get(k, [])}
        for k in chunks + rest
    ]


def _output(text: Any) -> dict[str, Any] | None:
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return {"answer": text}


def jsonable(v: Any) -> Any:
    """`v` with what JSON cannot hold made plain: NaN and NA as null, numpy scalars, timestamps as ISO text."""
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [jsonable(x) for x in v]
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if hasattr(v, "item"):
        return jsonable(v.item())
    return v


def _plain(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


Render = Callable[..., str]
