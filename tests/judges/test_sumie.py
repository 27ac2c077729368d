"""SUMIE matching: pair extraction from JSON memories, P/R/F1 per turn, both matchers, table-1 aggregation."""

from __future__ import annotations

import json
import math

import pytest
from memloop.eval.asking import ParseFailure
from memloop.eval.errors import JudgeError
from memloop.eval.judges import run_judge
from memloop.eval.judges.records import Judgment
from memloop.eval.judges.sumie import (
    aggregate_turns,
    both_ways_prf,
    normalise,
    pairs_of,
    parse_match,
    prf,
    rescore,
    turn_summary,
)
from memloop.eval.llm import ScriptedLLM

GOLD = {
    "entity_name": "Ada Quill",
    "turns": [
        {"occupation": ["chemist"], "birth place": ["Leeds"]},
        {"occupation": ["chemist", "teacher"], "birth place": ["Leeds"], "award": ["Davy Medal"]},
    ],
}


def test_pairs_of_flattens_nested_memories():
    mem = {"occupation": ["Chemist", "teacher"], "life": {"born": "Leeds", "died": None}, "notes": []}
    assert pairs_of(mem) == [("occupation", "Chemist"), ("occupation", "teacher"), ("life born", "Leeds")]
    assert pairs_of(json.dumps({"a": 1})) == [("a", "1")]
    # the methods' SUMIE memory: {"attributes": {attribute: [values]}}
    assert pairs_of({"attributes": {"Amenities": ["two pools", "pub"], "Noise": []}}) == [
        ("Amenities", "two pools"),
        ("Amenities", "pub"),
    ]
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
    preds = [
        {"Occupation": "chemist", "hobby": "chess"},
        {"occupation": ["Chemist", "teacher"], "birth_place": "leeds", "award": "Nobel"},
    ]
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


def _pairs(*pairs: tuple[str, str]) -> str:
    return json.dumps({"pairs": [{"attribute": a, "value": v} for a, v in pairs]})


def test_llm_matcher_one_path_for_json_and_text_and_both_directions():
    """Issue 30 point 9: a JSON memory goes through the same extraction as a text one; precision asks
    which gold facts each predicted fact states, recall which predicted facts state each gold fact."""
    llm = ScriptedLLM([_pairs(("job", "chemist")), '{"supported_by": [1]}', '{"stated_by": [1]}', '{"stated_by": []}'])
    r = run_judge(
        "sumie",
        [{"job": "chemist"}, ""],
        {"entity_name": "Ada Quill", "turns": GOLD["turns"][:1] * 2},
        llm,
        max_workers=1,
    )
    extract = llm.requests[0].messages[0]["content"]
    assert '{"job":"chemist"}' in extract and "about Ada Quill" in extract  # compact JSON, as the prompts carry it
    assert "Predicted fact:\njob: chemist" in llm.requests[1].messages[0]["content"]
    recall = llm.requests[2].messages[0]["content"]
    assert "Reference fact:\noccupation: chemist" in recall and "Facts of the summary:\n1. job: chemist" in recall
    assert r.score("precision", 0) == 1.0 and r.score("recall", 0) == 0.5
    assert r.score("precision", 1) == 0.0 and r.score("recall", 1) == 0.0  # an empty memory: no call, no fact
    assert len(llm.requests) == 4
    back = [Judgment.from_record(json.loads(json.dumps(x.to_record()))) for x in r.judgments]
    assert rescore(back, {"turns": GOLD["turns"][:1] * 2})[0] == {
        "precision": 1.0,
        "recall": 0.5,
        "f1": pytest.approx(2 / 3),
    }


def test_merged_values_count_and_repeats_count_against_precision():
    """A merged value states each gold fact it carries; a fact already stated counts against precision."""
    llm = ScriptedLLM(
        [
            _pairs(("jobs", "chemist and teacher"), ("job", "chemist"), ("hobby", "chess")),
            '{"supported_by": [1, 2]}',
            '{"supported_by": [1]}',
            '{"supported_by": []}',
            '{"stated_by": [1, 2]}',
            '{"stated_by": [1]}',
            '{"stated_by": []}',
            '{"stated_by": []}',
        ]
    )
    r = run_judge(
        "sumie", "Ada Quill is a chemist and teacher. She is a chemist. She plays chess.", GOLD, llm, max_workers=1
    )
    assert "merge" in llm.requests[1].messages[0]["content"]
    # precision 1 of 3: the merged value is right, its repeat "chemist" and "chess" are not; recall 2 of 4
    assert r.score("precision", 1) == pytest.approx(1 / 3) and r.score("recall", 1) == 0.5
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
    with pytest.raises(JudgeError, match="at least one turn"):
        turn_summary({})


def test_turn_summary_of_a_mapping_without_turn_zero_has_no_start_and_no_average():
    got = turn_summary({1: 0.2, 2: 0.4})  # GO: scored from a later turn on
    assert math.isnan(got["start"]) and math.isnan(got["avg"]) and got["last"] == 0.4
    gap = turn_summary({0: 0.2, 2: 0.4})  # turn 1 missing: the start is known, the average is not
    assert gap["start"] == 0.2 and math.isnan(gap["avg"]) and gap["last"] == 0.4


