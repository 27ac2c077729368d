"""A json_schema the grammar engine cannot take is refused in one short line that says what to do:
an integer beyond 64 bits (it said "Value is not JSON serializable: 1000...") and a regex feature it
lacks in a pattern of a million characters (it echoed the pattern inside a multi-line parser report)."""

from __future__ import annotations

import pytest
from memloop.engine.errors import RequestError


@pytest.fixture(scope="module")
def grammars(smollm2_gguf):
    from memloop.engine.model.tokenizer import load_tokenizer
    from memloop.engine.sample.constrained import GrammarCompiler

    tok = load_tokenizer(smollm2_gguf)
    return GrammarCompiler(tok.hf, 49152)


def test_an_integer_beyond_64_bits_names_its_key(grammars) -> None:
    with pytest.raises(RequestError) as err:
        grammars.compile({"type": "object", "properties": {"n": {"type": "integer", "minimum": 10**30}}})
    assert str(err.value) == (
        "json_schema's `minimum` is an integer of 31 digits, beyond the 64-bit integers the "
        "grammar engine reads; write it within -2**63 .. 2**63-1, or as a float (e.g. 1e30)"
    )
    with pytest.raises(RequestError, match=r"`maximum` is an integer of 19 digits"):
        grammars.compile({"type": "integer", "maximum": 2**63})
    grammars.compile({"type": "integer", "minimum": -1000, "maximum": 10**12})


def test_an_unsupported_pattern_is_one_short_line_without_the_pattern(grammars) -> None:
    with pytest.raises(RequestError) as err:
        grammars.compile({"type": "string", "pattern": "(?=a)" + "b" * 1_000_000})
    msg = str(err.value)
    assert "\n" not in msg and len(msg) < 400 and "bbbb" not in msg
    assert msg.startswith("json_schema is not supported by the grammar engine: regex parse error")
    assert "look-around" in msg and msg.endswith("rewrite that part of the schema")
