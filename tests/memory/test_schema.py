"""Schema derivation from Python classes, class text, JSON Schema and the safe text language."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Optional, TypedDict

import pydantic
import pytest
from memloop.eval.memory import Schema, SchemaError
from memloop.eval.memory.errors import PathError
from memloop.eval.memory.schemas import (
    BOOK_SUMMARY,
    COMPARISON,
    FUNCTION_NATURAL_DESCRIPTOR,
    RELEVANT_TABLE_INFO,
    STORY_ELEMENTS,
    SUMIE_SUMMARY,
    TABLE_MEMORY,
)
from memloop.eval.memory.types import DictOf, ListOf, ObjectType, Prim, TupleOf, UnionOf


def test_sumie_summary_class_text_matches_the_cok_prompt_shape():
    assert SUMIE_SUMMARY.class_text() == (
        "class Summary(TypedDict):\n"
        "    attributes: dict[str, list[str]]  # Keyed by attribute; each holds a list of details with enough "
        "context about it."
    )


def test_story_elements_has_the_six_parts_of_seed_000():
    assert [f.name for f in STORY_ELEMENTS.root.fields] == [
        "characters",
        "events",
        "background",
        "motivations",
        "objectives",
        "other",
    ]
    assert all(f.type == DictOf(ListOf(Prim("str"))) and f.doc for f in STORY_ELEMENTS.root.fields)


def test_nested_classes_render_inside_their_user():
    text = FUNCTION_NATURAL_DESCRIPTOR.class_text()
    assert text.index("    class FunctionDescription:") < text.index(
        "    candidate_functions: dict[str, FunctionDescription]"
    )
    assert text.count("class ") == 2
    assert "Facet = str" in COMPARISON.class_text()


@pytest.mark.parametrize(
    "schema",
    [
        SUMIE_SUMMARY,
        STORY_ELEMENTS,
        BOOK_SUMMARY,
        FUNCTION_NATURAL_DESCRIPTOR,
        RELEVANT_TABLE_INFO,
        TABLE_MEMORY,
        COMPARISON,
    ],
)
def test_ready_made_schemas_round_trip_through_their_class_text(schema):
    assert Schema.from_text(schema.class_text()).root == schema.root


def test_dataclass_typeddict_pydantic_and_plain_classes_give_the_same_tree():
    @dataclasses.dataclass
    class Item:
        """An item."""

        name: str
        score: Optional[float]

    @dataclasses.dataclass
    class A:
        items: list[Item]
        pair: tuple[int, str]

    class ItemT(TypedDict):
        """An item."""

        name: str
        score: Optional[float]

    class AT(TypedDict):
        items: list[ItemT]
        pair: tuple[int, str]

    class ItemP(pydantic.BaseModel):
        """An item."""

        name: str
        score: Optional[float]

    class AP(pydantic.BaseModel):
        items: list[ItemP]
        pair: tuple[int, str]

    def shape(s: Schema) -> Any:
        f_items, f_pair = s.root.fields
        item = f_items.type.item
        return (f_items.name, [(f.name, f.type) for f in item.fields], item.doc, f_pair.type)

    expected = (
        "items",
        [("name", Prim("str")), ("score", UnionOf((Prim("float"), Prim("None"))))],
        "An item.",
        TupleOf((Prim("int"), Prim("str"))),
    )
    for cls in (A, AT, AP):
        assert shape(Schema.from_class(cls, namespace=locals())) == expected


def test_field_docs_from_annotated_metadata_pydantic_and_comments():
    @dataclasses.dataclass
    class D:
        a: Annotated[str, "the a field"]
        b: int = dataclasses.field(default=0, metadata={"doc": "the b field"})
        c: str = ""  # the c field

    class P(pydantic.BaseModel):
        a: str = pydantic.Field(description="the a field")

    assert [f.doc for f in Schema.from_class(D).root.fields] == ["the a field", "the b field", "the c field"]
    assert Schema.from_class(P).root.fields[0].doc == "the a field"
    assert Schema.from_class(D).root.doc == ""  # the signature dataclasses writes is not a docstring


def test_unsupported_python_types_are_named():
    @dataclasses.dataclass
    class S:
        tags: set[str]

    @dataclasses.dataclass
    class K:
        by_id: dict[int, str]

    with pytest.raises(SchemaError, match="S.tags"):
        Schema.from_class(S)
    with pytest.raises(SchemaError, match="dict keys must be str"):
        Schema.from_class(K)


def test_recursive_classes_are_refused():
    text = "class Node:\n    children: list[Node]\n"
    with pytest.raises(SchemaError, match="contains itself"):
        Schema.from_text(text)


def test_json_schema_allows_partial_objects_and_placeholders_but_not_unknown_fields():
    s = FUNCTION_NATURAL_DESCRIPTOR
    assert s.errors({}) == []
    assert s.errors({"candidate_functions": {"f": {"purpose": "x", "input": None, "output": "???"}}}) == []
    errs = s.errors({"candidate_functions": {"f": {"purpose": "x", "colour": "red"}}})
    assert errs and "colour" in errs[0]
    errs = s.errors({"candidate_functions": {"f": {"purpose": 3}}})
    assert errs == ["at $. 'candidate_functions'. 'f'. 'purpose': 3 is not of type 'string', 'null' (expected str)"]
    assert s.errors([]) == ["a memory must be a JSON object, got list"]
    strict = Schema(s.root, placeholders=False)
    assert strict.errors({"candidate_functions": {"f": {"input": None}}})


def test_node_at_follows_fields_keys_and_indices_and_names_the_problem():
    assert RELEVANT_TABLE_INFO.node_at("$.table_descriptions[3].columns_observed") == ListOf(Prim("str"))
    assert COMPARISON.node_at("$.values.size[1]") == Prim("str")
    with pytest.raises(PathError, match="has no field 'colour'"):
        RELEVANT_TABLE_INFO.node_at("$.table_descriptions[0].colour")
    with pytest.raises(PathError, match="address its items by index"):
        RELEVANT_TABLE_INFO.node_at("$.table_descriptions.first")
    with pytest.raises(PathError, match="2 items"):
        COMPARISON.node_at("$.values.size[2]")
    with pytest.raises(PathError, match="has no children"):
        SUMIE_SUMMARY.node_at("$.attributes.a[0].x")


@pytest.mark.parametrize(
    "text,message",
    [
        ("class A:\n    def f(self):\n        return 1\n", "FunctionDef is not allowed"),
        ("class A:\n    x: int = __import__('os').system('true')\n", "default that is not a literal or field"),
        ("import os\nclass A:\n    x: int\nos.system('true')\n", "Expr statements are not allowed"),
        ("@register\nclass A:\n    x: int\n", "only the @dataclass decorator"),
        ("class A(make_base()):\n    x: int\n", "base classes must be plain names"),
        ("class A:\n    x: Foo\n", "unknown type 'Foo'"),
        ("class A:\n    x: dict[int, str]\n", "dict keys must be str"),
        ("class A:\n    x: list[str\n", "not valid Python syntax"),
        ("Here is no schema at all.", "no schema found"),
        ("class A:\n    x: int\nclass A:\n    y: int\n", "defined twice"),
    ],
)
def test_schema_text_outside_the_language_is_refused_without_running_it(text, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SchemaError, match=message):
        Schema.from_text(text)


def test_schema_text_understands_the_papers_spellings():
    s = Schema.from_text('''```python
from typing import TypedDict, Optional
class Root(pg.Object):
    """Root doc."""
    Facet = str
    a: typing.List[str]  # list of a
    b: Optional["Leaf"]
    c: dict[Facet, tuple[str, ...]]
    d: Union[int, str, None] = None
class Leaf:
    x: float
```''')
    a, b, c, d = s.root.fields
    assert a == a.__class__("a", ListOf(Prim("str")), "list of a")
    assert b.type == UnionOf((ObjectType("Leaf", (b.type.options[0].fields[0],)), Prim("None")))
    assert c.type == DictOf(ListOf(Prim("str")), "Facet")
    assert d.type == UnionOf((Prim("int"), Prim("str"), Prim("None")))
    assert s.root.bases == ("pg.Object",) and s.root.doc == "Root doc."


def test_field_calls_are_read_not_run():
    s = Schema.from_text(
        'class P(BaseModel):\n    a: str = Field(description="the a field")\n'
        '    b: list[str] = field(default_factory=list, metadata={"doc": "the b field"})\n'
        "    c: int = 0  # the c field\n"
    )
    assert [(f.name, f.doc) for f in s.root.fields] == [
        ("a", "the a field"),
        ("b", "the b field"),
        ("c", "the c field"),
    ]
    with pytest.raises(SchemaError, match="must be a literal"):
        Schema.from_text("class P:\n    a: str = Field(description=open('/etc/passwd').read())\n")
    with pytest.raises(SchemaError, match="not a literal or field"):
        Schema.from_text("class P:\n    a: str = make_default()\n")


def test_fingerprint_identifies_the_schema():
    assert SUMIE_SUMMARY.fingerprint == Schema.from_text(SUMIE_SUMMARY.class_text()).fingerprint
    assert SUMIE_SUMMARY.fingerprint != BOOK_SUMMARY.fingerprint
    assert Schema(SUMIE_SUMMARY.root, placeholders=False).fingerprint != SUMIE_SUMMARY.fingerprint


def test_literal_and_enum_fields_become_json_enums():
    import enum
    from typing import Literal

    from memloop.eval.memory import Revision, apply_revisions
    from memloop.eval.memory.types import EnumOf

    class Mood(enum.Enum):
        CALM = "calm"
        ANGRY = "angry"

    @dataclasses.dataclass
    class X:
        level: Literal["low", "high", 3]
        mood: Mood

    s = Schema.from_class(X, namespace=locals())
    assert [f.type for f in s.root.fields] == [EnumOf(("low", "high", 3)), EnumOf(("calm", "angry"))]
    assert 'level: Literal["low", "high", 3]' in s.class_text()
    assert Schema.from_text(s.class_text()).root == s.root
    res = apply_revisions({}, [Revision("$.level", "add", "mid"), Revision("$.mood", "add", "calm")], s)
    assert res.memory == {"mood": "calm"} and "is not one of" in res.rejected[0].reason
    with pytest.raises(SchemaError, match="JSON scalars"):
        Schema.from_text("class A:\n    x: Literal[int]\n")


def test_typeddict_required_markers_are_accepted():
    from typing import NotRequired

    class T(TypedDict, total=False):
        a: NotRequired[list[str]]
        b: int

    assert [(f.name, f.type) for f in Schema.from_class(T, namespace=locals()).root.fields] == [
        ("a", ListOf(Prim("str"))),
        ("b", Prim("int")),
    ]


def test_generated_schema_keeps_field_docstrings_and_comment_lines_when_re_rendered():
    """Seed 002 section 3.4: the model reads the schema the LLM wrote, so its comment lines above a field and
    a docstring under a field survive the re-rendering into [CLASS], and the round trip is stable."""
    written = '''```python
class Chronicle:
    """The story so far."""

    class Event:
        """One event."""
        # who took part, by name
        # (aliases go in brackets)
        who: list[str]
        what: str  # one sentence
        """What happened, in the book's order."""

    # keyed by chapter title
    events: dict[str, list[Event]]
    open_questions: list[str]
    """Mysteries the story has not resolved yet.

    Drop one when it is answered."""
```'''
    schema = Schema.from_text(written)
    text = schema.class_text()
    for kept in (
        "# who took part, by name",
        "# (aliases go in brackets)",
        "what: str  # one sentence",
        '"""What happened, in the book\'s order."""',
        "# keyed by chapter title",
        '"""Mysteries the story has not resolved yet.',
        "Drop one when it is answered.",
    ):
        assert kept in text, kept
    assert text.index("# keyed by chapter title") < text.index("events: dict") < text.index("open_questions")
    again = Schema.from_text(text)
    assert again.root == schema.root and again.class_text() == text
    import json

    described = json.dumps(schema.json_schema())  # the constrained-decoding schema carries them too
    assert '"description": "who took part, by name (aliases go in brackets)"' in described
    assert '"description": "one sentence What happened, in the book\'s order."' in described
