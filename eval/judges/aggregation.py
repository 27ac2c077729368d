"""How a judge's per-sample scores become one dataset-level figure (each judge declares its rule).

Every judge of the five papers averages over samples without weights: BooookScore is the mean over
books (seed 003), SUMIE reports mean P and R and the macro F1 over entities (seed 000, table 1),
KGScore, ROUGE and accuracy are means over summaries or questions. A sample whose value is
undefined (NaN) is left out, as pandas' mean does.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

Aggregate = Callable[[Iterable[float]], float]


def mean_over_samples(values: Iterable[float]) -> float:
    """The unweighted mean of per-sample values, NaN and None left out; NaN when nothing is left."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    return sum(vals) / len(vals) if vals else math.nan
