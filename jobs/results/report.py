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
  served: radix-cache hit, prompt tokens (chat template included; the kept attempt of each step, retried attempts being the health table's retry overhead), net (prompt
  minus cached: reuse across samples and repeats included), decoded, and its cost index.
- Method health (`memloop.jobs.results.health`): per method and dataset, the steps by outcome, the units with a step
  that did not succeed, revisions proposed / accepted / rejected and the retry overhead; every figure
  whose steps did not succeed in more than `memloop.jobs.results.health.UNSUCCESSFUL_STEP_SHARE` of cases is marked
  with the share (paper tables, SUMIE and Scores tables, `report --json`).
Plots (PNG, matplotlib): F1 per turn, prompt and cached tokens per step, cost index against chunk size.

The formulas are `memloop.eval.judges`': start / last / avg per sample is `memloop.eval.judges.sumie.turn_summary`,
the mean over samples is the judge's declared aggregation (`memloop.eval.judges.aggregator`), the cache hit
rate and cost index are `memloop.eval.judges.cost`. This module only lays the figures out.
"""
from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable, Sequence

import pandas as pd

from memloop.eval.judges import aggregator
from memloop.eval.judges.aggregation import mean_se, paired_difference
from memloop.eval.judges.cost import PaperCost, cost_index, net_encoded, paper_sample_cost, per_sample_cost, usage_of
from memloop.eval.judges.sumie import METRICS as SUMIE_METRICS
from memloop.jobs.results import cells, health
from memloop.jobs.results.cells import TURN_SUMMARIES
from memloop.jobs.results.paper_tables import TABLES, PaperTable, layout, method_status
from memloop.jobs.store.lock import describe_holder
from memloop.jobs.store.run_store import RunStore

NOT_APPLICABLE = "n/a"


def fmt(values: list[float] | pd.Series, digits: int = 3) -> str:
    """mean ± s.e. of per-repeat values (the plots' and the overview's figures)."""
    m, se = mean_se(values)
    if math.isnan(m):
        return "–"
    return f"{m:.{digits}f}" if se is None else f"{m:.{digits}f} ± {se:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


@dataclass
class RunData:
    uri: str
    run_id: str
    samples: pd.DataFrame
    steps: pd.DataFrame
    scores: pd.DataFrame
    runs: pd.DataFrame
    judgings: list["Judging"] = field(default_factory=list)  # re-judgings of the run (`memloop rescore`)
    # the `judgments` rows of a judge that failed on a unit (unit columns, `judge`, `error`): a judge
    # that failed on every unit of a dataset keeps its columns, as incomplete
    judge_failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    # figures derived once per load and read by several tables (the paper's prefix hit tokenises
    # every recorded prompt: the Markdown, the plots and `headline` share one pass)
    derived: dict = field(default_factory=dict, repr=False, compare=False)
    # the lock holder of a run being computed now (its tables, and so every figure, are partial), else None
    computing: dict[str, Any] | None = None
    # a re-judging's judge model (`judged_by`): who judged these scores, in place of the run's own judge model
    judge_model: dict[str, Any] | None = None

    @classmethod
    def load(cls, rs: RunStore) -> "RunData":
        computing = rs.computing()  # read first: a run that finishes while loading was partial when read
        return cls(rs.uri, rs.run_id, rs.table("samples").to_pandas(), rs.table("steps").to_pandas(),
                   rs.table("scores").to_pandas(), rs.table("runs").to_pandas(),
                   [Judging.load(rs, jid) for jid in rs.judging_ids()], judge_failures_of(rs.table("judgments")),
                   computing=computing)

    def judged_by(self, j: "Judging") -> "RunData":
        """The run with a re-judging's scores in place of its own: every table of scores then reads
        them with the same code and the same denominators (the run's units)."""
        return replace(self, scores=j.scores, judgings=[], judge_failures=j.failures, derived={},
                       judge_model=j.settings.get("judge_model") or self.judge_model)

    @property
    def ok(self) -> pd.DataFrame:
        return self.samples[self.samples["status"] == "ok"]

    @property
    def applicable(self) -> pd.DataFrame:
        """Units a method applies to: all but the "n/a" ones (e.g. the long-context ceiling on an input
        longer than the model's context), which are counted apart and never as failures."""
        return self.samples[self.samples["status"] != NOT_APPLICABLE]


FAILURE_COLUMNS = ["unit", "dataset", "sample_id", "method", "repeat", "judge", "error"]


def judge_failures_of(judgments: Any) -> pd.DataFrame:
    """The rows of a `judgments` table (pyarrow) whose judge failed on the unit (`error` set)."""
    import pyarrow.compute as pc

    if judgments.num_rows == 0:
        return pd.DataFrame(columns=FAILURE_COLUMNS)
    return judgments.filter(pc.is_valid(judgments.column("error"))).select(FAILURE_COLUMNS).to_pandas()


@dataclass
class Judging:
    """A re-judging of the run (`memloop rescore`): its settings, its units' outcomes and its scores."""

    judging_id: str
    settings: dict  # {"judge": {name, options, tasks}, "judge_model": {...}, "tag": ...}
    judged: pd.DataFrame  # one row per unit judged again: status ok / failed
    scores: pd.DataFrame
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)  # as `RunData.judge_failures`

    @classmethod
    def load(cls, rs: RunStore, judging_id: str) -> "Judging":
        js = rs.judging(judging_id)
        runs = js.table("runs").to_pandas()
        settings = json.loads(runs.sort_values("finished_at").iloc[-1]["config_json"] or "{}") if not runs.empty else {}
        return cls(judging_id, settings, js.samples().to_pandas(), js.table("scores").to_pandas(),
                   judge_failures_of(js.table("judgments")))

    @property
    def label(self) -> str:
        judge = self.settings.get("judge") or {}
        opts = ", ".join(f"{k}={v}" for k, v in sorted((judge.get("options") or {}).items()))
        jm = self.settings.get("judge_model") or {}
        model = (f"endpoint {jm['endpoint']['model']!r} at {jm['endpoint']['base_url']}" if jm.get("kind") == "openai"
                 else "the run's model")
        return f"judge {judge.get('name', '?')}{f' ({opts})' if opts else ''}, judged by {model}"

    def summary(self) -> dict:
        st = self.judged["status"] if not self.judged.empty else pd.Series(dtype=str)
        return {"judging_id": self.judging_id, "judge": (self.settings.get("judge") or {}).get("name"),
                "options": (self.settings.get("judge") or {}).get("options") or {},
                "judge_model": self.settings.get("judge_model"), "label": self.label,
                "ok": int((st == "ok").sum()), "failed": int((st == "failed").sum())}


