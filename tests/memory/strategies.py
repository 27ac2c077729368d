"""Hypothesis strategies: random typed hierarchies, memories that conform to them, and revisions."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st
from memloop.eval.memory.paths import Path
from memloop.eval.memory.schema import PLACEHOLDER, Schema
from memloop.eval.memory.types import (
    DictOf,
    EnumOf,
    Field,
    ListOf,
    Node,
    ObjectType,
    Prim,
    TupleOf,
    UnionOf,
    strip_none,
)

# keys exercise the papers' awkward forms: spaces, quotes, '&', dots, brackets, backslashes, unicode
KEYS = st.text(alphabet=st.sampled_from(list("abcXYZ &'\".[]\\é-_0 ")), min_size=1, max_size=8)
FIELD_NAMES = st.sampled_from(["name", "values", "events", "purpose", "thoughts", "size", "items", "notes"])
TEXT = st.text(alphabet=st.sampled_from(list("ab c'\"\\\n&é?")), max_size=6)
PRIMS = st.sampled_from(
    [
        Prim("str"),
        Prim("int"),
        Prim("float"),
        Prim("bool"),
        EnumOf(("low", "high")),
        EnumOf(('it\'s "x"', 1, 2.5, True, None)),
    ]
)


def nodes(depth: int = 3) -> st.SearchStrategy[Node]:
    if depth <= 0:
        return PRIMS
    sub = nodes(depth - 1)
    return st.one_of(
        PRIMS,
        st.builds(ListOf, sub),
        st.builds(DictOf, sub),
        st.lists(sub, min_size=1, max_size=3).map(lambda xs: TupleOf(tuple(xs))),
        sub.map(lambda n: UnionOf((n, Prim("None"))) if not isinstance(n, UnionOf) else n),
        st.tuples(sub, sub)
        .filter(lambda ab: ab[0] != ab[1] and not any(isinstance(x, UnionOf) for x in ab))
        .map(lambda ab: UnionOf(ab)),
        objects(depth - 1),
    )


_counter = [0]


def objects(depth: int) -> st.SearchStrategy[ObjectType]:
    sub = nodes(depth)

    def make(pairs: list[tuple[str, Node]]) -> ObjectType:
        _counter[0] += 1
        return ObjectType(f"C{_counter[0]}", tuple(Field(n, t) for n, t in pairs))

    return st.lists(st.tuples(FIELD_NAMES, sub), min_size=1, max_size=3, unique_by=lambda p: p[0]).map(make)


def schemas() -> st.SearchStrategy[Schema]:
    return objects(2).map(Schema)


def values(node: Node, depth: int = 0) -> st.SearchStrategy[Any]:
    """Values of type `node` (placeholders sometimes stand in below the root)."""
    if isinstance(node, Prim):
        base = {
            "str": TEXT,
            "int": st.integers(-1000, 1000),
            "bool": st.booleans(),
            "float": st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False),
            "None": st.none(),
            "Any": TEXT,
        }[node.kind]
    elif isinstance(node, EnumOf):
        base = st.sampled_from(node.values)
    elif isinstance(node, ListOf):
        base = st.lists(values(node.item, depth + 1), max_size=3)
    elif isinstance(node, TupleOf):
        base = st.tuples(*(values(t, depth + 1) for t in node.items)).map(list)
    elif isinstance(node, DictOf):
        base = st.dictionaries(KEYS, values(node.value, depth + 1), max_size=3)
    elif isinstance(node, UnionOf):
        base = st.one_of(*(values(o, depth + 1) for o in node.options))
    else:
        base = st.fixed_dictionaries({}, optional={f.name: values(f.type, depth + 1) for f in node.fields})
    if depth > 0:
        return st.one_of(base, base, base, st.sampled_from([None, PLACEHOLDER]))
    return base


def memories(schema: Schema) -> st.SearchStrategy[dict]:
    return values(schema.root)


def existing_paths(memory: Any, prefix: tuple = ()) -> list[Path]:
    out = []
    if isinstance(memory, dict):
        for k, v in memory.items():
            out.append(Path(prefix + (k,)))
            out.extend(existing_paths(v, prefix + (k,)))
    elif isinstance(memory, list):
        for i, v in enumerate(memory):
            out.append(Path(prefix + (i,)))
            out.extend(existing_paths(v, prefix + (i,)))
    return out


def schema_children(schema: Schema, memory: dict, path: Path) -> list[Path]:
    """New child paths the schema allows under an existing container path."""
    node = strip_none(schema.node_at(path))
    cur: Any = memory
    for s in path.segments:
        cur = cur[s]
    out = []
    if isinstance(node, ObjectType) and isinstance(cur, dict):
        out += [path.child(f.name) for f in node.fields if f.name not in cur]
    if isinstance(node, DictOf) and isinstance(cur, dict):
        out += [path.child("new key " + str(len(cur))), path.child('it\'s & "q"')]
    if isinstance(node, ListOf) and isinstance(cur, list):
        out.append(path.child(len(cur)))
    return out


def schema_descendants(schema: Schema, path: Path, data: Any, depth: int) -> Path:
    """A path 1..depth levels below `path` that the schema allows (keys and indices drawn at random)."""
    for _ in range(depth):
        node = strip_none(schema.node_at(path))
        if isinstance(node, ObjectType):
            path = path.child(data.draw(st.sampled_from([f.name for f in node.fields])))
        elif isinstance(node, DictOf):
            path = path.child(data.draw(KEYS))
        elif isinstance(node, ListOf):
            path = path.child(data.draw(st.integers(0, 2)))
        elif isinstance(node, TupleOf):
            path = path.child(data.draw(st.integers(0, len(node.items) - 1)))
        else:
            break
    return path
