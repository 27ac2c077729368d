"""The report's plots (PNG, matplotlib): F1 per turn, prompt and cached tokens per step, and the figures
against chunk size (seed 002, figure 5)."""

from __future__ import annotations

import io
from typing import Callable

import pandas as pd
from memloop.eval.judges import aggregator
from memloop.eval.judges.aggregation import mean_se
from memloop.jobs.results.cost_tables import cost_units, per_sample_costs
from memloop.jobs.results.figures import figures_of
from memloop.jobs.results.run_data import RunData


def per_repeat(df: pd.DataFrame, column: str, judge: str) -> list[float]:
    """One value per repeat: judge `judge`'s aggregation over the samples of that repeat (the plots)."""
    agg = aggregator(judge)
    return [agg(g[column]) for _, g in df.groupby("repeat", sort=True)]


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
    (
        ax.set_xlabel("step"),
        ax.set_ylabel("tokens (mean over samples)"),
        ax.set_title("Prompt and cached tokens per step"),
    )
    ax.legend(fontsize=7)
    return _png(fig)


# seed 002 figure 5's curves against chunk size: the task's accuracy, net encoded and decoded tokens, cost index
CHUNK_CURVES = (
    ("accuracy", "accuracy"),
    ("net_encoded", "net encoded tokens per sample"),
    ("decoded", "decoded tokens per sample"),
    ("cost_index", "cost index per sample"),
)


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
                m, se = mean_se([per_sample_costs(gr)["cost_index"] for _, gr in gc.groupby("repeat")])
                out_units.append((method, int(ct), m, se or 0.0))
        return {"cost_index": sorted(out_units)}
    sizes = s.groupby("dataset")["chunk_tokens"].first().to_dict()
    out: dict[str, list[tuple[str, int, float, float]]] = {}
    for f in figures_of(d):
        if (
            f["metric"] in dict(CHUNK_CURVES)
            and f["dataset"] in sizes
            and f.get("mean") is not None
            and (f["metric"] != "accuracy" or f["judge"])
        ):
            out.setdefault(f["metric"], []).append(
                (f["method"], int(sizes[f["dataset"]]), f["mean"], f.get("se") or 0.0)
            )
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
            ax.errorbar(
                [p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3, label=method
            )
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
