"""Hand-made rows of one unit, as the run writes them (its key columns and its `samples` row), for tests that
build a run through the run store and check the tables computed from it."""

from __future__ import annotations

from typing import Any

from memloop.jobs.store.tables import now
from memloop.jobs.store.units import unit_key


def unit_columns(dataset: str, sample: str, method: str, repeat: int) -> dict[str, Any]:
    """The columns naming a unit, shared by its samples, scores and judgments rows."""
    return dict(
        unit=unit_key(dataset, sample, method, repeat),
        dataset=dataset,
        task=dataset.split(":")[0],
        sample_id=sample,
        method=method,
        repeat=repeat,
    )


def samples_row(base: dict[str, Any], status: str, error: str | None, failure: str | None) -> dict[str, Any]:
    """A unit's `samples` row: one 100-token step decoding 10 tokens, finished now."""
    t = now()
    return dict(
        base,
        seed=base["repeat"],
        status=status,
        error=error,
        failure=failure,
        attempts=1,
        output_json='"s"',
        n_steps=1,
        prompt_tokens=100,
        cached_tokens=0,
        decoded_tokens=10,
        chunk_tokens=None,
        actor="a",
        started_at=t,
        finished_at=t,
    )
