"""Every LLM judge once for real: the bundled SmolLM2 through the engine with JSON-schema constrained
decoding. A 135M model is a poor judge; what is checked is that its constrained answers always
parse and that the scores are well-formed and recorded with their prompts and usage."""

from __future__ import annotations

import pytest
from memloop.eval.judges import run_judge

pytestmark = pytest.mark.slow

SUMMARY = (
    "Mara keeps the lighthouse on Northern Island. After a storm she finds a wounded sailor, Tomas, on the "
    "rocks. The guild fines her. When smugglers come looking for Tomas, Mara hides him. In spring they leave "
    "the island together."
)
GOLD = {
    "entity_name": "HOTEL0",
    "turns": [{"pools": ["two large pools"]}, {"pools": ["two large pools"], "breakfast": ["cold breakfast"]}],
}


def _check(result, n_min: int = 1) -> None:
    print(
        f"\n{result.judge}: "
        + ", ".join(f"{x.metric}{'' if x.turn is None else f'@{x.turn}'}={x.value:.3f}" for x in result.scores)
        + f"; {len(result.judgments)} judgments, usage {result.usage}"
    )
    assert len(result.judgments) >= n_min
    calls = [j for j in result.judgments if j.prompt is not None]  # batched judgments share their call's record
    assert calls
    for j in result.judgments:
        if j.source == "llm":
            assert j.valid and not j.failures, (j.raw, j.failures)  # constrained answers parse first time
    for j in calls:
        assert j.constrained and j.usage.prompt_tokens > 0 and j.usage.decoded_tokens > 0


def test_booookscore_per_sentence(engine_llm):
    r = run_judge("booookscore", SUMMARY, None, engine_llm, max_tokens=120)
    _check(r, 5)
    assert r.score("sentences") == 5 and 0.0 <= r.score("booookscore") <= 1.0 and r.score("invalid") == 0


def test_booookscore_batched(engine_llm):
    r = run_judge("booookscore-batched", SUMMARY, None, engine_llm, batch_size=3, max_tokens_per_sentence=80)
    _check(r, 5)
    assert len(r.judgments) == 5 and len([j for j in r.judgments if j.prompt]) == 2  # 3 + 2 sentences
    assert 0.0 <= r.score("booookscore") <= 1.0


def test_sumie_llm_matcher(engine_llm):
    preds = [{"pools": "two large pools"}, {"pools": "two pools", "breakfast": "cold", "view": "sea"}]
    r = run_judge("sumie", preds, GOLD, engine_llm)
    _check(r, 2)  # at least one extraction per turn, then matches both ways
    for t in (0, 1):
        assert 0.0 <= r.score("f1", t) <= 1.0


def test_sumie_text_prediction_extraction(engine_llm):
    r = run_judge("sumie", "HOTEL0 has two large pools and serves a cold breakfast.", GOLD, engine_llm)
    _check(r, 1)
    assert r.judgments[0].item.endswith("facts stated in the memory")


def test_kgscore(engine_llm):
    ref = "Mara hides Tomas from the smugglers. Mara and Tomas leave Northern Island."
    r = run_judge(
        "kgscore", SUMMARY, ref, engine_llm, entities=["Mara", "Tomas", "Northern Island"], max_edges=6, max_tokens=400
    )
    _check(r, 2)
    assert r.details["edge_cap"] == 6 and r.score("edge_cap_hit") == len(r.details["edge_cap_hit"])  # a cap is reported
    for m in ("precision", "recall", "f1"):
        assert 0.0 <= r.score(m) <= 1.0 + 1e-6
    r2 = run_judge("kgscore", SUMMARY, ref, engine_llm, max_edges=6, max_tokens=400)  # entities listed by the judge
    _check(r2, 3)
    assert r2.details["entities"]
