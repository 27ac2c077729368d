"""Revision semantics, case by case (seed 002 definition 3.4 and the CoK add rules)."""

from __future__ import annotations

import pytest
from memloop.eval.memory import Revision, RevisionError, apply_revision, apply_revisions, check
from memloop.eval.memory.errors import PathError
from memloop.eval.memory.schemas import COMPARISON, FUNCTION_NATURAL_DESCRIPTOR, RELEVANT_TABLE_INFO, SUMIE_SUMMARY


def _one(memory, rev, schema):
    res = apply_revisions(memory, [rev], schema)
    return res.memory, (res.rejected[0].reason if res.rejected else None)


def test_add_creates_missing_parents_from_the_schema():
    m, why = _one({}, Revision("$.candidate_functions.f.purpose", "add", "p"), FUNCTION_NATURAL_DESCRIPTOR)
    assert why is None and m == {"candidate_functions": {"f": {"purpose": "p"}}}
    m, why = _one({}, Revision("$.values.size[1]", "add", "x"), COMPARISON)
    assert why is None and m == {"values": {"size": [None, "x"]}}  # a new tuple is filled with placeholders
    m, why = _one(
        {"candidate_functions": {"f": None}},
        Revision("$.candidate_functions.f.input", "add", "i"),
        FUNCTION_NATURAL_DESCRIPTOR,
    )
    assert why is None and m == {"candidate_functions": {"f": {"input": "i"}}}  # a placeholder parent is replaced


def test_lists_grow_at_their_end_only():
    m = {"table_descriptions": [{"table_name": "a"}]}
    out, why = _one(m, Revision("$.table_descriptions[1]", "add", {"table_name": "b"}), RELEVANT_TABLE_INFO)
    assert why is None and [t["table_name"] for t in out["table_descriptions"]] == ["a", "b"]
    _, why = _one(m, Revision("$.table_descriptions[3]", "add", {"table_name": "b"}), RELEVANT_TABLE_INFO)
    assert "grows only at index 1" in why
    _, why = _one({}, Revision("$.table_descriptions[5].table_name", "add", "x"), RELEVANT_TABLE_INFO)
    assert "starts at index 0" in why
    out, why = _one({}, Revision("$.table_descriptions[0].table_name", "add", "x"), RELEVANT_TABLE_INFO)
    assert why is None and out == {"table_descriptions": [{"table_name": "x"}]}


def test_add_of_one_item_at_a_list_path_appends_or_creates_the_list():
    out = apply_revisions(
        {},
        [
            Revision("$.attributes.A", "add", "first"),
            Revision("$.attributes.A", "add", "second"),
            Revision("$.attributes.A", "add", ["a list is not an item"]),
        ],
        SUMIE_SUMMARY,
    )
    assert out.memory == {"attributes": {"A": ["first", "second"]}}
    assert "already exists" in out.rejected[0].reason


def test_update_needs_an_existing_path_and_replaces_it_in_place():
    m = {"attributes": {"A": ["a"], "B": ["b"]}}
    out = apply_revision(m, Revision("$.attributes.A", "update", ["a2"]), SUMIE_SUMMARY)
    assert list(out["attributes"]) == ["A", "B"] and out["attributes"]["A"] == ["a2"]
    assert m["attributes"]["A"] == ["a"]  # never mutated
    with pytest.raises(RevisionError, match="does not exist in the memory; use 'add'"):
        apply_revision(m, Revision("$.attributes.C", "update", ["c"]), SUMIE_SUMMARY)
    with pytest.raises(RevisionError, match="'add' to create a new path"):
        apply_revision({}, Revision("$.attributes.C", "update", ["c"]), SUMIE_SUMMARY)
    out = apply_revision(
        {"values": {"size": ["4.2 inches", "???"]}}, Revision("$.values.size[1]", "update", "5 inches"), COMPARISON
    )
    assert out == {"values": {"size": ["4.2 inches", "5 inches"]}}  # a placeholder is filled by update


def test_paths_outside_the_schema_and_through_leaves_are_rejected():
    assert "has no field 'colour'" in check({}, Revision("$.colour", "add", 1), SUMIE_SUMMARY)
    m = {"attributes": {"A": ["a"]}}
    assert "has no children" in check(m, Revision("$.attributes.A[0].x", "add", "y"), SUMIE_SUMMARY)
    assert "replace the whole memory" in check(m, Revision("$", "update", {}), SUMIE_SUMMARY)


def test_values_are_json_data():
    assert Revision("$.values.size", "add", ("a", "b")).value == ["a", "b"]
    with pytest.raises(RevisionError, match="not JSON"):
        Revision("$.a", "add", float("nan"))
    with pytest.raises(RevisionError, match="not a string"):
        Revision("$.a", "add", {1: "x"})
    with pytest.raises(RevisionError, match="'add' or 'update'"):
        Revision("$.a", "delete", 1)
    with pytest.raises(PathError):
        Revision("attributes.A", "add", 1)


def test_a_memory_that_does_not_conform_is_refused_up_front():
    with pytest.raises(RevisionError, match="does not conform"):
        apply_revisions({"attributes": "not a map"}, [], SUMIE_SUMMARY)


def test_a_union_of_containers_is_not_guessed():
    from memloop.eval.memory import Schema

    s = Schema.from_text("class A:\n    x: Union[list[str], dict[str, str]]\n")
    assert "does not say which container" in check({}, Revision("$.x.k", "add", "v"), s)
    assert apply_revision({}, Revision("$.x", "add", {"k": "v"}), s) == {"x": {"k": "v"}}
