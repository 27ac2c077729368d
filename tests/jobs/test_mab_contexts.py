"""The MemoryAgentBench report says when a run holds fewer contexts of a source than the benchmark runs."""

from __future__ import annotations

import json

import pandas as pd
from memloop.jobs.results.mab_contexts import contexts_note, reduced_sources

from tests.datasets.test_memoryagentbench import detective_file


def _samples(samples: list, methods: tuple[str, ...] = ("prism-inplace", "long-context")) -> pd.DataFrame:
    """The run's samples table as the run writes it: one row per unit, `items_json` from the loader's metadata."""
    return pd.DataFrame(
        [
            {"sample_id": s.id, "method": m, "items_json": json.dumps(s.metadata["scored_items"], sort_keys=True)}
            for s in samples
            for m in methods
        ]
    )


def test_a_reduced_run_is_said_to_be_reduced_and_a_full_one_is_not(tmp_path):
    from memloop.eval.datasets.memoryagentbench import load_memoryagentbench

    path = detective_file(tmp_path, 12)
    full = _samples(load_memoryagentbench(path))
    assert reduced_sources(full) == {} and "as the benchmark runs them" in contexts_note(full)
    cut = _samples(load_memoryagentbench(path, contexts_per_source=2))
    assert reduced_sources(cut) == {"detective_qa": (2, 10), "infbench_sum_eng_shots2": (2, 3)}
    assert "Reduced run" in contexts_note(cut) and "detective_qa 2 of 10" in contexts_note(cut)
    # units written before the count was recorded say nothing about it
    old = pd.DataFrame([{"sample_id": "mab/detective-qa/0", "items_json": json.dumps({"count": 1})}])
    assert reduced_sources(old) == {}
