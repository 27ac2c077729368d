"""Free-text JSON extraction and template rendering."""

from __future__ import annotations

import pytest
from memloop.eval.asking import ParseFailure
from memloop.eval.errors import TemplateError
from memloop.eval.methods.parsing import ends_in_punctuation, extract_json, parse_json_object
from memloop.eval.templates import load_template


def test_extract_json_variants() -> None:
    assert extract_json('Sure!\n```json\n{"a": [1, 2,],}\n```\nDone.') == {"a": [1, 2]}
    assert extract_json('The table: {"a": "x {y}"} and more {"b": 1}') == {"a": "x {y}"}
    assert extract_json("[1, 2]", list) == [1, 2]
    with pytest.raises(ParseFailure, match="no JSON dict"):
        extract_json("[1, 2] only a list", dict)


def test_schema_validation_reason() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string"}}}
    with pytest.raises(ParseFailure, match="does not match the schema"):
        parse_json_object('{"a": "not a list"}', schema)


def test_punctuation_check() -> None:
    assert ends_in_punctuation('He said "yes."') and ends_in_punctuation("Done!  ")
    assert not ends_in_punctuation("cut off mid") and not ends_in_punctuation("")


def test_template_render_and_errors() -> None:
    tpl = load_template("s000-dedupe-json")
    text = tpl.render(subject="the entity X", summary='{"a": ["b"]}')
    assert "about the entity X" in text and '"Views": ["beautiful views of the Eiffel tower"]' in text
    with pytest.raises(TemplateError, match="needs values for \\['summary'\\]"):
        tpl.render(subject="x")
    with pytest.raises(TemplateError, match="not found"):
        load_template("no-such-template")
