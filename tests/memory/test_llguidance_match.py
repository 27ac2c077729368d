"""The revision-list JSON Schema as llguidance enforces it over the bundled model's tokenizer.

The path patterns are checked by Python's `re` in the other tests; here the grammar engine the
decoder uses (Rust regex inside llguidance) must accept the canonical texts and refuse bad ones.
"""

from __future__ import annotations

import json

import pytest
from memloop.eval.memory import Path, revision_list_schema
from memloop.eval.memory.schemas import COMPARISON, FUNCTION_NATURAL_DESCRIPTOR, SUMIE_SUMMARY

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def lltok(smollm2_gguf):
    import llguidance.hf
    from memloop.engine.model.tokenizer import load_tokenizer

    tok = load_tokenizer(smollm2_gguf)
    return tok, llguidance.hf.from_tokenizer(tok.hf)


def _accepts(lltok, schema_json: dict, text: str) -> bool:
    from llguidance import LLMatcher

    tok, lt = lltok
    m = LLMatcher(
        lt,
        LLMatcher.grammar_from_json_schema(
            schema_json, defaults={"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
        ),
    )
    for t in tok.encode(text):
        if not m.consume_token(t):
            return False
    return m.is_accepting()


def _doc(path: str, op: str, value) -> str:
    return json.dumps({"revisions": [{"path": Path.parse(path).text, "op": op, "value": value}]})


@pytest.mark.parametrize(
    "schema,path,op,value",
    [
        (SUMIE_SUMMARY, "$.attributes['Food & Beverage']", "add", ["limited breakfast options"]),
        (SUMIE_SUMMARY, "$.attributes['it\\'s \"q\"'][0]", "update", "x"),
        (
            FUNCTION_NATURAL_DESCRIPTOR,
            "$.candidate_functions.make_simple_prefix",
            "add",
            {"purpose": "p", "input": "???", "output": None},
        ),
        (COMPARISON, "$.values.size[1]", "update", "very flexible"),
    ],
)
def test_canonical_revisions_are_accepted(lltok, schema, path, op, value):
    assert _accepts(lltok, revision_list_schema(schema), _doc(path, op, value))


@pytest.mark.parametrize(
    "schema,text",
    [
        (SUMIE_SUMMARY, json.dumps({"revisions": [{"path": "$.attributes.A", "op": "add", "value": ["x"]}]})),
        (SUMIE_SUMMARY, _doc("$.colour", "add", "red")),
        (SUMIE_SUMMARY, _doc("$.attributes.A", "delete", ["x"])),
        (SUMIE_SUMMARY, _doc("$.attributes.A", "add", [3])),
        (COMPARISON, _doc("$.values.size[2]", "update", "x")),
        (FUNCTION_NATURAL_DESCRIPTOR, _doc("$.candidate_functions.f.colour", "add", "red")),
    ],
)
def test_bad_revisions_cannot_be_decoded(lltok, schema, text):
    assert not _accepts(lltok, revision_list_schema(schema), text)
