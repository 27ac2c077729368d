"""How many contexts per source a MemoryAgentBench run holds against how many the benchmark runs.

The benchmark runs each source's first `max_test_samples` contexts (DetectiveQA 10, ∞Bench-Sum 100, ...;
`memloop.eval.datasets.mab_sources`); a reduced config (`contexts_per_source`, `--limit`) runs fewer, and
its figures are then over fewer contexts than the paper's. The loader records the benchmark's count in
each sample's `scored_items` (`samples.items_json`); this compares it with the run's distinct contexts.
"""

from __future__ import annotations

import json

import pandas as pd


def reduced_sources(samples: pd.DataFrame) -> dict[str, tuple[int, int]]:
    """source -> (contexts in the run, contexts the benchmark runs), for the sources the run has fewer of.
    Units written before the count was recorded say nothing and are not counted."""
    run: dict[str, set[str]] = {}
    bench: dict[str, int] = {}
    if samples.empty or "items_json" not in samples:
        return {}
    for sample_id, items_json in zip(samples["sample_id"], samples["items_json"]):
        items = json.loads(items_json) if isinstance(items_json, str) else {}
        if "benchmark_contexts" not in items:
            continue
        run.setdefault(items["source"], set()).add(sample_id)
        bench[items["source"]] = int(items["benchmark_contexts"])
    return {s: (len(ids), bench[s]) for s, ids in sorted(run.items()) if len(ids) < bench[s]}


def contexts_note(samples: pd.DataFrame) -> str:
    """One sentence for the report: the run's contexts per source as the benchmark's, or which were cut."""
    cut = reduced_sources(samples)
    if not cut:
        return (
            "Contexts: every source's as the benchmark runs them (its configs' `max_test_samples`, at most the "
            "rows the data has)."
        )
    listed = ", ".join(f"{s} {n} of {b}" for s, (n, b) in cut.items())
    return (
        f"Reduced run: fewer contexts than the benchmark runs (its configs' `max_test_samples`): {listed}; "
        "these sources' figures are over those contexts only."
    )
