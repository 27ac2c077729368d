"""The cost comparison (seed 002 table 3, per book): the units every method on a dataset finished, seed
002's figures in one token base beside the engine's own counts, one row per unit (`cost_frame`), its cells
by the rule for means (`cost_cells`) and its Markdown table (`cost_table`)."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd
from memloop.eval.judges.cost import PaperCost, cost_index, net_encoded, paper_sample_cost, per_sample_cost, usage_of
from memloop.jobs.results import cells
from memloop.jobs.results.markdown import markdown_table
from memloop.jobs.results.prompt_tokens import PromptTokenizer, prompt_tokenizer
from memloop.jobs.results.run_data import NOT_APPLICABLE, UNIT_KEY, RunData


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
                excluded.append(
                    {
                        "dataset": ds,
                        "sample_id": str(sid),
                        "repeat": int(rep),
                        "methods": [m for m in methods if m not in ok and m not in na],
                    }
                )
    ok = d.ok
    if not keep or ok.empty:
        return ok.iloc[0:0], excluded
    idx = pd.MultiIndex.from_tuples(keep, names=["dataset"] + UNIT_KEY)
    return ok[ok.set_index(["dataset"] + UNIT_KEY).index.isin(idx)], excluded


def per_sample_costs(g: pd.DataFrame) -> dict[str, float]:
    return per_sample_cost(
        [usage_of(p, c, dec) for p, c, dec in zip(g["prompt_tokens"], g["cached_tokens"], g["decoded_tokens"])]
    )


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
        out[(int(rep), str(sid))] = paper_sample_cost(
            sent, [o if isinstance(o, str) else "" for o in outputs], tok.encode, retried
        )
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
        for rep, sid, p_tok, c_tok, dec in zip(
            g["repeat"], g["sample_id"], g["prompt_tokens"], g["cached_tokens"], g["decoded_tokens"]
        ):
            u = usage_of(p_tok, c_tok, dec)
            c = paper.get((int(rep), str(sid)))
            rows.append(
                dict(
                    method=method,
                    dataset=ds,
                    repeat=int(rep),
                    sample_id=str(sid),
                    paper_total=c.total if c else nan,
                    paper_hit=c.hit if c else nan,
                    encoded=c.total if c else nan,
                    net_encoded=c.net if c else nan,
                    decoded=c.output if c else nan,
                    cost_index=c.cost_index if c else nan,
                    engine_encoded=u.prompt_tokens,
                    engine_cached=u.cached_tokens,
                    engine_net_encoded=net_encoded(u),
                    engine_decoded=u.decoded_tokens,
                    engine_cost_index=cost_index(u),
                )
            )
    return pd.DataFrame(
        rows,
        columns=[
            "method",
            "dataset",
            "repeat",
            "sample_id",
            "paper_total",
            "paper_hit",
            *PAPER_COST_METRICS[1:],
            *ENGINE_COST_METRICS[1:],
            "engine_cached",
        ],
    )


PAPER_COST_METRICS = ("prefix_hit_paper", "encoded", "net_encoded", "decoded", "cost_index")
ENGINE_COST_METRICS = ("radix_cache_hit", "engine_encoded", "engine_net_encoded", "engine_decoded", "engine_cost_index")
COST_METRICS = PAPER_COST_METRICS + ENGINE_COST_METRICS
# the two hit rates are ratios of sums over a repeat's samples: (numerator per unit in %, denominator per unit)
_COST_RATIOS = {
    "prefix_hit_paper": ("paper_hit", "paper_total"),
    "radix_cache_hit": ("engine_cached", "engine_encoded"),
}
# the printed hit is 1 - (printed net) / (printed total): both means are over the same units, so the
# identity the paper states holds for the cells themselves, not only per repeat (hit: (net, total))
_HIT_IDENTITY = {
    "prefix_hit_paper": ("net_encoded", "encoded"),
    "radix_cache_hit": ("engine_net_encoded", "engine_encoded"),
}


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
        values = [
            cells.cell_text(figs[m], 2, 1e-3, counts=False)
            if m in scaled
            else cells.cell_text(figs[m], 4 if m.endswith("cost_index") else 1, counts=False)
            for m in COST_METRICS
        ]
        rows.append([method, ds, f"{len(g)} / {n}"] + values + [str(failed.get((method, ds), 0))])
    out = markdown_table(
        [
            "method",
            "dataset",
            "samples compared / units",
            "prefix hit, paper (%)",
            "total enc., paper (x10^3)",
            "net enc., paper (x10^3)",
            "output, paper (x10^3)",
            "cost index, paper",
            "radix cache hit, engine (%)",
            "prompt tokens, engine (x10^3)",
            "net enc., engine (x10^3)",
            "decoded, engine (x10^3)",
            "cost index, engine",
            "failed units",
        ],
        rows,
    )
    out += (
        "\n\nMeans per sample, ± s.e. over repeats, [95% bootstrap interval over samples]. Paper columns "
        "(seed 002, section 4.2 and table 3), one token base: the recorded "
        f"prompts and outputs, one per step, counted in {tok.label}; prefix hit = tokens of each prompt's "
        "longest prefix shared with the previous prompt of the same sample, over all tokens encoded; net = "
        "total minus those (so hit = 1 - net / total); cost index = (net + 3 x output) / 10^6. Engine "
        "columns, the engine's own counts as served: prompt tokens include the chat template (the kept "
        "attempt of each step; retries are the health table's overhead), and the radix cache may reuse any "
        "earlier prompt's prefix (other samples' and repeats' too), so its net and cost index are not the paper's."
    )
    if excluded:
        out += "\n\nLeft out of the cost comparison (not finished by every method on the dataset):\n"
        out += "\n".join(
            f"- {e['dataset']} {e['sample_id']} (repeat {e['repeat']}): failed for {', '.join(e['methods'])}"
            for e in excluded
        )
    return out
