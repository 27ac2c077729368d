"""`memloop compare A B`: what changed from run A to run B, with paired bootstrap intervals.

Units are paired without their run id, by (dataset, sample_id, method, repeat), and counted by the
rule for means the report uses (`memloop.jobs.results.cells`, `memloop.eval.judges.aggregation`): a unit whose method
failed
scores the metric's zero (so a method that starts failing is a regression, not a smaller sample), a
unit failed for the infrastructure or left unjudged is left out and makes the row `incomplete`. For
every (dataset, method, judge, metric) the per-unit value is the judge's score; SUMIE's per-turn
metrics enter as start / last / avg per unit (`memloop.eval.judges.sumie.turn_summary`, as in the report;
a rule naming the bare metric, `f1`, reads the average over turns). The row reports the mean of A,
the mean of B, delta = mean(B − A) and a 95% paired bootstrap interval of the delta
(`memloop.eval.judges.aggregation.paired_difference`: a sample's repeats averaged, samples resampled with
replacement, fixed seed, so the same runs always give the same interval; the paper tables' Δ rows
call the same function).
Two headline numbers per (dataset, method) come from the token counts: `cost_index`, the mean per
unit of seed 002's cost index (`memloop.eval.judges.cost.cost_index`), and `radix_cache_hit`, the engine's
100 × Σcached / Σprompt (a ratio of sums, bootstrapped the same way; named as the report names it). The config diff
lists every flattened `config_json` key (plus the
code version and model digest) whose value differs between the runs' latest manifests.

`--fail-if` rules are `NAME.FIELD OP NUMBER`, parsed with a regular expression (never evaluated as
code): NAME is a metric (`f1`), `judge:metric`, `method/metric` or `method/judge:metric`; FIELD is
one of delta, delta_lo, delta_hi, a, b, n; OP one of < <= > >= == !=. A rule holds when it holds for
any row it names; a rule that names no row is an error (a typo must not pass silently).
"""

from __future__ import annotations

import io
import json
import math
import operator
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np
import pandas as pd
from memloop.eval.judges.aggregation import RESAMPLES, paired_difference, paired_mean_delta, paired_ratio_delta
from memloop.eval.judges.cost import cache_hit_rate, cost_index, usage_of
from memloop.jobs.errors import JobsError
from memloop.jobs.results import cells
from memloop.jobs.results.markdown import markdown_table
from memloop.jobs.results.run_data import RunData, run_config
from memloop.jobs.run.config import ModelSpec, model_label
from memloop.jobs.store.outputs import join_uri, open_store
from memloop.jobs.store.run_store import RunStore

PAIR = ["dataset", "sample_id", "method", "repeat"]
FIELDS = ("delta", "delta_lo", "delta_hi", "a", "b", "n")
OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "==": operator.eq,
    "!=": operator.ne,
}
EXIT_REGRESSION = 4  # a --fail-if rule held


class CompareError(JobsError):
    """Two runs cannot be compared as asked (no shared units, a bad --fail-if rule ...)."""


@dataclass
class Row:
    dataset: str
    method: str
    judge: str  # "" for the headline numbers
    metric: str
    n: int  # paired units
    a: float
    b: float
    delta: float
    delta_lo: float
    delta_hi: float
    incomplete: int = 0  # units left out on either side (infrastructure failure, judge failure)

    def names(self) -> set[str]:
        """What a --fail-if rule may call this row (the bare per-turn metric is its average over turns)."""
        metrics = {self.metric} | ({self.metric[: -len(":avg")]} if self.metric.endswith(":avg") else set())
        out = set()
        for m in metrics:
            jm = f"{self.judge}:{m}" if self.judge else m
            out |= {m, jm, f"{self.method}/{m}", f"{self.method}/{jm}"}
        return out

    @property
    def label(self) -> str:
        return f"{self.judge}: {self.metric}" if self.judge and self.judge != self.metric else self.metric


@dataclass
class Comparison:
    a_uri: str
    b_uri: str
    a_run: str
    b_run: str
    shared_units: int
    only_a: int
    only_b: int
    rows: list[Row]
    config_diff: list[dict[str, Any]]
    resamples: int = RESAMPLES
    failed_rules: list[str] = field(default_factory=list)
    incomplete: int = 0  # units left out of some row: an infrastructure or judge failure in A or B
    a_model: str = ""  # each run's model (`run_label`)
    b_model: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(asdict(self), rows=[asdict(r) for r in self.rows])


