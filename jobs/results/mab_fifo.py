"""How many MemoryAgentBench contexts the long-context agent read only in part (FIFO truncation).

Where a context does not fit the model, the long-context agent keeps its last tokens that fit, as the
benchmark's long-context agents do (`memloop.eval.methods.fifo`); each unit's memory records it
(`fifo_truncated`, `kept_tokens`, `input_tokens`). The report says how many, so a figure over truncated
contexts is not read as one over whole ones.
"""

from __future__ import annotations

import json

import pandas as pd


def truncated_units(samples: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """method -> (units FIFO-truncated, units that recorded whether they were), for methods with any."""
    out: dict[str, tuple[int, int]] = {}
    if samples.empty or "output_json" not in samples:
        return out
    for method, output_json in zip(samples["method"], samples["output_json"]):
        memory = (json.loads(output_json).get("memory") if isinstance(output_json, str) else None) or {}
        if not isinstance(memory, dict) or "fifo_truncated" not in memory:
            continue
        cut, seen = out.get(method, (0, 0))
        out[method] = (cut + bool(memory["fifo_truncated"]), seen + 1)
    return out


def fifo_note(samples: pd.DataFrame) -> str | None:
    """One sentence for the report, or None when no unit recorded a fit."""
    units = truncated_units(samples)
    if not units:
        return None
    listed = ", ".join(f"{m} {cut} of {seen}" for m, (cut, seen) in sorted(units.items()))
    return (
        f"Contexts read in part (FIFO truncation: the last tokens that fit the model, as the benchmark's "
        f"long-context agents keep them; each unit's memory records what was kept): {listed}."
    )
