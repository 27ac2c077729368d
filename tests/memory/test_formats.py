"""Parsing the CoK / PRISM answer formats and the JSON-Schema revision list for constrained decoding."""

from __future__ import annotations

import json

import jsonschema
import pytest
from llguidance import LLMatcher
from memloop.eval.memory import (
    Path,
    Revision,
    RevisionParseError,
    apply_revisions,
    parse_cok,
    parse_prism,
    parse_revision_list,
    render_cok,
    render_prism,
    revision_list_schema,
)
from memloop.eval.memory.errors import RevisionError
from memloop.eval.memory.schemas import (
    BOOK_SUMMARY,
    COMPARISON,
    FUNCTION_NATURAL_DESCRIPTOR,
    RELEVANT_TABLE_INFO,
    STORY_ELEMENTS,
    SUMIE_SUMMARY,
    TABLE_MEMORY,
)

ALL = [
    SUMIE_SUMMARY,
    STORY_ELEMENTS,
    BOOK_SUMMARY,
    FUNCTION_NATURAL_DESCRIPTOR,
    RELEVANT_TABLE_INFO,
    TABLE_MEMORY,
    COMPARISON,
]


def test_an_answer_without_sections_is_an_error_that_says_what_to_do():
    with pytest.raises(RevisionParseError, match=r"\[OBJECTS FOR UPDATE\] and \[OBJECTS FOR ADD\]"):
        parse_prism("I think the memory is fine.")
    with pytest.raises(RevisionParseError, match=r"\[UPDATED_OBJECTS\] and \[ADDED_OBJECTS\]"):
        parse_cok("[OBJECTS FOR ADD]\n{}")


def test_one_bad_line_spoils_only_itself():
    answer = (
        "[OBJECTS FOR UPDATE]\n{}\n[OBJECTS FOR ADD]\n"
        '{"$. \'attributes\'. \'A\'": {"add": ["a"]}}\n'
        '{"$. \'attributes\'. \'B\'": {"add": ["b" oops]}}\n'
        "{\"$. 'attributes'. 'C'\": [\"c\"]}\n"
        '{"$. \'attributes\'.. \'D\'": {"add": ["d"]}}\n'
        '{"$. \'attributes\'. \'E\'": {"add": ["e"]}}\n'
    )
    parsed = parse_prism(answer)
    assert [r.path.segments[-1] for r in parsed.revisions] == ["A", "E"]
    reasons = [r.reason for r in parsed.rejected]
    assert len(reasons) == 3
    assert "expected ',' or ']'" in reasons[0]
    assert 'must be {"add": value}' in reasons[1]
    assert "address exactly one node" in reasons[2] or "malformed" in reasons[2]
    assert all(r.raw for r in parsed.rejected)


def test_a_truncated_answer_keeps_the_complete_revisions():
    answer = '[OBJECTS FOR ADD]\n{"$.attributes.A": {"add": ["a"]}}\n{"$.attributes.B": {"add": ["b'
    parsed = parse_prism(answer)
    assert len(parsed.revisions) == 1 and "Unterminated string" in parsed.rejected[0].reason
    assert parsed.rejected[0].raw == '{"$.attributes.B": {"add": ["b'


def test_explicit_op_in_the_wrapper_wins_and_sections_order_updates_first():
    answer = (
        '[OBJECTS FOR ADD]\n{"$.attributes.N": {"add": ["n"]}}\n[OBJECTS FOR UPDATE]\n'
        '{"$.attributes.A": {"update": ["a2"]}}\n'
    )
    parsed = parse_prism(answer)
    assert [(r.op, r.path.segments[-1]) for r in parsed.revisions] == [("update", "A"), ("add", "N")]


def test_rendered_answers_parse_back():
    revs = [Revision("$.attributes.A", "update", ["x"]), Revision("$.attributes['B & C']", "add", ["y", "z"])]
    assert parse_cok(render_cok(revs)).revisions == revs
    assert parse_prism(render_prism(revs)).revisions == revs
    assert '[OBJECTS FOR UPDATE]\n{"$. \'attributes\'. \'A\'": {"update": ["x"]}}' in render_prism(revs)
    assert parse_prism(render_prism([])).revisions == []


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s.name)
def test_revision_list_schema_compiles_with_llguidance(schema):
    grammar = LLMatcher.grammar_from_json_schema(revision_list_schema(schema))
    assert LLMatcher.validate_grammar(grammar) == ""


def _valid(schema_json, obj) -> bool:
    return not list(jsonschema.Draft202012Validator(schema_json).iter_errors(obj))


