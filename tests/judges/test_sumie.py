"""SUMIE matching: pair extraction from JSON memories, P/R/F1 per turn, both matchers, table-1 aggregation."""
from __future__ import annotations

import json

import pytest

from eval.errors import JudgeError
from eval.judges import run_judge
from eval.asking import ParseFailure
from eval.judges.sumie import aggregate_turns, normalise, pairs_of, parse_match, prf, rescore, turn_summary
from eval.judges.records import Judgment
from eval.llm import ScriptedLLM

GOLD = {"entity_name": "Ada Quill", "turns": [
    {"occupation": ["chemist"], "birth place": ["Leeds"]},
    {"occupation": ["chemist", "teacher"], "birth place": ["Leeds"], "award": ["Davy Medal"]},
]}


def test_pairs_of_flattens_nested_memories():
    mem = {"occupation": ["Chemist", "teacher"], "life": {"born": "Leeds", "died": None}, "notes": []}
    assert pairs_of(mem) == [("occupation", "Chemist"), ("occupation", "teacher"), ("life born", "Leeds")]
    assert pairs_of(json.dumps({"a": 1})) == [("a", "1")]
    # the methods' SUMIE memory: {"attributes": {attribute: [values]}}
    assert pairs_of({"attributes": {"Amenities": ["two pools", "pub"], "Noise": []}}) == [
        ("Amenities", "two pools"), ("Amenities", "pub")]
    assert pairs_of({"attributes": {"life": {"born": "Leeds"}}}) == [("born", "Leeds")]
    with pytest.raises(JudgeError, match="text"):
        pairs_of("Ada is a chemist.")
    assert normalise("Birth_Place ") == "birth place" and normalise("Davy-Medal!") == "davy medal"


def test_prf_hand_computed_partial_match():
    # 3 predicted pairs: two supported (one by two gold pairs), one not; 4 gold pairs, 3 recalled.
    p = prf([("a", "1")] * 3, [("g", "x")] * 4, [{0, 1}, {2}, set()])
    assert p["precision"] == pytest.approx(2 / 3) and p["recall"] == pytest.approx(3 / 4)
    assert p["f1"] == pytest.approx(2 * (2 / 3) * (3 / 4) / (2 / 3 + 3 / 4))
    assert prf([], [("g", "x")], []) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}


def test_exact_matcher_per_turn():
    preds = [{"Occupation": "chemist", "hobby": "chess"},
             {"occupation": ["Chemist", "teacher"], "birth_place": "leeds", "award": "Nobel"}]
    r = run_judge("sumie-exact", preds, GOLD)
    assert r.score("precision", 0) == pytest.approx(0.5) and r.score("recall", 0) == pytest.approx(0.5)
    assert r.score("precision", 1) == pytest.approx(3 / 4) and r.score("recall", 1) == pytest.approx(3 / 4)
    assert r.score("f1", 1) == pytest.approx(0.75)
    assert {(s.metric, s.turn) for s in r.scores} == {(m, t) for m in ("precision", "recall", "f1") for t in (0, 1)}
    final_only = run_judge("sumie-exact", preds[1], GOLD)
    assert [s.turn for s in final_only.scores] == [1, 1, 1]
    with pytest.raises(JudgeError, match="3 per-turn predictions for 2"):
        run_judge("sumie-exact", preds + preds[:1], GOLD)
    with pytest.raises(JudgeError, match="turns"):
        run_judge("sumie-exact", preds, {"entity_name": "x"})


def test_llm_matcher_pins_prompt_and_recall_from_citations():
    llm = ScriptedLLM(['{"supported_by": [1]}', '{"supported_by": [7]}', '{"supported_by": []}',
                       '{"supported_by": [2, 3]}'])
    r = run_judge("sumie", [{"job": "chemist", "hobby": "chess"}, {"jobs": "chemist and teacher"}], GOLD, llm,
                  max_workers=1)
    prompt = llm.requests[0].messages[0]["content"]
    assert "about Ada Quill" in prompt and "Predicted fact:\njob: chemist" in prompt
    assert "1. occupation: chemist\n2. birth place: Leeds" in prompt
    assert r.score("precision", 0) == 0.5 and r.score("recall", 0) == 0.5  # "[7]" was out of range -> retried
    assert r.judgments[1].retries == 1
    assert r.score("precision", 1) == 1.0 and r.score("recall", 1) == pytest.approx(2 / 4)
    back = [Judgment.from_record(json.loads(json.dumps(x.to_record()))) for x in r.judgments]
    assert rescore(back, GOLD)[1]["recall"] == pytest.approx(0.5)


def test_llm_matcher_extracts_pairs_from_text_predictions():
    llm = ScriptedLLM(['{"pairs": [{"attribute": "occupation", "value": "chemist"}]}', '{"supported_by": [1]}'])
    r = run_judge("sumie", "Ada Quill is a chemist.", GOLD, llm)
    assert "Ada Quill is a chemist." in llm.requests[0].messages[0]["content"]
    assert r.score("precision", 1) == 1.0 and r.score("recall", 1) == pytest.approx(0.25)
    with pytest.raises(ParseFailure):
        parse_match('{"supported_by": [0]}', 3)


def test_aggregate_turns_table1():
    a = [{"precision": 1.0, "recall": 0.5, "f1": 2 / 3}, {"precision": 0.5, "recall": 0.5, "f1": 0.5}]
    b = [{"precision": 0.0, "recall": 0.0, "f1": 0.0}, {"precision": 1.0, "recall": 1.0, "f1": 1.0}]
    t = aggregate_turns([a, b])
    assert t["start"]["precision"] == 0.5 and t["last"]["f1"] == 0.75
    assert t["avg"]["f1"] == pytest.approx(((2 / 3 + 0.5) / 2 + 0.5) / 2)


def test_turn_summary_is_start_last_and_mean_over_turns():
    assert turn_summary([0.2, 0.6, 0.4]) == {"start": 0.2, "last": 0.4, "avg": pytest.approx(0.4)}
    assert turn_summary({2.0: 0.4, 0.0: 0.2, 1.0: 0.6}) == turn_summary([0.2, 0.6, 0.4])  # report rows: {turn: value}
    assert turn_summary([0.5, float("nan"), 1.0])["avg"] == 0.75  # an undefined turn is left out
    with pytest.raises(JudgeError, match="at least one turn"):
        turn_summary([])


def test_llm_matcher_samples_at_the_papers_temperature():
    """Seed 000 judges SUMIE at temperature 0.8; the judge's `temperature` option changes it."""
    llm = ScriptedLLM(['{"pairs": [{"attribute": "occupation", "value": "chemist"}]}', '{"supported_by": [1]}'])
    run_judge("sumie", "Ada Quill is a chemist.", GOLD, llm)
    assert [r.sampling.temperature for r in llm.requests] == [0.8, 0.8]
    llm = ScriptedLLM(['{"pairs": [{"attribute": "occupation", "value": "chemist"}]}', '{"supported_by": [1]}'])
    run_judge("sumie", "Ada Quill is a chemist.", GOLD, llm, temperature=0.0)
    assert [r.sampling.temperature for r in llm.requests] == [0.0, 0.0]
    with pytest.raises(JudgeError, match="temperature"):
        run_judge("sumie", "x", GOLD, llm, temperature=-1)