# ---------------------------------------------------------------------------------------------
# paired values and the bootstrap


def _ok_units(d: RunData) -> pd.DataFrame:
    return d.ok[PAIR + ["prompt_tokens", "cached_tokens", "decoded_tokens"]]


def score_rows(a: RunData, b: RunData) -> list[Row]:
    ca, _, _ = cells.score_cells(a.samples, a.scores, a.judge_failures)
    cb, _, _ = cells.score_cells(b.samples, b.scores, b.judge_failures)
    rows = []
    for key in sorted(set(ca) & set(cb)):
        ds, method, judge, metric = key[1], key[0], key[2], key[3]
        got = paired_difference(ca[key], cb[key])
        if not got["n"]:
            continue
        left_out = sum(1 for u in ca[key] + cb[key] if u.state == cells.INCOMPLETE)
        rows.append(
            Row(
                ds,
                method,
                judge,
                metric,
                got["n"],
                got["a"],
                got["b"],
                got["delta"],
                got["lo"] if got["lo"] is not None else math.nan,
                got["hi"] if got["hi"] is not None else math.nan,
                left_out,
            )
        )
    return sorted(rows, key=lambda r: (r.dataset, r.method, r.judge, r.metric))


def headline_rows(a: RunData, b: RunData) -> list[Row]:
    m = _ok_units(a).merge(_ok_units(b), on=PAIR, suffixes=("_a", "_b"))
    rows = []
    for (ds, method), g in m.groupby(["dataset", "method"], sort=True):
        col = {k: g[k].to_numpy(float) for k in g.columns if k.endswith(("_a", "_b"))}
        cost = {
            s: np.array(
                [
                    cost_index(usage_of(p, c, d))
                    for p, c, d in zip(col[f"prompt_tokens_{s}"], col[f"cached_tokens_{s}"], col[f"decoded_tokens_{s}"])
                ]
            )
            for s in "ab"
        }  # seed 002's formula, from its one home in memloop.eval.judges.cost
        delta, lo, hi = paired_mean_delta(cost["a"], cost["b"])
        rows.append(
            Row(ds, method, "", "cost_index", len(g), float(cost["a"].mean()), float(cost["b"].mean()), delta, lo, hi)
        )
        ca, pa_, cb, pb = (
            col["cached_tokens_a"],
            col["prompt_tokens_a"],
            col["cached_tokens_b"],
            col["prompt_tokens_b"],
        )
        if pa_.sum() > 0 and pb.sum() > 0:
            delta, lo, hi = paired_ratio_delta(ca, pa_, cb, pb)
            rows.append(
                Row(
                    ds,
                    method,
                    "",
                    "radix_cache_hit",
                    len(g),
                    100 * cache_hit_rate(usage_of(pa_.sum(), ca.sum(), 0)),
                    100 * cache_hit_rate(usage_of(pb.sum(), cb.sum(), 0)),
                    delta,
                    lo,
                    hi,
                )
            )
    return rows