def test_revision_list_schema_admits_exactly_well_shaped_revisions():
    js = revision_list_schema(FUNCTION_NATURAL_DESCRIPTOR)
    good = {
        "revisions": [
            {
                "path": "$. 'candidate_functions'. 'make_simple_prefix'",
                "op": "add",
                "value": {"purpose": "p", "input": "i", "output": "o", "procedure": "???"},
            },
            {"path": "$. 'candidate_functions'. 'it\\'s'. 'purpose'", "op": "update", "value": "q"},
        ]
    }
    assert _valid(js, good)
    for bad_item in [
        {"path": "$. 'candidate_functions'. 'f'", "op": "delete", "value": {}},
        {"path": "$. 'candidate_functions'. 'f'. 'colour'", "op": "add", "value": "red"},
        {"path": "$.candidate_functions.f", "op": "add", "value": {}},  # not the canonical quoting
        {"path": "$. 'candidate_functions'. 'f'", "op": "add", "value": {"purpose": 3}},
        {"path": "$. 'candidate_functions'. 'f'. 'purpose'", "op": "add", "value": "x", "extra": 1},
    ]:
        assert not _valid(js, {"revisions": [bad_item]}), bad_item
    parsed = parse_revision_list(json.dumps(good))
    assert parsed.rejected == []
    res = apply_revisions({}, parsed.revisions, FUNCTION_NATURAL_DESCRIPTOR)
    assert res.memory == {"candidate_functions": {"make_simple_prefix": good["revisions"][0]["value"]}}
    assert "does not exist" in res.rejected[0].reason


def test_every_schema_location_has_a_branch_that_admits_its_canonical_path():
    cases = {
        SUMIE_SUMMARY: ("$.attributes['Food & Beverage']", ["x"]),
        STORY_ELEMENTS: ("$.characters['Eleanor Bennett'][0]", "x"),
        BOOK_SUMMARY: ("$.attributes.plot", ["x"]),
        FUNCTION_NATURAL_DESCRIPTOR: ("$.candidate_functions.f.procedure", "x"),
        RELEVANT_TABLE_INFO: ("$.table_descriptions[12].relationships", ["x"]),
        TABLE_MEMORY: ("$.table_descriptions.Singers.thoughts[0]", "x"),
        COMPARISON: ("$.values.size[1]", "???"),
    }
    for schema, (path, value) in cases.items():
        item = {"path": Path.parse(path).text, "op": "add", "value": value}
        assert _valid(revision_list_schema(schema), {"revisions": [item]}), (schema.name, item)
        assert not _valid(revision_list_schema(schema, ops=("update",)), {"revisions": [item]})


def test_list_locations_accept_one_item_for_add():
    js = revision_list_schema(RELEVANT_TABLE_INFO)
    item = {"path": "$. 'table_descriptions'", "op": "add", "value": {"table_name": "Singer"}}
    assert _valid(js, {"revisions": [item]})
    res = apply_revisions({}, parse_revision_list({"revisions": [item, item]}).revisions, RELEVANT_TABLE_INFO)
    assert res.memory == {"table_descriptions": [{"table_name": "Singer"}, {"table_name": "Singer"}]}


def test_revision_list_parse_errors():
    with pytest.raises(RevisionParseError, match="not JSON"):
        parse_revision_list('{"revisions": [')
    with pytest.raises(RevisionParseError, match='must be {"revisions"'):
        parse_revision_list("[]")
    parsed = parse_revision_list(
        {
            "revisions": [
                {"path": "$.a"},
                {"path": "a", "op": "add", "value": 1},
                {"path": "$.a", "op": "merge", "value": 1},
            ]
        }
    )
    assert parsed.revisions == [] and len(parsed.rejected) == 3
    with pytest.raises(RevisionError, match="non-empty subset"):
        revision_list_schema(SUMIE_SUMMARY, ops=("delete",))


@pytest.mark.parametrize("schema", ALL, ids=lambda s: s.name)
def test_whole_memory_schema_compiles_with_llguidance(schema):
    grammar = LLMatcher.grammar_from_json_schema(schema.json_schema())
    assert LLMatcher.validate_grammar(grammar) == ""


def test_operation_names_are_case_insensitive_in_answers():
    parsed = parse_prism('[OBJECTS FOR ADD]\n{"$.attributes.A": {"ADD": ["a"]}}\n')
    assert [(r.op, r.value) for r in parsed.revisions] == [("add", ["a"])]
