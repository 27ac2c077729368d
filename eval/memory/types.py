"""The typed hierarchy (seed 002 definition 3.2) as a small immutable tree of type nodes.

Every schema, whether derived from a Python class or parsed from LLM-written text, becomes these
nodes; JSON Schema, the class text shown to the LLM, and path resolution are all computed from them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Union

PRIMITIVES = ("str", "int", "float", "bool", "Any", "None")


@dataclass(frozen=True)
class Prim:
    """str, int, float, bool, Any or None."""

    kind: str


@dataclass(frozen=True)
class EnumOf:
    """`Literal["low", "high"]`: one of a fixed set of JSON scalars."""

    values: tuple[Union[str, int, float, bool, None], ...]


@dataclass(frozen=True)
class ListOf:
    item: "Node"


@dataclass(frozen=True)
class TupleOf:
    """A fixed-length tuple (`tuple[str, str]`); stored in JSON as a list of that length."""

    items: tuple["Node", ...]


@dataclass(frozen=True)
class DictOf:
    """A map from string keys to values; `key_label` keeps an alias name like `Facet` for the class text."""

    value: "Node"
    key_label: str = "str"


@dataclass(frozen=True)
class UnionOf:
    options: tuple["Node", ...]


@dataclass(frozen=True)
class Field:
    """A named field; its docs as the schema's author wrote them: `doc` the trailing `# comment` (or a
    field(description=...)), `above` the comment lines just before it, `docstring` a string after it."""

    name: str
    type: "Node"
    doc: str = ""
    above: tuple[str, ...] = ()
    docstring: str = ""

    @property
    def description(self) -> str:
        """Every doc of the field in reading order (for JSON Schema descriptions)."""
        return " ".join(d for d in (*self.above, self.doc, self.docstring) if d)


@dataclass(frozen=True)
class ObjectType:
    """A class: named fields, each optional in a memory (partial objects are allowed)."""

    name: str
    fields: tuple[Field, ...]
    doc: str = ""
    bases: tuple[str, ...] = ()

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None


Node = Union[Prim, EnumOf, ListOf, TupleOf, DictOf, UnionOf, ObjectType]


def type_text(node: Node) -> str:
    """The Python annotation text of a node (`dict[str, list[str]]`, `FunctionDescription | None`)."""
    if isinstance(node, Prim):
        return node.kind
    if isinstance(node, EnumOf):
        return "Literal[" + ", ".join(json.dumps(v) if isinstance(v, str) else repr(v) for v in node.values) + "]"
    if isinstance(node, ListOf):
        return f"list[{type_text(node.item)}]"
    if isinstance(node, TupleOf):
        return "tuple[" + ", ".join(type_text(i) for i in node.items) + "]"
    if isinstance(node, DictOf):
        return f"dict[{node.key_label}, {type_text(node.value)}]"
    if isinstance(node, UnionOf):
        return " | ".join(type_text(o) for o in node.options)
    return node.name


def children(node: Node) -> list[Node]:
    if isinstance(node, ListOf):
        return [node.item]
    if isinstance(node, TupleOf):
        return list(node.items)
    if isinstance(node, DictOf):
        return [node.value]
    if isinstance(node, UnionOf):
        return list(node.options)
    if isinstance(node, ObjectType):
        return [f.type for f in node.fields]
    return []


def strip_none(node: Node) -> Node:
    """`X | None` -> X (placeholders are handled separately); other unions are kept."""
    if isinstance(node, UnionOf):
        opts = tuple(o for o in node.options if o != Prim("None"))
        if len(opts) == 1:
            return opts[0]
        return UnionOf(opts) if opts else Prim("None")
    return node
