"""Arbitrary model output never crashes the readers: it parses or raises the package's named error."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memloop.eval.memory import (
    LiteralParseError,
    Path,
    PathError,
    RevisionParseError,
    Schema,
    SchemaError,
    parse_cok,
    parse_prism,
    parse_revision_list,
)
from memloop.eval.memory.literal import loads

FUZZ = settings(
    max_examples=int(os.environ.get("MEMLOOP_MEMORY_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
SNIPPETS = st.sampled_from(
    [
        "[OBJECTS FOR UPDATE]\n",
        "[OBJECTS FOR ADD]\n",
        "[UPDATED_OBJECTS]\n",
        "[ADDED_OBJECTS]\n",
        "{",
        "}",
        "[",
        "]",
        "(",
        ")",
        "\"$. 'a'\"",
        ":",
        ",",
        "'",
        '{"add": ',
        '{"update": ',
        "None",
        "???",
        "\n",
        "```",
        "\\",
        "\x00",
        "1e999",
        "-",
    ]
)
TEXTS = st.one_of(st.text(max_size=80), st.lists(st.one_of(SNIPPETS, st.text(max_size=5)), max_size=30).map("".join))


@FUZZ
@given(TEXTS)
def test_section_parsers_never_crash(text):
    for parse in (parse_prism, parse_cok):
        try:
            parsed = parse(text)
        except RevisionParseError:
            continue
        for r in parsed.rejected:
            assert r.reason


@FUZZ
@given(TEXTS)
def test_lenient_reader_and_revision_list_never_crash(text):
    try:
        loads(text)
    except LiteralParseError:
        pass
    try:
        parse_revision_list(text)
    except RevisionParseError:
        pass


@FUZZ
@given(
    st.one_of(
        st.text(max_size=40),
        st.lists(
            st.sampled_from(["$", ".", "'", "[", "]", "0", "a", " ", "\\", "*", "..", "?", "@", "`"]), max_size=12
        ).map("".join),
    )
)
def test_path_parser_never_crashes(text):
    try:
        Path.parse(text)
    except PathError:
        pass


@FUZZ
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(
            st.sampled_from(
                [
                    "class A:\n",
                    "    x: ",
                    "int",
                    "list[",
                    "]",
                    "dict[str, ",
                    "A",
                    "\n",
                    '"""doc"""',
                    "@dataclass\n",
                    "= 1",
                    "(pg.Object)",
                    "import os\n",
                    "\x00",
                    "lambda: 0",
                    "    ",
                    "tuple[str, ...]",
                    "Optional[",
                    "|",
                    "None",
                ]
            ),
            max_size=20,
        ).map("".join),
    )
)
def test_schema_text_never_crashes(text):
    try:
        Schema.from_text(text)
    except SchemaError:
        pass


def test_pathological_nesting_is_a_named_error():
    deep = "[" * 100_000
    try:
        loads(deep)
    except LiteralParseError as e:
        assert "nested more than" in str(e)
    else:
        raise AssertionError("accepted unbalanced nesting")
    try:
        Schema.from_text("class A:\n    x: " + "list[" * 5000 + "int" + "]" * 5000 + "\n")
    except SchemaError:
        pass


def test_lenient_reader_reads_the_papers_forms_and_refuses_non_json_numbers():
    assert loads("{'a': (1, None, True), \"b\": [2.5e3,],}") == {"a": [1, None, True], "b": [2500.0]}
    for bad in ("1e999", "NaN", "[1 2]", "{a: 1}", "'unterminated", "{} extra"):
        try:
            loads(bad)
        except LiteralParseError:
            continue
        raise AssertionError(f"accepted {bad!r}")
