"""Every registered method once on the bundled SmolLM2 through the real engine, in the default suite.

The slow module (test_real_engine.py) runs the methods at length; this one runs each on a two-chunk book
with tiny budgets on the session's one engine (tests/conftest.py), so a change that breaks a method on
the real engine fails CI. The methods come from the registry: a newly registered method is run here
without a line added. What is checked is the unit a run would record: its steps and token counts
as the engine reported them, and its `samples` and `steps` rows written as Parquet and read back.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from memloop.eval.datasets.sample import Sample
from memloop.eval.methods import list_methods, method_class
from memloop.eval.methods.outcomes import StepOutcome
from memloop.jobs.store.run_files import to_parquet
from memloop.jobs.store.tables import now, sample_row, step_rows

# A tiny input per task; a method takes the first task of this order that it accepts.
SAMPLES = {
    "book": Sample(
        id="book/tiny",
        task="book",
        chunks=("Anna sailed from Dover to Crete with her brother Tom.", "In Crete, Anna became captain of the ship."),
    ),
    "arxiv": Sample(
        id="arxiv/tiny",
        task="arxiv",
        chunks=("We study coral bleaching under heat stress.", "Recovery is faster with tidal flushing."),
    ),
    "sumie": Sample(
        id="sumie/tiny",
        task="sumie",
        chunks=("HOTEL0 has two pools.", "HOTEL0 serves a cold breakfast."),
        metadata={"entity": "HOTEL0"},
    ),
}
MAX_TOKENS = 16
# Budgets applied to every method whose settings have the field: one try per step, one tool call per chunk, one
# compression round, summaries and windows that fit the tiny book (a compile of a new shape costs seconds here).
BUDGETS = {
    "max_tokens": MAX_TOKENS,
    "max_attempts": 1,
    "max_tool_calls": 1,
    "compress_rounds": 1,
    "max_summary_tokens": 64,
    "word_limit": 40,
    "context_window": 2048,
}


@dataclass(frozen=True)
class _Keyed:
    key: str


@dataclass(frozen=True)
class _Unit:
    """What the row builders read of a run's unit (memloop.jobs.store.units.UnitLike)."""

    sample: Sample
    method: _Keyed
    dataset: _Keyed = _Keyed("tiny")
    repeat: int = 0
    seed: int = 0
    chunk_tokens: int | None = None
    input_tokens: int | None = None

    @property
    def key(self) -> str:
        return f"tiny|{self.sample.id}|{self.method.key}|0"


def _sample_for(name: str) -> Sample:
    tasks = method_class(name).tasks
    for task, sample in SAMPLES.items():
        if tasks is None or task in tasks:
            return sample
    raise AssertionError(f"method {name!r} takes tasks {tasks}: add a tiny sample of one of them to SAMPLES")


def _settings(name: str) -> dict[str, int]:
    fields = {f.name for f in dataclasses.fields(method_class(name).Settings)}
    return {k: v for k, v in BUDGETS.items() if k in fields}


def _read_back(table: str, rows: list[dict]) -> pa.Table:
    """The rows as a shard file holds them: written with the table's schema, read back."""
    return pq.read_table(pa.BufferReader(to_parquet(table, [dict(r, run_id="r", shard="s") for r in rows])))


class _CapsSeen:
    """The session's engine LLM, noting each request's max_tokens: a step's output is bounded by the cap its
    own request carried (seed 000's memory steps raise theirs above max_tokens to fit the memory)."""

    def __init__(self, llm) -> None:
        self._llm, self.caps = llm, []

    def complete(self, request):
        self.caps.append(request.sampling.max_tokens)
        return self._llm.complete(request)

    def __getattr__(self, name: str):
        return getattr(self._llm, name)


@pytest.mark.parametrize("name", list_methods())
def test_the_method_completes_a_unit_on_the_engine(name: str, engine_llm) -> None:
    sample = _sample_for(name)
    method = method_class(name)(**_settings(name))
    llm = _CapsSeen(engine_llm)
    out = method.run(sample, llm)
    assert (out.method, out.sample_id) == (name, sample.id)
    assert out.not_run is None and out.not_applicable is None, (out.not_run, out.not_applicable)
    assert out.steps, f"{name} asked the engine nothing"
    calls = [s for s in out.steps if s.started_at is not None]  # one request per LLM step (max_attempts 1)
    assert len(llm.caps) == len(calls) and min(llm.caps) >= 1
    caps = dict(zip((s.index for s in calls), llm.caps))
    for step in out.steps:
        # the counts are the engine's: the prompt with its chat template, the output within its request's cap
        assert step.usage.prompt_tokens >= engine_llm.count_tokens(step.prompt) > 0, step
        assert 0 < step.usage.decoded_tokens <= caps.get(step.index, MAX_TOKENS), step
        assert step.retry_usage.decoded_tokens == 0 and step.attempts == 1  # max_attempts 1
        assert step.template_id in method.template_ids and out.templates[step.template_id] == step.template_sha256
        assert isinstance(step.outcome, StepOutcome) and (step.ok or step.failures), step
    usage = out.usage
    assert usage.decoded_tokens == sum(s.usage.decoded_tokens for s in out.steps)
    assert isinstance(out.answer, str)
    json.dumps(out.memory)  # the memory is JSON, as the samples row stores it
    # the unit as a run records it: one samples row (ok, or failed with the reason) and a steps row per step
    unit = _Unit(sample, _Keyed(name))
    [row] = _read_back("samples", [sample_row(unit, "ok", None, 1, out, now(), engine_llm.name)]).to_pylist()
    steps = _read_back("steps", step_rows(unit, out)).to_pylist()
    assert row["n_steps"] == len(steps) == len(out.steps)
    assert (row["prompt_tokens"], row["decoded_tokens"]) == (usage.prompt_tokens, usage.decoded_tokens) != (0, 0)
    assert row["status"] == ("ok" if out.failure is None else "failed")
    assert row["status"] == "ok" or row["error"] == out.failure  # a failed unit says why
    assert json.loads(row["output_json"])["answer"] == out.answer
    assert [s["outcome"] for s in steps] == [str(s.outcome) for s in out.steps]
    assert all(s["decoded_tokens"] > 0 for s in steps)
    print(f"\n{name}: {[(s.kind, str(s.outcome)) for s in out.steps]} {row['status']} usage={usage}")
