"""A hostile model output is one rejected entry with its reason, never a failed unit.

Python refuses to read an integer of more than 4,300 digits (a ValueError) and a parser that recurses
per nesting level or path segment overflows its stack (a RecursionError): both used to escape the
parsers' "never fail on one bad entry" and fail the whole unit. Each method here runs on a scripted
LLM whose answer holds such an entry beside good ones.
"""

from __future__ import annotations

import json

import pytest
from memloop.eval.datasets.sample import Sample
from memloop.eval.llm import ScriptedLLM
from memloop.eval.methods import get_method
from memloop.eval.methods.outcomes import StepOutcome

BIG = "9" * 5000  # past sys.get_int_max_str_digits() (4,300)
DEEP_PATH = "$" + "['a b']" * 1000  # a JSONPath the recursive parser cannot read
HOTEL = Sample(id="h0", task="sumie", chunks=("Two pools.", "A pub open late."), metadata={"entity": "HOTEL0"})


def test_gu_json_rejects_a_5000_digit_integer_as_one_attempt() -> None:
    llm = ScriptedLLM(['{"Amenities": [%s]}' % BIG, '{"Amenities": ["two pools"]}', '{"Amenities": ["pub open late"]}'])
    out = get_method("gu-json", max_attempts=2).run(HOTEL, llm)
    first = out.steps[0]
    assert first.ok and first.attempts == 2 and first.memory == {"Amenities": ["two pools"]}
    assert "an integer too long to read" in first.failures[0]
    assert out.memory == {"Amenities": ["pub open late"]} and out.failure is None


def test_cok_rejects_a_huge_integer_and_a_1000_segment_path_and_keeps_the_rest() -> None:
    answer = (
        "[UPDATED_OBJECTS]\n"
        '{"$.attributes.Amenities": {"update": [%s]}}\n'
        '{"%s": {"update": ["x"]}}\n'
        '{"$.attributes.Amenities": {"update": ["pub open late"]}}\n'
        "[ADDED_OBJECTS]\n"
        '{"$.attributes.Noise": {"add": ["quiet"]}}\n'
    ) % (BIG, DEEP_PATH)
    llm = ScriptedLLM(['{"Amenities": ["two pools"]}', '{"Amenities": ["pub open late"]}', answer])
    out = get_method("cok").run(HOTEL, llm)
    revise = out.steps[2]
    assert revise.kind == "revise" and revise.outcome == StepOutcome.OK
    assert out.memory == {"Amenities": ["two pools", "pub open late"], "Noise": ["quiet"]}
    reasons = " | ".join(out.failures)
    assert "an integer of 5000 digits is too long" in reasons
    assert "1000 segments, more than 200" in reasons


@pytest.mark.parametrize("name", ["prism-inplace", "prism-amendments"])
def test_prism_rejects_a_huge_integer_and_a_deep_path_and_keeps_the_rest(name: str) -> None:
    book = Sample(id="b", task="book", chunks=("Anna sails to Crete.",))
    answer = (
        "[OBJECTS FOR UPDATE]\n\n[OBJECTS FOR ADD]\n"
        "{\"$. 'attributes'. 'Count'\": {\"add\": %s}}\n"
        '{"%s": {"add": ["x"]}}\n'
        '{"$. \'attributes\'. \'Anna\'": {"add": ["sails to Crete"]}}'
    ) % (BIG, DEEP_PATH)
    llm = ScriptedLLM([answer, "Anna sails to Crete."])
    out = get_method(name).run(book, llm)
    assert out.memory == {"attributes": {"Anna": ["sails to Crete"]}} and out.failure is None
    reasons = " | ".join(out.failures)
    assert "an integer of 5000 digits is too long" in reasons and "segments, more than 200" in reasons


def test_the_json_extractor_names_a_hostile_value_and_reads_past_deep_nesting() -> None:
    from memloop.eval.asking import ParseFailure
    from memloop.eval.methods.parsing import extract_json, json_lines

    with pytest.raises(ParseFailure, match="nested too deeply"):
        extract_json("[" * 50_000 + "]" * 50_000)
    assert extract_json("[" * 50_000 + "]" * 50_000 + ' then {"a": 1}') == {"a": 1}
    with pytest.raises(ParseFailure, match="integer too long"):
        json_lines('{"a": %s}' % BIG)
    assert json.loads(json.dumps(extract_json('{"a": 1}'))) == {"a": 1}
