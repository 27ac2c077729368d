"""Hand-made rows of a run, as the run writes them (a unit's key columns, its `samples` and `steps` rows, an
invocation's `runs` manifest), for tests that build a run through the run store and check what is computed
from it. Every number a test asserts on is an argument; the defaults are the columns no test reads."""

from __future__ import annotations

import datetime as dt
from typing import Any

from memloop.jobs.store.tables import now
from memloop.jobs.store.units import unit_key


def unit_columns(dataset: str, sample: str, method: str, repeat: int) -> dict[str, Any]:
    """The columns naming a unit, shared by its samples, steps, scores and judgments rows."""
    return dict(
        unit=unit_key(dataset, sample, method, repeat),
        dataset=dataset,
        task=dataset.split(":")[0],
        sample_id=sample,
        method=method,
        repeat=repeat,
    )


def samples_row(
    base: dict[str, Any],
    status: str = "ok",
    error: str | None = None,
    *,
    at: dt.datetime | None = None,
    output_json: str = '"s"',
    n_steps: int = 1,
    prompt_tokens: int = 100,
    cached_tokens: int = 0,
    decoded_tokens: int = 10,
    chunk_tokens: int | None = None,
    actor: str = "a",
    **more: Any,
) -> dict[str, Any]:
    """A unit's `samples` row: one attempt (seeded by its repeat) started and finished at `at` (now if not
    given); by default one 100-token step decoding 10 tokens. `more`: other columns (`failure`)."""
    t = now() if at is None else at
    return dict(
        base,
        seed=base["repeat"],
        status=status,
        error=error,
        **more,
        attempts=1,
        output_json=output_json,
        n_steps=n_steps,
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        decoded_tokens=decoded_tokens,
        chunk_tokens=chunk_tokens,
        actor=actor,
        started_at=t,
        finished_at=t,
    )


def step_row(
    base: dict[str, Any], step: int, *, prompt: str = "p", prompt_tokens: int, cached_tokens: int, decoded_tokens: int
) -> dict[str, Any]:
    """A `steps` row with every column: an `update` step of template `t` whose output `o` parsed to `{}`."""
    return dict(
        base,
        step=step,
        kind="update",
        template_id="t",
        template_hash="h",
        prompt=prompt,
        output="o",
        parsed_json="{}",
        memory_json="{}",
        prompt_tokens=prompt_tokens,
        cached_tokens=cached_tokens,
        decoded_tokens=decoded_tokens,
        error=None,
        extra_json="{}",
    )


def manifest_row(
    output: str,
    invocation: str,
    *,
    samples: int,
    computed: int,
    failed: int = 0,
    skipped: int = 0,
    config_json: str = "{}",
    code_version: str = "git:x",
    stats_json: str = "{}",
    started_at: dt.datetime | None = None,
    finished_at: dt.datetime | None = None,
    wall_s: float = 1.0,
) -> dict[str, Any]:
    """An invocation's `runs` row (for `RunStore.write_manifest`), started and finished now unless given."""
    return dict(
        invocation=invocation,
        output=output,
        config_json=config_json,
        identity_json="{}",
        code_version=code_version,
        packages_json="{}",
        model_digest="d",
        template_hashes_json="{}",
        host="h",
        started_at=now() if started_at is None else started_at,
        finished_at=now() if finished_at is None else finished_at,
        wall_s=wall_s,
        samples=samples,
        computed=computed,
        skipped=skipped,
        failed=failed,
        stats_json=stats_json,
    )