def per_repeat(df: pd.DataFrame, column: str, judge: str) -> list[float]:
    """One value per repeat: judge `judge`'s aggregation over the samples of that repeat (the plots)."""
    agg = aggregator(judge)
    return [agg(g[column]) for _, g in df.groupby("repeat", sort=True)]


UNIT_KEY = ["repeat", "sample_id"]


# ---------------------------------------------------------------------------------------------
# method health (`memloop.jobs.results.health`)


def health_rows(d: RunData) -> list[dict]:
    """Per (method, dataset): steps by outcome, units with a failed step, retry overhead (once per load)."""
    if "health" not in d.derived:
        d.derived["health"] = health.health_rows(d.samples, d.steps)
    return d.derived["health"]


def step_shares(d: RunData) -> dict[tuple[str, str], float]:
    return health.shares(health_rows(d))


def _marker(d: RunData, method: str, dataset: str) -> str:
    return health.marker(step_shares(d).get((method, dataset)))


def health_table(d: RunData) -> str | None:
    rows = health_rows(d)
    if not rows:
        return None
    header, body = health.health_cells(rows)
    return markdown_table(header, body) + "\n\n" + health.note()


# ---------------------------------------------------------------------------------------------
# tables


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
        rows.append([method, ds, str((g["base"] == "ok").sum()), str((g["base"] == cells.ZERO).sum())]
                    + ([str((g["base"] == cells.INCOMPLETE).sum())] if incomplete else [])
                    + ([str(len(skipped))] if na else [])
                    + [str(g["repeat"].nunique()), (err or why).replace("|", "/").replace("\n", " ")])
    return markdown_table(["method", "dataset", "ok", "failed"] + (["incomplete"] if incomplete else [])
                          + (["n/a"] if na else []) + ["repeats", "first error"], rows)


def score_figures(d: RunData) -> tuple[list[dict], list[dict]]:
    """Every judge metric per (method, dataset) by the rule for means (`memloop.jobs.results.cells`), and the samples
    left out of the comparison (computed once per load)."""
    if "score_figures" not in d.derived:
        d.derived["score_figures"] = cells.score_figures(d.samples, d.scores, d.judge_failures)
    return d.derived["score_figures"]


def _excluded_note(excluded: list[dict]) -> str:
    if not excluded:
        return ""
    return ("\n\nLeft out of the comparison (a method wrote no unit for the sample):\n"
            + "\n".join(f"- {e['dataset']} {e['sample_id']}: none for "
                        f"{', '.join(e['methods'])}" for e in excluded))


def sumie_table(d: RunData) -> str | None:
    figs, excluded = score_figures(d)
    f = [x for x in figs if x["metric"].split(":")[0] in SUMIE_METRICS and ":" in x["metric"]]
    if not f:
        return None
    by = {(x["method"], x["dataset"], x["judge"], x["metric"]): x for x in f}
    header = ["method", "dataset", "judge", "judged / total"] + [f"{m[0].upper() if m != 'f1' else 'F1'} {w}"
                                                        for w in TURN_SUMMARIES for m in SUMIE_METRICS]
    rows = []
    for method, ds, judge in sorted({k[:3] for k in by}):
        first = by.get((method, ds, judge, "f1:last")) or next(v for k, v in by.items() if k[:3] == (method, ds, judge))
        cells_ = [method + _marker(d, method, ds), ds, judge, f"{first['judged']} / {first['total']}"
                  + cells.counts_text(dict(first, judged=first["total"]))]
        for which in TURN_SUMMARIES:
            for metric in SUMIE_METRICS:
                cells_.append(cells.cell_text(by.get((method, ds, judge, f"{metric}:{which}")), counts=False))
        rows.append(cells_)
    return markdown_table(header, rows) + "\n\n" + table_note(d) + _excluded_note(excluded)


MEANS_NOTE = ("Figures: mean over units, a failed unit counted as 0, \"n/a\" left out; ± the standard error over "
              "repeats (several repeats); [95% interval, bootstrap over samples]. docs/judges.md, \"Means and "
              "intervals\".")


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
        row = [method + _marker(d, method, ds), ds]
        for j, m in cols:
            if m is None:
                any_fig = next((v for k, v in by.items() if k[:3] == (method, ds, j)), None)
                row.append("–" if any_fig is None else f"{any_fig['judged']} / {any_fig['total']}"
                           + cells.counts_text(dict(any_fig, judged=any_fig["total"])))
                continue
            row.append(cells.cell_text(by.get((method, ds, j, m)), counts=False))
        rows.append(row)
    names = [f"{j}: judged / total" if m is None else m if m == j else f"{j}: {m}" for j, m in cols]
    return markdown_table(["method", "dataset"] + names, rows) + "\n\n" + table_note(d) + _excluded_note(excluded)


