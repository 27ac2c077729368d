"""The one rule for what a table's figure counts, and its uncertainty (docs/judges.md, "Means and intervals").

Every judge of the five papers averages over samples without weights: BooookScore is the mean over
books (seed 003), SUMIE reports mean P and R and the macro F1 over entities (seed 000, table 1),
KGScore, ROUGE and accuracy are means over summaries or questions. `mean_over_samples` is that mean
(a value that is undefined, NaN, is left out, as pandas' mean does); `mean_se` the mean over repeats
with its standard error.

`figure` applies the rule to one cell, from one entry per unit (repeat, sample, state, value):

- `judged`: the judge scored the unit; its value counts (NaN: the metric is undefined there, left out).
- `zero`: the method failed on the unit, or produced nothing: it scores the metric's zero (a method
  that produced nothing got nothing right), in the headline mean and counted as `zeroed`.
- `n/a`: the method does not apply to the sample; left out of the mean and counted.
- `incomplete`: no score is known for a reason outside the method (the engine was lost, an endpoint
  was down, the judge failed); left out of the mean, counted, and the cell is flagged incomplete.

The headline is the judge's aggregate over each repeat's judged and zeroed units, then the mean
over repeats; every repeat the run has is counted (a repeat whose units all failed scores zero, and
one with no result at all leaves the cell incomplete instead of silently shrinking the ±). Beside
it: the mean over judged units only, the counts, the s.e. over repeats (when there are several),
and a 95% percentile interval from a bootstrap over samples, clustered by sample across repeats
(a resample draws whole samples with all their repeats), with a fixed seed so that a report is
reproducible. `paired_mean_delta` is the paired difference of two methods (or two runs) on their
common samples with the same bootstrap; `memloop compare` and the paper tables both call it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np

Aggregate = Callable[[Iterable[float]], float]

JUDGED, ZERO, NOT_APPLICABLE, INCOMPLETE = "judged", "zero", "n/a", "incomplete"
STATES = (JUDGED, ZERO, NOT_APPLICABLE, INCOMPLETE)
RESAMPLES = 2000
SEED = 0
LEVEL = 0.95


def mean_over_samples(values: Iterable[float]) -> float:
    """The unweighted mean of per-sample values, NaN and None left out; NaN when nothing is left."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(vals) / len(vals) if vals else math.nan