# ---------------------------------------------------------------------------------------------
# config diff


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """{"a.b.0.c": leaf} of nested dicts and lists."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out if out or not prefix else {prefix: {}}
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}.{i}" if prefix else str(i)))
        return out if out or not prefix else {prefix: []}
    return {prefix: value}


def _latest_manifest(d: RunData) -> dict[str, Any]:
    if d.runs.empty:
        return {}
    row = d.runs.sort_values("finished_at").iloc[-1]
    out = flatten(json.loads(row["config_json"] or "{}"))
    out["(code_version)"] = row.get("code_version")
    out["(model_digest)"] = row.get("model_digest")
    return out


def config_diff(a: RunData, b: RunData) -> list[dict[str, Any]]:
    fa, fb = _latest_manifest(a), _latest_manifest(b)
    missing = object()
    out = []
    for k in sorted(set(fa) | set(fb)):
        va, vb = fa.get(k, missing), fb.get(k, missing)
        if va != vb:
            out.append({"key": k, "a": None if va is missing else va, "b": None if vb is missing else vb})
    return out


# ---------------------------------------------------------------------------------------------
# the comparison


def run_label(d: RunData) -> str:
    """The run's model as a short name (its latest invocation's `model`), else its run id."""
    model = run_config(d).get("model")
    return model_label(ModelSpec.model_validate(model)) if model else d.run_id


def compare_runs(a: RunData, b: RunData) -> Comparison:
    ua, ub = set(map(tuple, a.applicable[PAIR].values.tolist())), set(map(tuple, b.applicable[PAIR].values.tolist()))
    shared = ua & ub
    if not shared:
        raise CompareError(
            f"runs {a.run_id} and {b.run_id} share no unit (paired by dataset, sample_id, method "
            "and repeat); compare runs of the same datasets and methods"
        )
    rows = score_rows(a, b) + headline_rows(a, b)
    return Comparison(
        a.uri,
        b.uri,
        a.run_id,
        b.run_id,
        len(shared),
        len(ua - ub),
        len(ub - ua),
        rows,
        config_diff(a, b),
        incomplete=sum(r.incomplete for r in rows),
        a_model=run_label(a),
        b_model=run_label(b),
    )


def load(uri: str) -> RunData:
    return RunData.load(RunStore.at(uri))


# ---------------------------------------------------------------------------------------------
# --fail-if


_RULE = re.compile(
    r"^\s*(?P<name>[^\s.<>=!]+)\.(?P<field>[a-z_]+)\s*(?P<op><=|>=|==|!=|<|>)\s*"
    r"(?P<num>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*$"
)


@dataclass(frozen=True)
class Rule:
    text: str
    name: str
    field: str
    op: str
    value: float

    def holds(self, row: Row) -> bool:
        v = float(getattr(row, self.field))
        return not math.isnan(v) and OPS[self.op](v, self.value)


def parse_rule(text: str) -> Rule:
    m = _RULE.fullmatch(text)
    if not m:
        raise CompareError(
            f"--fail-if {text!r}: write NAME.FIELD OP NUMBER, e.g. 'f1.delta < -0.02' or 'booookscore.delta_hi < 0'"
        )
    if m["field"] not in FIELDS:
        raise CompareError(f"--fail-if {text!r}: unknown field {m['field']!r}; use one of {', '.join(FIELDS)}")
    return Rule(text.strip(), m["name"], m["field"], m["op"], float(m["num"]))


def failing(rules: list[Rule], rows: list[Row], strict: bool = True) -> list[str]:
    """The rules that hold, each with the rows where it holds. strict: a rule naming no row is an error."""
    out = []
    for rule in rules:
        named = [r for r in rows if rule.name in r.names()]
        if not named:
            if strict:
                known = sorted({n for r in rows for n in (r.metric, f"{r.judge}:{r.metric}" if r.judge else r.metric)})
                raise CompareError(
                    f"--fail-if {rule.text!r}: no metric is called {rule.name!r}; the runs have {', '.join(known)}"
                )
            continue
        hit = [r for r in named if rule.holds(r)]
        if hit:
            where = "; ".join(
                f"{r.method} {r.dataset} {r.label}: {rule.field} = {getattr(r, rule.field):.4g}" for r in hit
            )
            out.append(f"{rule.text} ({where})")
    return out


# ---------------------------------------------------------------------------------------------
# output: Markdown, JSON, plots


def _f(v: float, digits: int = 4) -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}g}"


def to_markdown(c: Comparison) -> str:
    parts = [
        f"# Compare `{c.a_run}` (A) → `{c.b_run}` (B)",
        "",
        f"A = `{c.a_uri}` (model {c.a_model})",
        "",
        f"B = `{c.b_uri}` (model {c.b_model})",
        "",
        f"{c.shared_units} units in both runs (paired by dataset, sample, method, repeat); "
        f"{c.only_a} only in A, {c.only_b} only in B. A unit whose method failed scores 0; "
        f"intervals: 95% paired bootstrap over samples, {c.resamples} resamples."
        + (
            f" INCOMPLETE: {c.incomplete} unit(s) left out of rows (infrastructure or judge failures)."
            if c.incomplete
            else ""
        ),
        "",
        "## Deltas (B − A)",
        "",
    ]
    rows = [
        [
            r.method,
            r.dataset,
            r.label,
            str(r.n),
            _f(r.a),
            _f(r.b),
            _f(r.delta),
            f"[{_f(r.delta_lo)}, {_f(r.delta_hi)}]",
            "" if r.delta_lo <= 0 <= r.delta_hi or math.isnan(r.delta_lo) else "*",
        ]
        for r in c.rows
    ]
    parts.append(markdown_table(["method", "dataset", "metric", "n", "A", "B", "delta", "95% interval", "≠0"], rows))
    parts += ["", "## Config diff", ""]
    if c.config_diff:
        parts.append(
            markdown_table(["key", "A", "B"], [[d["key"], f"`{d['a']}`", f"`{d['b']}`"] for d in c.config_diff])
        )
    else:
        parts.append("(identical configs, code version and model)")
    if c.failed_rules:
        parts += ["", "## Failed rules", ""] + [f"- {t}" for t in c.failed_rules]
    return "\n".join(parts) + "\n"


def _png(fig: Any) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def plot_deltas(c: Comparison) -> bytes | None:
    if not c.rows:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.35 * len(c.rows) + 1.2))
    ys = np.arange(len(c.rows))[::-1]
    d = np.array([r.delta for r in c.rows])
    err = np.array([[r.delta - r.delta_lo for r in c.rows], [r.delta_hi - r.delta for r in c.rows]])
    ax.errorbar(d, ys, xerr=np.nan_to_num(err), fmt="o", capsize=3)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set_yticks(ys, [f"{r.method} · {r.label}" for r in c.rows], fontsize=7)
    ax.set_xlabel("delta B − A (95% paired bootstrap interval)"), ax.set_title(f"{c.b_run} vs {c.a_run}")
    return _png(fig)


def plot_overlay(
    a: RunData,
    b: RunData,
    frame: Callable[[RunData], pd.DataFrame],
    x: str,
    y: str,
    xlabel: str,
    ylabel: str,
    title: str,
) -> bytes | None:
    """One line per method and run: A solid, B dashed, same colour."""
    fa, fb = frame(a), frame(b)
    if fa.empty and fb.empty:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method in sorted(set(fa.get("method", [])) | set(fb.get("method", []))):
        colour = None
        for f, style, tag in ((fa, "-", "A"), (fb, "--", "B")):
            g = f[f["method"] == method] if not f.empty else f
            if g.empty:
                continue
            per = g.groupby(x)[y].mean()
            line = ax.plot(per.index + 1, per.values, style, marker="o", color=colour, label=f"{method} [{tag}]")[0]
            colour = line.get_color()
    ax.set_xlabel(xlabel), ax.set_ylabel(ylabel), ax.set_title(title), ax.legend(fontsize=7)
    return _png(fig)


def plots(a: RunData, b: RunData, c: Comparison) -> dict[str, bytes]:
    import matplotlib

    matplotlib.use("Agg")
    out = {
        "deltas.png": plot_deltas(c),
        "f1_per_turn.png": plot_overlay(
            a,
            b,
            lambda d: d.scores[(d.scores["metric"] == "f1") & d.scores["turn"].notna()],
            "turn",
            "value",
            "turn (paragraphs read)",
            "F1",
            "SUMIE F1 per turn: A solid, B dashed",
        ),
        "tokens_per_step.png": plot_overlay(
            a,
            b,
            lambda d: d.steps,
            "step",
            "prompt_tokens",
            "step",
            "prompt tokens (mean)",
            "Prompt tokens per step: A solid, B dashed",
        ),
    }
    return {k: v for k, v in out.items() if v}


def default_out(b: RunData, a: RunData) -> str:
    return join_uri(b.uri, f"compare-{a.run_id}")


def write_comparison(a: RunData, b: RunData, c: Comparison, out: str | None = None) -> str:
    """compare.md, compare.json and the plots under `out` (default `{B}/compare-{A's run id}/`),
    rewritten by every compare; A's and B's own report files are never touched."""
    dest = out or default_out(b, a)
    store = open_store(dest)
    store.put("compare.md", to_markdown(c).encode(), mode="overwrite")
    store.put("compare.json", json.dumps(c.to_dict(), default=str, indent=1).encode(), mode="overwrite")
    for name, png in plots(a, b, c).items():
        store.put(name, png, mode="overwrite")
    return store.uri