def cost_units(d: RunData) -> tuple[pd.DataFrame, list[dict]]:
    """The units a cost comparison is made over: per dataset, the (repeat, sample) pairs that every
    method run on the dataset finished. Returns those `ok` sample rows and the excluded pairs, each
    with the methods that failed (or have not written) it."""
    s = d.samples
    keep, excluded = [], []
    for ds, g in s.groupby("dataset", sort=True):
        methods = sorted(g["method"].unique())
        for (rep, sid), u in g.groupby(UNIT_KEY, sort=True):
            ok = set(u.loc[u["status"] == "ok", "method"])
            # a method that does not apply to this sample (n/a) is not compared on it, nor blocks it
            if ok | set(u.loc[u["status"] == NOT_APPLICABLE, "method"]) == set(methods):
                keep.append((ds, rep, sid))
            else:
                na = set(u.loc[u["status"] == NOT_APPLICABLE, "method"])
                excluded.append({"dataset": ds, "sample_id": str(sid), "repeat": int(rep),
                                 "methods": [m for m in methods if m not in ok and m not in na]})
    ok = d.ok
    if not keep or ok.empty:
        return ok.iloc[0:0], excluded
    idx = pd.MultiIndex.from_tuples(keep, names=["dataset"] + UNIT_KEY)
    return ok[ok.set_index(["dataset"] + UNIT_KEY).index.isin(idx)], excluded


def _per_sample(g: pd.DataFrame) -> dict[str, float]:
    return per_sample_cost([usage_of(p, c, dec) for p, c, dec in
                            zip(g["prompt_tokens"], g["cached_tokens"], g["decoded_tokens"])])


@dataclass(frozen=True)
class PromptTokenizer:
    """What the paper's cache hit is counted in: token ids of a text, and a label saying whose."""

    encode: Callable[[str], Sequence[int]]
    label: str


@lru_cache(maxsize=4)
def _model_tokenizer(path: str) -> Callable[[str], Sequence[int]]:
    from memloop.engine.model.tokenizer import load_tokenizer

    return load_tokenizer(path).encode


def prompt_tokenizer(d: RunData) -> PromptTokenizer:
    """The run's model tokenizer (the engine's, from the weights its latest manifest names), or
    cl100k_base with the reason when that model cannot be read here (an endpoint, weights elsewhere)."""
    if "tokenizer" not in d.derived:
        d.derived["tokenizer"] = _prompt_tokenizer(d)
    return d.derived["tokenizer"]


def budget_tokenizer(d: RunData) -> PromptTokenizer:
    """What the run's token budgets (K) counted in: cl100k_base under `count_tokens: cl100k`, else the
    run model's tokenizer (`prompt_tokenizer`); memory sizes are reported in the same unit as K."""
    if run_config(d).get("count_tokens") == "cl100k":
        from memloop.eval.tokens import cl100k_encode

        return PromptTokenizer(cl100k_encode, "cl100k_base (the run's count_tokens)")
    return prompt_tokenizer(d)


def _prompt_tokenizer(d: RunData) -> PromptTokenizer:
    from memloop.engine.assets import resolve_model
    from memloop.engine.errors import EngineError
    from memloop.eval.tokens import cl100k_encode

    def cl100k(why: str) -> PromptTokenizer:
        return PromptTokenizer(cl100k_encode, f"cl100k_base ({why})")

    if d.runs.empty or "config_json" not in d.runs:
        return cl100k("the run records no model")
    model = run_config(d).get("model") or {}
    if model.get("kind") == "openai":
        return cl100k(f"the endpoint model {(model.get('endpoint') or {}).get('model')!r} has no local tokenizer")
    try:
        # the engine's own resolution: None is the bundled default, short names their packaged file
        path = resolve_model(model.get("weights"))
        if not path.exists():
            return cl100k(f"the run's model {str(path)!r} is not on this machine")
        return PromptTokenizer(_model_tokenizer(str(path.resolve())), f"the run's model tokenizer, {path.name}")
    except EngineError as exc:
        return cl100k(f"the run's model tokenizer cannot be loaded: {exc}")


PAPER_SKIPPED_KINDS = ("schema",)  # a generated schema is made once per task, not by the sample's own steps


def _paper_costs(steps: pd.DataFrame, tok: PromptTokenizer) -> dict[tuple[int, str], PaperCost]:
    """Seed 002's cost figures of each unit whose steps are given, by (repeat, sample_id) (prompts and
    outputs in step order per unit, in `tok`'s tokens): every attempt counts, so a step retried k times
    sends its prompt k times and its rejected outputs add their decoded tokens (`retry_decoded_tokens`,
    the engine's count in the model's tokens); empty when no prompt is recorded."""
    if steps.empty or "prompt" not in steps or steps["prompt"].isna().all():
        return {}
    steps = steps[~steps["kind"].isin(PAPER_SKIPPED_KINDS)] if "kind" in steps else steps
    out = {}
    for (rep, sid), g in steps.groupby(UNIT_KEY, sort=False):
        g = g.sort_values("step")
        outputs = g["output"] if "output" in g else [""] * len(g)
        attempts = g["attempts"].fillna(1).astype(int).clip(lower=1) if "attempts" in g else [1] * len(g)
        prompts = [p if isinstance(p, str) else "" for p in g["prompt"]]  # null: ""
        sent = [p for p, k in zip(prompts, attempts) for _ in range(k)]
        retried = int(g["retry_decoded_tokens"].fillna(0).sum()) if "retry_decoded_tokens" in g else 0
        out[(int(rep), str(sid))] = paper_sample_cost(sent, [o if isinstance(o, str) else "" for o in outputs],
                                                      tok.encode, retried)
    return out


