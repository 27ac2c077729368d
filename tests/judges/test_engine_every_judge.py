"""Every registered LLM judge once on the bundled SmolLM2 through the real engine, in the default suite.

The slow module (test_real_judges.py) runs the judges at length; this one gives each a tiny input and
small budgets on the session's one engine (tests/conftest.py), so a change that breaks a judge on the
real engine fails CI. The judges come from the registry: a newly registered LLM judge fails
`test_every_llm_judge_has_a_case` until it has a case here. What is checked is what a run records: the
judge's headline metrics, in range, with its judgments' prompts and usage, written as Parquet rows and
read back.
"""

from __future__ import annotations

import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from memloop.eval.judges import get_judge, list_judges, run_judge
from memloop.jobs.store.run_files import to_parquet
from memloop.jobs.store.tables import judge_rows

SUMMARY = "Mara keeps the lighthouse on Northern Island. She hides a sailor, Tomas, from smugglers."
SUMIE_GOLD = {
    "entity_name": "HOTEL0",
    "turns": [{"pools": ["two large pools"]}, {"pools": ["two large pools"], "breakfast": ["cold breakfast"]}],
}
LME_GOLD = {
    "questions": ["Where do I live now?"],
    "answers": [["Lisbon"]],
    "qa_pair_ids": ["lme-1"],
    "question_ids": ["lme-1"],
    "question_types": ["knowledge-update"],
}
# name -> (output, gold, metadata, options): one try per call and short answers
CASES = {
    "booookscore": (SUMMARY, None, {}, {"max_tokens": 64, "max_attempts": 1, "on_invalid": "record"}),
    "booookscore-batched": (
        SUMMARY,
        None,
        {},
        {"batch_size": 2, "max_tokens_per_sentence": 48, "max_attempts": 1, "on_invalid": "record"},
    ),
    "sumie": (
        [{"pools": "two pools"}, {"pools": "two pools", "breakfast": "cold"}],
        SUMIE_GOLD,
        {},
        {"max_attempts": 1, "on_invalid": "record", "max_pairs": 3, "temperature": 0.0},
    ),
    "kgscore": (
        SUMMARY,
        "Mara hides Tomas from the smugglers.",
        {},
        {"entities": ["Mara", "Tomas"], "max_edges": 2, "max_tokens": 96, "max_attempts": 1, "on_invalid": "record"},
    ),
    "mab-llm": (json.dumps(["You live in Lisbon."]), LME_GOLD, {"source": "longmemeval_s*"}, {"max_attempts": 1}),
}
LLM_JUDGES = [n for n in list_judges() if get_judge(n).needs_llm]


def _read_back(table: str, rows: list[dict]) -> pa.Table:
    return pq.read_table(
        pa.BufferReader(
            to_parquet(
                table,
                [
                    dict(r, run_id="r", shard="s", unit="u", dataset="d", task="t", sample_id="x", method="m", repeat=0)
                    for r in rows
                ],
            )
        )
    )


def test_every_llm_judge_has_a_case() -> None:
    assert sorted(CASES) == sorted(LLM_JUDGES), "give a newly registered LLM judge a tiny case in CASES"


@pytest.mark.parametrize("name", LLM_JUDGES)
def test_the_judge_scores_on_the_engine(name: str, engine_llm) -> None:
    output, gold, metadata, options = CASES[name]
    info = get_judge(name)
    result = run_judge(name, output, gold, engine_llm, metadata=metadata, **options)
    assert result.judge == info.row_name
    calls = [j for j in result.judgments if j.prompt is not None]  # batched judgments share their call's record
    assert calls, f"{name} asked the engine nothing"
    for j in calls:
        assert j.usage.prompt_tokens >= engine_llm.count_tokens(j.prompt) > 0 and j.usage.decoded_tokens > 0, j
        assert j.template_id in info.templates and j.template_sha256 == info.template_hashes()[j.template_id]
    for j in result.judgments:
        assert j.valid or j.failures, j  # an invalid judgment carries its reason
    # the headline metrics, each a rate in [0, 1], once (per turn for a per-turn judge: SUMIE's two turns)
    turns = [None] if not info.per_turn else list(range(len(gold["turns"])))
    headline = [s for s in result.scores if s.metric in info.metrics]
    assert sorted((s.metric, -1 if s.turn is None else s.turn) for s in headline) == sorted(
        (m, -1 if t is None else t) for m in info.metrics for t in turns
    )
    for s in headline:
        assert 0.0 <= s.value <= 1.0 + 1e-9, s
    # the rows a run writes, read back from Parquet
    rows = judge_rows(result)
    scores = _read_back("scores", rows["scores"]).to_pylist()
    judgments = _read_back("judgments", rows["judgments"]).to_pylist()
    assert len(scores) == len(result.scores) and len(judgments) == len(result.judgments)
    assert {r["judge"] for r in scores + judgments} == {info.row_name}
    assert all(not math.isnan(r["value"]) for r in scores if r["metric"] in info.metrics)
    print(
        f"\n{name}: "
        + ", ".join(f"{s.metric}{'' if s.turn is None else f'@{s.turn}'}={s.value:.3f}" for s in result.scores)
        + f"; {len(result.judgments)} judgments, {result.usage}"
    )