def test_aggregate_turns_refuses_no_samples_and_a_sample_without_turns():
    one = [{"precision": 1.0, "recall": 1.0, "f1": 1.0}]
    for bad in ([], [one, []], [[]]):
        with pytest.raises(JudgeError, match="at least one sample"):
            aggregate_turns(bad)


def test_both_ways_prf_counts_each_gold_fact_once_and_every_new_one():
    # predicted facts 0 and 1 state gold facts 0 and 1; fact 2 repeats gold fact 0 (counts against precision)
    got = both_ways_prf(3, 3, [{0}, {1}, {0}], [{0, 2}, {1}, set()])
    assert got["precision"] == pytest.approx(2 / 3) and got["recall"] == pytest.approx(2 / 3)
    # a merged value states two gold facts at once; a later fact stating one of them plus a new one counts
    merged = both_ways_prf(3, 3, [{0, 1}, {1, 2}, {2}], [{0}, {0, 1}, {1, 2}])
    assert merged["precision"] == pytest.approx(2 / 3) and merged["recall"] == 1.0


def test_llm_matcher_samples_at_the_papers_temperature():
    """Seed 000 judges SUMIE at temperature 0.8; the judge's `temperature` option changes it."""
    script = [
        _pairs(("occupation", "chemist")),
        '{"supported_by": [1]}',
        '{"stated_by": [1]}',
        '{"stated_by": []}',
        '{"stated_by": []}',
        '{"stated_by": []}',
    ]
    llm = ScriptedLLM(script)
    run_judge("sumie", "Ada Quill is a chemist.", GOLD, llm, max_workers=1)
    assert [r.sampling.temperature for r in llm.requests] == [0.8] * 6
    llm = ScriptedLLM(script)
    run_judge("sumie", "Ada Quill is a chemist.", GOLD, llm, temperature=0.0, max_workers=1)
    assert [r.sampling.temperature for r in llm.requests] == [0.0] * 6
    with pytest.raises(JudgeError, match="temperature"):
        run_judge("sumie", "x", GOLD, llm, temperature=-1)


def test_max_pairs_caps_the_facts_an_extraction_may_list():
    """The extraction's JSON schema lists at most `max_pairs` facts (60 by default): each is one match call."""
    script = [_pairs(("occupation", "chemist")), '{"supported_by": [1]}'] + ['{"stated_by": [1]}'] * 4
    for options, cap in (({}, 60), ({"max_pairs": 2}, 2)):
        llm = ScriptedLLM(script, supports_json_schema=True)
        run_judge("sumie", "Ada Quill is a chemist.", GOLD, llm, max_workers=1, **options)
        assert llm.requests[0].json_schema["properties"]["pairs"]["maxItems"] == cap
    with pytest.raises(JudgeError, match="max_pairs"):
        run_judge("sumie", "x", GOLD, ScriptedLLM(script), max_pairs=0)


def test_a_large_memory_is_extracted_in_parts_and_judged_whole() -> None:
    """Issue 46 point 5: one extraction answers at most 60 pairs in 1024 tokens, so an unlimited CoK/GM
    memory was cut and its unit's judgment failed. A memory over EXTRACT_PART_TOKENS is read in parts,
    each a JSON object with its values' keys, and the parts' facts are judged together."""
    from memloop.eval.judges.sumie import EXTRACT_PART_TOKENS, memory_parts

    memory = {
        "attributes": {f"attribute {i}": [f"value {i} number {j} with some words" for j in range(3)] for i in range(40)}
    }  # 240 words of values: well over one part
    count = ScriptedLLM([]).count_tokens
    parts = memory_parts(memory, count)
    assert len(parts) > 1 and all(count(p) <= EXTRACT_PART_TOKENS for p in parts)
    values = [v for p in parts for vs in json.loads(p)["attributes"].values() for v in vs]
    assert values == [v for vs in memory["attributes"].values() for v in vs]  # every value once, in order
    text = " ".join(f"Ada won prize {i} in a long ceremony held in the city." for i in range(60))
    text_parts = memory_parts(text, count)
    assert len(text_parts) > 1 and " ".join(text_parts) == text
    assert memory_parts({"a": ["b"]}, count) == ['{"a":["b"]}']

    gold = {"entity_name": "Ada Quill", "turns": [{"occupation": ["chemist"]}]}
    outputs = [_pairs(("attribute", f"part {n}")) for n in range(len(parts))]
    outputs += ['{"supported_by": [1]}'] * len(parts) + ['{"stated_by": [1]}']
    llm = ScriptedLLM(outputs)
    r = run_judge("sumie", [memory], gold, llm, max_workers=1)
    extracts = [q.messages[0]["content"] for q in llm.requests[: len(parts)]]
    assert all(p in e for p, e in zip(parts, extracts))
    assert r.score("precision", 0) == 1 / len(parts) and r.score("recall", 0) == 1.0  # all parts' facts judged
    assert [j.item for j in r.judgments[:2]] == [
        f"turn 0: facts stated in the memory (part {n} of {len(parts)})" for n in (1, 2)
    ]