def cost_frame(d: RunData, tok: PromptTokenizer | None = None) -> pd.DataFrame:
    """One row per unit (method, dataset, repeat, sample_id) that the cost comparison counts (the
    samples every method on the dataset finished): seed 002's figures in one token base (the recorded
    prompts and outputs in `tok`'s tokens, `prompt_tokenizer(d)` by default): `paper_total`,
    `paper_hit`, `encoded` (= total), `net_encoded`, `decoded`, `cost_index` (NaN where the unit
    recorded no prompts); and the engine's as served: `engine_encoded` (prompt tokens with the chat
    template, the kept attempts), `engine_cached`, `engine_net_encoded`, `engine_decoded`,
    `engine_cost_index`. The cells are `cost_cells`."""
    tok = tok or prompt_tokenizer(d)
    key = ("cost_frame", tok.label)
    if key not in d.derived:
        d.derived[key] = _cost_frame(d, tok)
    return d.derived[key].copy()


def _cost_frame(d: RunData, tok: PromptTokenizer) -> pd.DataFrame:
    units, _ = cost_units(d)
    steps = d.steps
    # one pass over the steps table, not one filter of it per (method, dataset, repeat)
    by_group = dict(iter(steps.groupby(["method", "dataset"], sort=False))) if not steps.empty else {}
    nan = math.nan
    rows = []
    for (method, ds), g in units.groupby(["method", "dataset"], sort=True):
        st = by_group.get((method, ds), steps.iloc[0:0])
        keys = set(zip(g["repeat"].astype(int), g["sample_id"].astype(str)))
        if not st.empty:
            st = st[[k in keys for k in zip(st["repeat"].astype(int), st["sample_id"].astype(str))]]
        paper = _paper_costs(st, tok)
        for rep, sid, p_tok, c_tok, dec in zip(g["repeat"], g["sample_id"], g["prompt_tokens"],
                                               g["cached_tokens"], g["decoded_tokens"]):
            u = usage_of(p_tok, c_tok, dec)
            c = paper.get((int(rep), str(sid)))
            rows.append(dict(method=method, dataset=ds, repeat=int(rep), sample_id=str(sid),
                             paper_total=c.total if c else nan, paper_hit=c.hit if c else nan,
                             encoded=c.total if c else nan, net_encoded=c.net if c else nan,
                             decoded=c.output if c else nan, cost_index=c.cost_index if c else nan,
                             engine_encoded=u.prompt_tokens, engine_cached=u.cached_tokens,
                             engine_net_encoded=net_encoded(u), engine_decoded=u.decoded_tokens,
                             engine_cost_index=cost_index(u)))
    return pd.DataFrame(rows, columns=["method", "dataset", "repeat", "sample_id", "paper_total", "paper_hit",
                                       *PAPER_COST_METRICS[1:], *ENGINE_COST_METRICS[1:], "engine_cached"])


PAPER_COST_METRICS = ("prefix_hit_paper", "encoded", "net_encoded", "decoded", "cost_index")
ENGINE_COST_METRICS = ("radix_cache_hit", "engine_encoded", "engine_net_encoded", "engine_decoded",
                       "engine_cost_index")
COST_METRICS = PAPER_COST_METRICS + ENGINE_COST_METRICS
# the two hit rates are ratios of sums over a repeat's samples: (numerator per unit in %, denominator per unit)
_COST_RATIOS = {"prefix_hit_paper": ("paper_hit", "paper_total"), "radix_cache_hit": ("engine_cached", "engine_encoded")}
# the printed hit is 1 - (printed net) / (printed total): both means are over the same units, so the
# identity the paper states holds for the cells themselves, not only per repeat (hit: (net, total))
_HIT_IDENTITY = {"prefix_hit_paper": ("net_encoded", "encoded"),
                 "radix_cache_hit": ("engine_net_encoded", "engine_encoded")}