def mean_se(values: Iterable[float]) -> tuple[float, float | None]:
    """The mean of per-repeat figures (NaN and None left out) and its standard error (None with one)."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return math.nan, None
    m = sum(vals) / len(vals)
    if len(vals) < 2:
        return m, None
    var = sum((v - m) ** 2 for v in vals) / (len(vals) - 1)
    return m, math.sqrt(var / len(vals))


def bootstrap(
    stat: Callable[[np.ndarray], np.ndarray], n: int, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float, float]:
    """`stat` on all n clusters and its 95% percentile interval over `resamples` resamples of them.
    `stat` maps index arrays of shape (k, n) to k values; NaN resamples are left out."""
    if n == 0:
        return math.nan, math.nan, math.nan
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(resamples, n))
    with np.errstate(invalid="ignore", divide="ignore"):
        boot = np.asarray(stat(idx), dtype=float)
        point = float(np.asarray(stat(np.arange(n)[None, :]), dtype=float)[0])
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.nanpercentile(boot, [tail, 100 - tail]) if np.isfinite(boot).any() else (math.nan, math.nan)
    return point, float(lo), float(hi)


def paired_mean_delta(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """mean(b - a) over paired units and its bootstrap interval (units resampled in pairs)."""
    d = np.asarray(b, float) - np.asarray(a, float)
    return bootstrap(lambda idx: d[idx].mean(axis=1), len(d))


def paired_ratio_delta(
    num_a: np.ndarray, den_a: np.ndarray, num_b: np.ndarray, den_b: np.ndarray, scale: float = 100.0
) -> tuple[float, float, float]:
    """scale x (Σnum_b/Σden_b − Σnum_a/Σden_a) over paired units and its bootstrap interval."""

    def stat(idx: np.ndarray) -> np.ndarray:
        return scale * (num_b[idx].sum(1) / den_b[idx].sum(1) - num_a[idx].sum(1) / den_a[idx].sum(1))

    return bootstrap(stat, len(num_a))


@dataclass(frozen=True)
class Unit:
    """One unit's entry in a cell: which repeat and sample, its state, its value (and, for a ratio of
    sums such as a cache hit, its denominator)."""

    repeat: int
    sample: str
    state: str
    value: float = math.nan
    weight: float | None = None


def _per_repeat(values: np.ndarray, weights: np.ndarray | None, aggregate: Aggregate) -> np.ndarray:
    """(k, n, R) values -> (k, R) per-repeat figures: the aggregate over samples, or Σvalue / Σweight."""
    if weights is not None:
        return np.nansum(values, axis=1) / np.nansum(weights, axis=1)
    if aggregate is mean_over_samples:
        return np.nanmean(values, axis=1)
    return np.array([[aggregate(values[k, :, r]) for r in range(values.shape[2])] for k in range(values.shape[0])])


def figure(
    units: Sequence[Unit],
    aggregate: Aggregate = mean_over_samples,
    zero: float = 0.0,
    repeats: Sequence[int] | None = None,
) -> dict[str, Any]:
    """One cell by the rule: headline mean, s.e. over repeats, bootstrap interval, and the counts.
    `repeats`: every repeat the run has for this method (a repeat without any unit still counts)."""
    for u in units:
        if u.state not in STATES:
            raise ValueError(f"unit state {u.state!r} is not one of {STATES}")
    reps = sorted(set(repeats or ()) | {u.repeat for u in units})
    counted = [u for u in units if u.state in (JUDGED, ZERO)]
    samples = sorted({u.sample for u in counted})
    ratio = any(u.weight is not None for u in counted)
    vals = np.full((len(samples), len(reps)), np.nan)
    wts = np.full((len(samples), len(reps)), np.nan) if ratio else None
    si, ri = {s: i for i, s in enumerate(samples)}, {r: i for i, r in enumerate(reps)}
    for u in counted:
        i, j = si[u.sample], ri[u.repeat]
        vals[i, j] = zero if u.state == ZERO else u.value
        if wts is not None:
            wts[i, j] = 0.0 if u.state == ZERO else (u.weight if u.weight is not None else math.nan)

    def stat(idx: np.ndarray) -> np.ndarray:
        per = _per_repeat(vals[idx], wts[idx] if wts is not None else None, aggregate)
        return np.nanmean(per, axis=1)

    with np.errstate(invalid="ignore", divide="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN repeat is NaN, counted below
            per_repeat = (
                _per_repeat(vals[None], wts[None] if wts is not None else None, aggregate)[0]
                if samples
                else np.full(len(reps), np.nan)
            )
            mean, se = mean_se(per_repeat.tolist())
            # one sample has no spread to resample: no interval rather than a degenerate [x, x]
            _, lo, hi = bootstrap(stat, len(samples)) if len(samples) > 1 else (math.nan, math.nan, math.nan)
    judged = [u for u in units if u.state == JUDGED]
    count = {s: sum(1 for u in units if u.state == s) for s in STATES}
    missing_repeats = int(np.isnan(per_repeat).sum()) if samples else len(reps)
    return {
        "mean": None if math.isnan(mean) else mean,
        "se": se,
        "lo": None if math.isnan(lo) else lo,
        "hi": None if math.isnan(hi) else hi,
        "repeats": len(reps),
        "repeats_without_result": missing_repeats,
        "mean_judged": _none(mean_over_samples(u.value for u in judged)),
        "judged": count[JUDGED],
        "zeroed": count[ZERO],
        "n/a": count[NOT_APPLICABLE],
        "incomplete_units": count[INCOMPLETE],
        "total": len(units) - count[NOT_APPLICABLE],
        "samples": len(samples),
        "incomplete": bool(count[INCOMPLETE] or missing_repeats),
    }


def paired_difference(a: Sequence[Unit], b: Sequence[Unit], zero: float = 0.0) -> dict[str, Any]:
    """b − a over the units both count (judged, or zero for a failed unit), paired by (repeat, sample);
    a sample's differences are averaged over its repeats and the interval is `paired_mean_delta`'s
    bootstrap over those samples. Units either side leaves out (n/a, incomplete, undefined) drop the pair."""

    def counted(units: Sequence[Unit]) -> dict[tuple[int, str], float]:
        out = {}
        for u in units:
            v = zero if u.state == ZERO else u.value if u.state == JUDGED else math.nan
            if not math.isnan(v):
                out[(u.repeat, u.sample)] = v
        return out

    va, vb = counted(a), counted(b)
    keys = sorted(set(va) & set(vb))
    per_sample: dict[str, list[tuple[float, float]]] = {}
    for k in keys:
        per_sample.setdefault(k[1], []).append((va[k], vb[k]))
    xa = np.array([np.mean([p[0] for p in v]) for v in per_sample.values()])
    xb = np.array([np.mean([p[1] for p in v]) for v in per_sample.values()])
    if not len(xa):
        return {"n": 0, "units": 0, "a": None, "b": None, "delta": None, "lo": None, "hi": None}
    delta, lo, hi = paired_mean_delta(xa, xb)
    return {
        "n": len(xa),
        "units": len(keys),
        "a": float(xa.mean()),
        "b": float(xb.mean()),
        "delta": delta,
        "lo": _none(lo),
        "hi": _none(hi),
    }


def _none(v: float) -> float | None:
    return None if math.isnan(v) else v


__all__ = [
    "Aggregate",
    "mean_over_samples",
    "mean_se",
    "bootstrap",
    "paired_mean_delta",
    "paired_ratio_delta",
    "Unit",
    "figure",
    "paired_difference",
    "JUDGED",
    "ZERO",
    "NOT_APPLICABLE",
    "INCOMPLETE",
    "STATES",
    "RESAMPLES",
    "SEED",
]