def cost_cells(units: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Every cost metric's cell over one (method, dataset)'s rows of `cost_frame`, by the rule for
    means (`cells.cost_figure`): mean per sample per repeat, s.e. over repeats, and the 95% bootstrap
    interval over samples; `samples` is the units compared (samples x repeats). A hit's mean is
    1 - net / total of the printed net and total means (a ratio of sums over the same units), its s.e.
    and interval those of the per-repeat ratios."""
    out = {}
    for metric in COST_METRICS:
        if metric in _COST_RATIOS:
            num, den = _COST_RATIOS[metric]
            fig = cells.cost_figure(units.assign(_v=100.0 * units[num]), "_v", den)
        else:
            fig = cells.cost_figure(units, metric)
        out[metric] = {**fig, "samples": int(len(units))}
    for hit, (net, total) in _HIT_IDENTITY.items():
        n, t = out[net].get("mean"), out[total].get("mean")
        if out[hit].get("mean") is not None and n is not None and t:
            # repeats whose totals differ would make the mean of per-repeat ratios miss the identity
            out[hit]["mean"] = 100.0 * (1.0 - n / t)
    return out


def cost_table(d: RunData, tok: PromptTokenizer | None = None) -> str | None:
    tok = tok or prompt_tokenizer(d)
    f = cost_frame(d, tok)
    _, excluded = cost_units(d)
    if f.empty and not excluded:
        return None
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    failed = d.samples[d.samples["status"] == "failed"].groupby(["method", "dataset"]).size().to_dict()
    scaled = {"encoded", "net_encoded", "decoded", "engine_encoded", "engine_net_encoded", "engine_decoded"}
    by = dict(iter(f.groupby(["method", "dataset"], sort=False))) if not f.empty else {}
    rows = []
    for (method, ds), n in sorted(totals.items()):
        g = by.get((method, ds))
        if g is None:
            rows.append([method, ds, f"0 / {n}"] + ["–"] * len(COST_METRICS) + [str(failed.get((method, ds), 0))])
            continue
        figs = cost_cells(g)
        values = [cells.cell_text(figs[m], 2, 1e-3, counts=False) if m in scaled
                  else cells.cell_text(figs[m], 4 if m.endswith("cost_index") else 1, counts=False)
                  for m in COST_METRICS]
        rows.append([method, ds, f"{len(g)} / {n}"] + values + [str(failed.get((method, ds), 0))])
    out = markdown_table(["method", "dataset", "samples compared / units",
                          "prefix hit, paper (%)", "total enc., paper (x10^3)", "net enc., paper (x10^3)",
                          "output, paper (x10^3)", "cost index, paper",
                          "radix cache hit, engine (%)", "prompt tokens, engine (x10^3)",
                          "net enc., engine (x10^3)", "decoded, engine (x10^3)", "cost index, engine",
                          "failed units"], rows)
    out += ("\n\nMeans per sample, ± s.e. over repeats, [95% bootstrap interval over samples]. Paper columns "
            "(seed 002, section 4.2 and table 3), one token base: the recorded "
            f"prompts and outputs, one per step, counted in {tok.label}; prefix hit = tokens of each prompt's "
            "longest prefix shared with the previous prompt of the same sample, over all tokens encoded; net = "
            "total minus those (so hit = 1 - net / total); cost index = (net + 3 x output) / 10^6. Engine "
            "columns, the engine's own counts as served: prompt tokens include the chat template (the kept "
            "attempt of each step; retries are the health table's overhead), and the radix cache may reuse any "
            "earlier prompt's prefix (other samples' and repeats' too), so its net and cost index are not the paper's.")
    if excluded:
        out += "\n\nLeft out of the cost comparison (not finished by every method on the dataset):\n"
        out += "\n".join(f"- {e['dataset']} {e['sample_id']} (repeat {e['repeat']}): failed for "
                          f"{', '.join(e['methods'])}" for e in excluded)
    return out


def _figure(values: list[float]) -> dict[str, float | int | None]:
    m, se = mean_se(values)
    return {"mean": None if math.isnan(m) else m, "se": se, "repeats": len(values)}


def headline(d: RunData) -> dict:
    """The report's numbers as data (`memloop report --json`): units per (method, dataset), every
    judge metric (SUMIE at start/last/avg) and cost figure as the Markdown tables show it, by the rule
    for means (`memloop.eval.judges.aggregation.figure`): `mean` (failed units as 0), `se` over repeats,
    `lo`/`hi` the 95% bootstrap interval over samples, `mean_judged`, the counts (`judged`, `zeroed`,
    `n/a`, `incomplete_units`, `total`, `samples`, `repeats`) and `incomplete`. The cost figures (seed
    002's and the engine's, `cost_cells`: the same mean, s.e. and bootstrap interval over samples) are over the samples every method finished (`samples` of `total`; left-out samples under
    `cost_excluded`), the judge figures over the samples every method ran (`score_excluded`);
    `incomplete` at the top is true when any figure is, or while the run is being computed (`in_progress`: its
    lock holder, else None; every figure is then partial and marked `partial`). `models`: the model under test and the judge
    model. `paper_tables`: the tables of the papers the run's config names (`memloop.jobs.results.paper_tables`),
    memloop's cell and the paper's number side by side."""
    units = [{"method": m, "dataset": ds, "ok": int((g["status"] == "ok").sum()),
              "failed": int((g["status"] == "failed").sum()),
              **({"n/a": int((g["status"] == "n/a").sum())} if (g["status"] == "n/a").any() else {})}
             for (m, ds), g in d.samples.groupby(["method", "dataset"], sort=True)]
    _, excluded = cost_units(d)
    figures = figures_of(d)
    if d.computing:
        figures = [dict(f, partial=True) for f in figures]
    return {"run_id": d.run_id, "uri": d.uri, "units": units, "figures": figures, "cost_excluded": excluded,
            "score_excluded": score_figures(d)[1], "in_progress": d.computing,
            "incomplete": bool(d.computing) or any(f.get("incomplete") for f in figures),
            "models": models_of(d), "paper_tables": [laid for _, laid in paper_tables(d)],
            "health": health_rows(d), "unsuccessful_step_share": health.UNSUCCESSFUL_STEP_SHARE,
            "judgings": [dict(j.summary(), figures=score_figures(d.judged_by(j))[0]) for j in d.judgings]}


def figures_of(d: RunData) -> list[dict]:
    """Every headline figure of the run (computed once per load)."""
    if "figures" not in d.derived:
        d.derived["figures"] = health.annotate(_figures(d), step_shares(d))
    return d.derived["figures"]


def _figures(d: RunData) -> list[dict]:
    figures = list(score_figures(d)[0])
    tok = prompt_tokenizer(d)
    c = cost_frame(d, tok)
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    for (m, ds), g in (c.groupby(["method", "dataset"], sort=True) if not c.empty else ()):
        for metric, fig in cost_cells(g).items():
            figures.append({"method": m, "dataset": ds, "judge": "", "metric": metric, **fig,
                            "total": int(totals[(m, ds)]),
                            **({"tokenizer": tok.label} if metric in PAPER_COST_METRICS else {})})
    return figures


def memory_figures(d: RunData) -> list[dict]:
    """`memory_tokens` per (method, dataset): the existing information each turn's prompt receives
    (`memloop.eval.judges.memory_size`: the memory carried out of the turn before, in its prompt rendering
    and the run model's tokenizer: the step's recorded `memory_text` where the method records one,
    e.g. PRISM's indented in-place JSON or base plus amendment lines, else the compact JSON),
    averaged over a sample's turns, then over its samples (per repeat; seed 000 appendix A).
    Tokenised once per load: the Markdown and `report --json` read it."""
    if "memory_figures" not in d.derived:
        d.derived["memory_figures"] = _memory_figures(d)
    return d.derived["memory_figures"]


def _memory_figures(d: RunData) -> list[dict]:
    st = d.steps
    if st.empty or "memory_json" not in st or st["memory_json"].isna().all():
        return []
    from memloop.eval.judges.memory_size import carried_memories
    from memloop.eval.methods.parsing import as_text

    tok = budget_tokenizer(d)
    rows = []
    for key, g in st.sort_values("step").groupby(["method", "dataset", "repeat", "sample_id"], sort=True):
        extras = [json.loads(x or "{}") for x in g["extra_json"]]
        memories = [json.loads(m) if isinstance(m, str) else None for m in g["memory_json"]]
        # the text the prompt carried: the recorded rendering, else the memory's compact JSON
        texts = [e["memory_text"] if "memory_text" in e else (None if m is None else as_text(m))
                 for e, m in zip(extras, memories)]
        sizes = [len(tok.encode(t)) for t in carried_memories(zip((e.get("chunk_index") for e in extras), texts))]
        if sizes:
            rows.append(dict(zip(("method", "dataset", "repeat", "sample_id"), key), memory_tokens=sum(sizes) / len(sizes)))
    if not rows:
        return []
    per_sample = pd.DataFrame(rows)
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    out = []
    for (m, ds), g in per_sample.groupby(["method", "dataset"], sort=True):
        out.append({"method": m, "dataset": ds, "judge": "", "metric": "memory_tokens",
                    **cells.cost_figure(g, "memory_tokens"),
                    "samples": int(len(g)), "total": int(totals.get((m, ds), len(g))), "tokenizer": tok.label})
    return out


def binding_figures(d: RunData) -> list[dict]:
    """`k_bound` per (method, dataset): the share of a sample's turns (chunks) whose memory went over K and
    was compressed or trimmed (a `compress` step at that turn), averaged over samples per repeat. A cell
    at 0 says the limited-memory condition never occurred (seed 000 figure 3)."""
    st = d.steps
    if st.empty or "kind" not in st:
        return []
    rows = []
    for key, g in st.groupby(["method", "dataset", "repeat", "sample_id"], sort=True):
        chunks = [json.loads(x or "{}").get("chunk_index") for x in g["extra_json"]]
        turns = {c for c in chunks if c is not None}
        bound = {c for c, k in zip(chunks, g["kind"]) if c is not None and k == "compress"}
        if turns:
            rows.append(dict(zip(("method", "dataset", "repeat", "sample_id"), key), k_bound=len(bound) / len(turns)))
    if not rows:
        return []
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    return [{"method": m, "dataset": ds, "judge": "", "metric": "k_bound", **cells.cost_figure(g, "k_bound"),
             "samples": int(len(g)), "total": int(totals.get((m, ds), len(g)))}
            for (m, ds), g in pd.DataFrame(rows).groupby(["method", "dataset"], sort=True)]


def context_figures(d: RunData) -> list[dict]:
    """`context_tokens` per (method, dataset): the input one step of the method reads, per sample (seed 002
    table 2's "Ch. Tokens"): the whole input (cl100k, the samples table's `input_tokens`) for a method that
    reads it at once (the long-context ceiling), else the dataset's chunk size (in the run model's tokenizer)."""
    from memloop.jobs.run.chunk_fit import WHOLE_INPUT_METHODS

    ok = d.ok
    if ok.empty:
        return []
    names = {m.get("label") or m.get("name"): m.get("name") for m in run_config(d).get("methods") or ()}
    totals = d.applicable.groupby(["method", "dataset"]).size().to_dict()
    out = []
    for (m, ds), g in ok.groupby(["method", "dataset"], sort=True):
        column = "input_tokens" if names.get(m, m) in WHOLE_INPUT_METHODS else "chunk_tokens"
        g = g.dropna(subset=[column])
        if g.empty:
            continue
        out.append({"method": m, "dataset": ds, "judge": "", "metric": "context_tokens",
                    **_figure([float(r[column].mean()) for _, r in g.groupby("repeat")]),
                    "samples": int(len(g)), "total": int(totals.get((m, ds), len(g))),
                    "tokenizer": "cl100k_base" if column == "input_tokens" else "run model"})
    return out


def paper_markdown(table: PaperTable, laid: dict[str, Any]) -> str:
    header = ["row"]
    for col in table.columns:
        header += [f"{col.label}, memloop", f"{col.label}, {table.paper_label}"]
    body = [[r["label"]] + [x for c in table.columns for x in (r["cells"][c.label]["text"],
                                                                r["cells"][c.label]["paper"] or "")]
            for r in laid["rows"]]
    body += [[f"Δ {d['label']} (paired)"] + [x for c in table.columns for x in (d["cells"][c.label]["text"], "")]
             for d in laid.get("differences", ())]
    out = f"### {table.title}\n\n" + markdown_table(header, body)
    if laid.get("differences"):
        out += ("\n\nΔ rows: the paired difference (second minus first) on the samples both methods ran, "
                "a failed unit counted as 0, with its 95% bootstrap interval over samples (as `memloop compare`).")
    out += f"\n\n{laid['note']}" if laid.get("note") else ""
    if laid.get("describers"):
        rows = [[r["method"], r["dataset"], f"{r['model']} / {r['samples']}", f"{r['fallback']} / {r['samples']}",
                 f"{r['rule']} / {r['samples']}"] for r in laid["describers"]]
        out += ("\n\nRepoQA queries by who described the needle, per cell (model: the describer model's or the "
                "release's own description; fallback: the labelled rule-based one, where the model's was missing or "
                "rejected; rule-based: no describer configured):\n\n"
                + markdown_table(["method", "dataset", "model", "fallback", "rule-based"], rows))
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
        out.append({"method": method, "dataset": ds, "samples": int(len(who)), "fallback": fallback, "rule": rule,
                    "model": int(len(who)) - fallback - rule})
    return out


def models_of(d: RunData) -> dict[str, Any]:
    """The model under test and the judge model of the run's latest invocation, and whether they are one."""
    cfg = run_config(d)
    if not cfg:
        return {}
    under_test = model_name(cfg.get("model") or {})
    jm = d.judge_model or cfg.get("judge_model") or {"kind": "engine"}  # a re-judging's own, where it has one
    judge = under_test if jm.get("kind", "engine") == "engine" and not jm.get("weights") else model_name(jm)
    out = {"model": under_test, "judge": judge, "self_judged": judge == under_test, "decoding": decoding_of(cfg)}
    # seed 001's graph extraction: its own setting, the run's graph_model (else the judge model) unless a
    # kg-retrieval says "self"
    kg = [m for m in cfg.get("methods") or () if m.get("name") == "kg-retrieval"]
    if kg:
        gm = cfg.get("graph_model")
        extractor = judge if not gm else (under_test if gm.get("kind", "engine") == "engine" and not gm.get("weights")
                                          else model_name(gm))
        settings = {(m.get("options") or {}).get("extraction_model", "judge") for m in kg}
        out["graph_extraction"] = ", ".join(sorted(extractor if s == "judge" else under_test for s in settings))
    return out


def decoding_of(cfg: dict[str, Any]) -> dict[str, str]:
    """{method label: its `decoding` setting} for the config's methods that have one (the JSON formats'
    free or schema-held output), the method's default where the config leaves it out."""
    from memloop.eval.methods import method_class

    out = {}
    for m in cfg.get("methods") or ():
        try:
            cls = method_class(m["name"])
        except Exception:  # a method removed since the run: nothing to say about its decoding
            continue
        default = getattr(cls.Settings, "decoding", None)
        if default is not None and getattr(cls, "fmt", "json") != "text":  # text summaries have no schema
            out[m.get("label") or m["name"]] = str((m.get("options") or {}).get("decoding", default))
    return out


def model_name(spec: dict[str, Any]) -> str:
    """A model spec as the tables name it: the endpoint's model, or the engine's weights (file name)."""
    if spec.get("kind") == "openai":
        ep = spec.get("endpoint") or {}
        return f"{ep.get('model')} at {ep.get('base_url')}"
    weights = spec.get("weights")
    if not weights:
        from memloop.engine.assets import default_model_path

        return f"{default_model_path().name} (the bundled default)"
    return str(weights).rsplit("/", 1)[-1]


def run_config(d: RunData) -> dict:
    """The config of the run's latest invocation (as recorded in its runs table)."""
    if d.runs.empty or "config_json" not in d.runs:
        return {}
    runs = d.runs.sort_values("finished_at") if "finished_at" in d.runs else d.runs
    return json.loads(runs.iloc[-1]["config_json"] or "{}")


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
        keys = sorted(k for k in by_cell if k[0] == a and k[2] == col.judge and k[3] == col.metric
                      and (col.task is None or k[1].split(":", 1)[0] == col.task)
                      and (dataset is None or k[1].endswith(dataset)))
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
    from memloop.errors import MemloopError
    from memloop.jobs.results.procedure_cards import card, card_markdown
    from memloop.jobs.run.config import parse_config

    try:
        return card_markdown(card(table_id, parse_config(config, "the run's config"), window=True))
    except MemloopError as exc:
        return f"#### Procedure card: {table_id}\n\nnot available: the run's config does not load here ({exc})"


# ---------------------------------------------------------------------------------------------
# plots


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buf.getvalue()


def plot_f1_per_turn(d: RunData) -> bytes | None:
    s = d.scores[(d.scores["metric"] == "f1") & d.scores["turn"].notna()]
    if s.empty:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    several = s["judge"].nunique() > 1
    for (method, judge), g in s.groupby(["method", "judge"]):
        xs, ms, ses = [], [], []
        for turn, gt in g.groupby("turn"):
            m, se = mean_se(per_repeat(gt, "value", judge))
            xs.append(int(turn) + 1), ms.append(m), ses.append(se or 0.0)
        ax.errorbar(xs, ms, yerr=ses, marker="o", capsize=3, label=f"{method} ({judge})" if several else method)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("turn (paragraphs read)"), ax.set_ylabel("F1"), ax.set_title("SUMIE F1 per turn")
    ax.legend(fontsize=8)
    return _png(fig)


def plot_tokens_per_step(d: RunData) -> bytes | None:
    if d.steps.empty:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for method, g in d.steps.groupby("method"):
        per = g.groupby("step")[["prompt_tokens", "cached_tokens"]].mean()
        line = ax.plot(per.index + 1, per["prompt_tokens"], marker="o", label=f"{method} prompt")[0]
        ax.plot(per.index + 1, per["cached_tokens"], linestyle="--", color=line.get_color(), label=f"{method} cached")
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step"), ax.set_ylabel("tokens (mean over samples)"), ax.set_title("Prompt and cached tokens per step")
    ax.legend(fontsize=7)
    return _png(fig)


# seed 002 figure 5's curves against chunk size: the task's accuracy, net encoded and decoded tokens, cost index
CHUNK_CURVES = (("accuracy", "accuracy"), ("net_encoded", "net encoded tokens per sample"),
                ("decoded", "decoded tokens per sample"), ("cost_index", "cost index per sample"))


def chunk_curves(d: RunData) -> dict[str, list[tuple[str, int, float, float]]]:
    """{metric: [(method, chunk size, mean, s.e.)]} for a run whose datasets differ in chunk size only:
    the same headline figures the tables print (accuracy from any judge that reports it), by chunk size."""
    s = d.samples.dropna(subset=["chunk_tokens"]) if "chunk_tokens" in d.samples else d.samples.iloc[0:0]
    if s.empty or s["chunk_tokens"].nunique() < 2:
        return {}
    per_dataset = s.groupby("dataset")["chunk_tokens"].nunique()
    if (per_dataset > 1).any():  # chunk sizes vary inside a dataset: its figures cannot be split, units can
        out_units: list[tuple[str, int, float, float]] = []
        for method, g in cost_units(d)[0].dropna(subset=["chunk_tokens"]).groupby("method"):
            for ct, gc in g.groupby("chunk_tokens"):
                m, se = mean_se([_per_sample(gr)["cost_index"] for _, gr in gc.groupby("repeat")])
                out_units.append((method, int(ct), m, se or 0.0))
        return {"cost_index": sorted(out_units)}
    sizes = s.groupby("dataset")["chunk_tokens"].first().to_dict()
    out: dict[str, list[tuple[str, int, float, float]]] = {}
    for f in figures_of(d):
        if f["metric"] in dict(CHUNK_CURVES) and f["dataset"] in sizes and f.get("mean") is not None \
                and (f["metric"] != "accuracy" or f["judge"]):
            out.setdefault(f["metric"], []).append((f["method"], int(sizes[f["dataset"]]), f["mean"], f.get("se") or 0.0))
    return {k: sorted(v) for k, v in out.items()}


def plot_cost_vs_chunk(d: RunData) -> bytes | None:
    curves = chunk_curves(d)
    if not curves:
        return None
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(CHUNK_CURVES), figsize=(4 * len(CHUNK_CURVES), 3.6))
    for ax, (metric, label) in zip(axes, CHUNK_CURVES):
        by_method: dict[str, list[tuple[int, float, float]]] = {}
        for method, size, mean, se in curves.get(metric, ()):
            by_method.setdefault(method, []).append((size, mean, se))
        for method, pts in by_method.items():
            ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3,
                        label=method)
        ax.set_xscale("log", base=2), ax.set_xlabel("chunk size (tokens)"), ax.set_title(label, fontsize=9)
    for ax in axes:  # the legend on the first panel that has curves
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
            break
    fig.suptitle("Against chunk size (seed 002, figure 5)")
    return _png(fig)


PLOTS: dict[str, Callable[[RunData], bytes | None]] = {
    "f1_per_turn.png": plot_f1_per_turn,
    "tokens_per_step.png": plot_tokens_per_step,
    "cost_vs_chunk.png": plot_cost_vs_chunk,
}


# ---------------------------------------------------------------------------------------------


@dataclass
class Report:
    markdown: str
    plots: dict[str, bytes] = field(default_factory=dict)
    not_written: str | None = None  # why report.md and the plots are not beside the run (e.g. it is read-only)


def units_line(samples: pd.DataFrame) -> str:
    """"N units (a ok, b failed, c incomplete, d n/a)": a failed unit is the method's (scored 0), an
    incomplete one the infrastructure's (unknown), an n/a one applies to no method (neither)."""
    states = cells.unit_states(samples)
    base = states["base"] if not states.empty else pd.Series(dtype=str)
    counts = [("ok", int((base == "ok").sum())), ("failed", int((base == cells.ZERO).sum())),
              ("incomplete", int((base == cells.INCOMPLETE).sum())), ("n/a", int((base == NOT_APPLICABLE).sum()))]
    return f"{len(samples)} units ({', '.join(f'{n} {what}' for what, n in counts if n or what == 'ok')})"


def in_progress_note(d: RunData) -> list[str]:
    """The report's first words on a run being computed now: every figure below is partial."""
    h = d.computing
    if not h:
        return []
    return [f"**In progress, partial figures:** this run is being computed now by {describe_holder(h)}; the "
            "tables below hold the units written so far. Report it again when that run has finished.", ""]


def build_report(d: RunData) -> Report:
    import matplotlib

    matplotlib.use("Agg")
    n_rep = int(d.samples["repeat"].nunique()) if not d.samples.empty else 0
    parts = [f"# Run `{d.run_id}`", "", f"Results: `{d.uri}`", "", *in_progress_note(d),
             f"{units_line(d.samples)}, {n_rep} repeat(s); "
             "figures are mean ± standard error over repeats [95% bootstrap interval over samples]." if n_rep > 1 else
             f"{units_line(d.samples)}, one repeat; figures are mean [95% bootstrap interval over samples].",
             "", "## Units", "", overview_table(d) if not d.samples.empty else "(no units written yet)"]
    papers = paper_tables(d)
    if papers:
        parts += ["", "## The papers' tables: memloop beside the paper", ""]
        parts += ["\n\n".join(paper_markdown(t, laid) for t, laid in papers)]
    from memloop.jobs.results.mab_table import mab_markdown  # MemoryAgentBench runs only

    mab = mab_markdown(d)
    if mab:
        parts += ["", "## MemoryAgentBench: per competency and source (inject once, ask many)", "", mab]
    own = " (the run's own judging)" if d.judgings else ""
    for title, table in ((f"SUMIE: precision / recall / F1 per turn (seed 000, table 1){own}", sumie_table(d)),
                         (f"Scores{own}", scores_table(d)),
                         ("Cost (seed 002, table 3)", cost_table(d)),
                         ("Method health: step outcomes and retries", health_table(d))):
        if table:
            parts += ["", f"## {title}", "", table]
    if d.judgings:
        parts += ["", "## Re-judgings (`memloop rescore`)", "",
                  "The run's outputs judged again; each re-judging is kept under its own judging id beside the "
                  "run's own judgments."]
        for j in d.judgings:
            sm, jd = j.summary(), d.judged_by(j)
            parts += ["", f"### Re-judging `{j.judging_id}`: {j.label}", "",
                      f"{sm['ok']} units judged, {sm['failed']} failed."]
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
        rep.not_written = (f"report.md and the plots were not written next to the run ({what[:300]}); "
                           "the report is printed only: copy the run somewhere writable to keep them")
    return rs, d, rep
