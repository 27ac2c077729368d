"""Schemas: a typed hierarchy with its class text (for prompts) and JSON Schema (validation, decoding).

Build one from a Python class (`Schema.from_class`: dataclass, TypedDict, pydantic model or a plain
annotated class) or from schema text an LLM wrote (`Schema.from_text`, a safe mini-language).
Every object field is optional in a memory: the papers allow partial objects, and the placeholders
'???' and None (seed 002 appendix C) are accepted for any value below the root.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import re
import types as pytypes
import typing
from functools import lru_cache
from typing import Any

import jsonschema
from memloop.eval.memory.errors import PathError, SchemaError
from memloop.eval.memory.paths import Path
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
    children,
    strip_none,
    type_text,
)

PLACEHOLDER = "???"


class Schema:
    """A memory schema: the root class and everything it references."""

    def __init__(self, root: ObjectType, placeholders: bool = True) -> None:
        if not isinstance(root, ObjectType):
            raise SchemaError("the root of a memory schema must be a class with fields (a JSON object)")
        self.root = root
        self.placeholders = placeholders
        self._objects = _collect_objects(root)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_class(cls, py_cls: type, placeholders: bool = True, namespace: dict[str, Any] | None = None) -> "Schema":
        """Derive from a dataclass / TypedDict / pydantic model / annotated class with docstrings.

        `namespace` resolves string annotations naming classes that are neither module-level nor
        nested (e.g. classes defined inside a function under `from __future__ import annotations`).
        """
        return cls(_object_from_class(py_cls, {}, namespace or {}), placeholders)

    @classmethod
    def from_text(cls, text: str, placeholders: bool = True) -> "Schema":
        """Parse schema text (e.g. LLM-generated, seed 002 section 3.4) without executing it."""
        from memloop.eval.memory.schema_text import parse_schema_text

        return cls(parse_schema_text(text), placeholders)

    @property
    def name(self) -> str:
        return self.root.name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Schema) and other.root == self.root and other.placeholders == self.placeholders

    def __hash__(self) -> int:
        return hash((self.root, self.placeholders))

    def __repr__(self) -> str:
        return f"Schema({self.root.name})"

    @property
    def fingerprint(self) -> str:
        """Short stable hash of the schema (its class text round-trips, so this identifies it in run records)."""
        import hashlib

        return hashlib.sha256(f"{self.placeholders}\n{self.class_text()}".encode()).hexdigest()[:16]

    # ---- renderings ---------------------------------------------------------------------------
    def class_text(self) -> str:
        """Python class text shown to the LLM under [CLASS]; nested classes inside their first user."""
        lines: list[str] = []
        _render_class(self.root, 0, set(), lines)
        return "\n".join(lines)

    def json_schema(self) -> dict[str, Any]:
        """JSON Schema (draft 2020-12) of a whole memory."""
        return _json_schema(self.root, self.placeholders, True)

    def json_schema_at(self, path: "Path | str") -> dict[str, Any]:
        """JSON Schema of the value a revision may put at `path`."""
        p = Path.parse(path)
        return _json_schema(self.node_at(p), self.placeholders, len(p) == 0)

    # ---- paths and validation -----------------------------------------------------------------
    def node_at(self, path: "Path | str") -> Node:
        """The type node at `path`; PathError when the path leaves the schema."""
        p = Path.parse(path)
        node: Node = self.root
        for i, seg in enumerate(p.segments):
            node = _step(node, seg, p, i)
        return node

    def errors(self, memory: Any) -> list[str]:
        """Reasons a memory does not conform (empty when it does)."""
        if not isinstance(memory, dict):
            return [f"a memory must be a JSON object, got {type(memory).__name__}"]
        return _errors(self.root, self.placeholders, True, memory, Path())

    def errors_at(self, path: "Path | str", value: Any) -> list[str]:
        """Reasons `value` cannot be placed at `path` (empty when it can)."""
        p = Path.parse(path)
        return _errors(self.node_at(p), self.placeholders, len(p) == 0, value, p)

    def validate(self, memory: Any) -> None:
        errs = self.errors(memory)
        if errs:
            from memloop.eval.memory.errors import RevisionError

            raise RevisionError(f"memory does not conform to schema {self.name}: " + "; ".join(errs))


# ---- internals --------------------------------------------------------------------------------


def _collect_objects(root: ObjectType) -> dict[str, ObjectType]:
    seen: dict[str, ObjectType] = {}

    def visit(node: Node, stack: tuple[str, ...]) -> None:
        if isinstance(node, ObjectType):
            if node.name in stack:
                raise SchemaError(
                    f"class {node.name} contains itself ({' -> '.join(stack + (node.name,))}); "
                    "a typed hierarchy must be finite"
                )
            prev = seen.get(node.name)
            if prev is not None and prev != node:
                raise SchemaError(f"two different classes are both named {node.name}; rename one of them")
            seen[node.name] = node
            stack = stack + (node.name,)
        for c in children(node):
            visit(c, stack)

    visit(root, ())
    return seen


def _step(node: Node, seg: Any, path: Path, i: int) -> Node:
    where = Path(path.segments[:i]).text
    node = strip_none(node)
    if isinstance(node, UnionOf):
        found = []
        for opt in node.options:
            try:
                found.append(_step(opt, seg, path, i))
            except PathError:
                pass
        if not found:
            raise PathError(
                f"path {path.text} leaves the schema at {where}: no option of {type_text(node)} "
                f"has {'index' if isinstance(seg, int) else 'key'} {seg!r}"
            )
        return found[0] if len(found) == 1 else UnionOf(tuple(found))
    if isinstance(node, Prim) and node.kind == "Any":
        return node
    if isinstance(node, ObjectType):
        if isinstance(seg, str):
            f = node.field(seg)
            if f is not None:
                return f.type
        names = ", ".join(f.name for f in node.fields)
        raise PathError(
            f"path {path.text} leaves the schema: {node.name} at {where} has no field {seg!r} (fields: {names})"
        )
    if isinstance(node, DictOf):
        if isinstance(seg, str):
            return node.value
        raise PathError(
            f"path {path.text}: {where} is a {type_text(node)} keyed by strings; use a quoted key instead of [{seg}]"
        )
    if isinstance(node, ListOf):
        if isinstance(seg, int):
            return node.item
        raise PathError(f"path {path.text}: {where} is a {type_text(node)}; address its items by index, not {seg!r}")
    if isinstance(node, TupleOf):
        if isinstance(seg, int) and seg < len(node.items):
            return node.items[seg]
        raise PathError(
            f"path {path.text}: {where} is a {type_text(node)} with {len(node.items)} items; "
            f"{seg!r} is not one of its indices"
        )
    raise PathError(f"path {path.text}: {where} is a {type_text(node)} value and has no children")


_PRIM_JSON = {
    "str": {"type": "string"},
    "int": {"type": "integer"},
    "float": {"type": "number"},
    "bool": {"type": "boolean"},
    "Any": {},
    "None": {"type": "null"},
}


@lru_cache(maxsize=2048)
def _json_schema_cached(node: Node, placeholders: bool, is_root: bool) -> str:
    import json

    return json.dumps(_build(node, placeholders, is_root))


def _json_schema(node: Node, placeholders: bool, is_root: bool) -> dict[str, Any]:
    import json

    return json.loads(_json_schema_cached(node, placeholders, is_root))


def _build(node: Node, ph: bool, is_root: bool = False) -> dict[str, Any]:
    if isinstance(node, Prim):
        s = dict(_PRIM_JSON[node.kind])
    elif isinstance(node, EnumOf):
        s = {"enum": list(node.values)}
    elif isinstance(node, ListOf):
        s = {"type": "array", "items": _build(node.item, ph)}
    elif isinstance(node, TupleOf):
        n = len(node.items)
        s = {
            "type": "array",
            "prefixItems": [_build(i, ph) for i in node.items],
            "items": False,
            "minItems": n,
            "maxItems": n,
        }
    elif isinstance(node, DictOf):
        s = {"type": "object", "additionalProperties": _build(node.value, ph)}
    elif isinstance(node, UnionOf):
        s = {"anyOf": [_build(o, ph, True) for o in node.options]}  # the union itself takes the placeholder
    else:
        props = {}
        for f in node.fields:
            fs = _build(f.type, ph)
            if f.description:
                fs["description"] = f.description
            props[f.name] = fs
        s = {"type": "object", "title": node.name, "properties": props, "additionalProperties": False}
        if node.doc:
            s["description"] = node.doc
    if ph and not is_root and not (isinstance(node, Prim) and node.kind in ("str", "Any")):
        s = {"anyOf": [s, {"enum": [PLACEHOLDER, None]}]}
    elif ph and not is_root and isinstance(node, Prim) and node.kind == "str":
        s = {"type": ["string", "null"]}
    return s


@lru_cache(maxsize=2048)
def _validator(node: Node, placeholders: bool, is_root: bool) -> jsonschema.protocols.Validator:
    schema = _json_schema(node, placeholders, is_root)
    return jsonschema.Draft202012Validator(schema)


def _errors(node: Node, ph: bool, is_root: bool, value: Any, at: Path) -> list[str]:
    v = _validator(node, ph, is_root)
    out = []
    for e in sorted(v.iter_errors(value), key=lambda e: list(e.absolute_path))[:3]:
        e = _deepest(e)
        sub = at
        for s in e.absolute_path:
            sub = sub.child(s)
        msg = e.message if len(e.message) < 160 else e.message[:160] + "..."
        expected = type_text(_safe_node_at(node, Path(tuple(sub.segments[len(at) :]))))
        out.append(f"at {sub.text}: {msg} (expected {expected})")
    return out


def _deepest(e: jsonschema.ValidationError) -> jsonschema.ValidationError:
    """Inside anyOf, report the real type's complaint rather than 'not a placeholder'."""
    while e.validator == "anyOf" and e.context:
        real = [c for c in e.context if c.relative_schema_path and c.relative_schema_path[0] == 0] or list(e.context)
        e = max(real, key=lambda c: len(c.absolute_path))
    return e


def _safe_node_at(node: Node, rel: Path) -> Node:
    try:
        for i, s in enumerate(rel.segments):
            node = _step(node, s, rel, i)
    except PathError:
        pass
    return node


def _docstring_text(doc: str, indent: str) -> str:
    """A docstring's text for triple quotes: its later lines indented, its own quotes escaped."""
    doc = doc.replace('"""', '\\"\\"\\"')
    return ("\n" + indent).join(doc.split("\n")).replace("\n" + indent + "\n", "\n\n")


def _render_class(obj: ObjectType, depth: int, done: set[str], lines: list[str]) -> None:
    pad = "    " * depth
    done.add(obj.name)
    bases = f"({', '.join(obj.bases)})" if obj.bases else ""
    lines.append(f"{pad}class {obj.name}{bases}:")
    inner = pad + "    "
    if obj.doc:
        doc_lines = obj.doc.split("\n")
        if len(doc_lines) == 1:
            lines.append(f'{inner}"""{obj.doc}"""')
        else:
            lines.append(f'{inner}"""{doc_lines[0]}')
            lines.extend((inner + l) if l else "" for l in doc_lines[1:])
            lines.append(f'{inner}"""')
    nested = [o for o in _referenced_objects(obj) if o.name not in done]
    for o in nested:
        if o.name in done:
            continue
        lines.append("")
        _render_class(o, depth + 1, done, lines)
    if nested:
        lines.append("")
    labels = _key_labels(obj)
    for label in labels:
        lines.append(f"{inner}{label} = str")
    for f in obj.fields:
        lines.extend(f"{inner}# {c}" for c in f.above)
        comment = f"  # {f.doc}" if f.doc else ""
        lines.append(f"{inner}{f.name}: {type_text(f.type)}{comment}")
        if f.docstring:
            lines.append(f'{inner}"""{_docstring_text(f.docstring, inner)}"""')
    if not obj.fields and not obj.doc:
        lines.append(f"{inner}pass")


def _key_labels(obj: ObjectType) -> list[str]:
    """Alias names used as dict keys in this class's own fields (`Facet` in dict[Facet, ...])."""
    out: list[str] = []

    def visit(n: Node) -> None:
        if isinstance(n, ObjectType):
            return
        if isinstance(n, DictOf) and n.key_label != "str" and n.key_label not in out:
            out.append(n.key_label)
        for c in children(n):
            visit(c)

    for f in obj.fields:
        visit(f.type)
    return out


def _referenced_objects(obj: ObjectType) -> list[ObjectType]:
    out: list[ObjectType] = []

    def visit(n: Node) -> None:
        if isinstance(n, ObjectType):
            if n not in out:
                out.append(n)
            return
        for c in children(n):
            visit(c)

    for f in obj.fields:
        visit(f.type)
    return out


# ---- Python classes -> nodes -------------------------------------------------------------------

_COMMENT = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*:[^#]*#\s*(.+?)\s*$")


def _own_doc(py_cls: type) -> str:
    doc = py_cls.__dict__.get("__doc__")
    if not doc:
        return ""
    doc = inspect.cleandoc(doc)
    if dataclasses.is_dataclass(py_cls) and doc.startswith(py_cls.__name__ + "("):
        return ""  # the signature dataclasses writes when there is no docstring
    return doc


def _source_comments(py_cls: type) -> dict[str, str]:
    """Trailing `# ...` comments on field lines (the papers document fields that way)."""
    try:
        src = inspect.getsource(py_cls)
    except (OSError, TypeError):
        return {}
    out: dict[str, str] = {}
    for line in src.splitlines():
        m = _COMMENT.match(line)
        if m and m.group(1) not in out and "pylint" not in m.group(2):
            out[m.group(1)] = m.group(2)
    return out


def _object_from_class(py_cls: type, building: dict[type, ObjectType | None], namespace: dict[str, Any]) -> ObjectType:
    if py_cls in building:
        if building[py_cls] is None:
            raise SchemaError(f"class {py_cls.__name__} contains itself; a typed hierarchy must be finite")
        return building[py_cls]  # type: ignore[return-value]
    building[py_cls] = None
    localns = {**namespace, **{k: v for k, v in vars(py_cls).items() if isinstance(v, type)}}
    module = inspect.getmodule(py_cls)
    globalns = dict(vars(module)) if module else {}
    try:
        hints = typing.get_type_hints(py_cls, globalns=globalns, localns=localns, include_extras=True)
    except Exception as e:
        raise SchemaError(
            f"cannot resolve the annotations of {py_cls.__name__} ({e}); "
            "define referenced classes before use or inside the class"
        ) from None
    own = _own_annotation_names(py_cls)
    comments = _source_comments(py_cls)
    field_docs = _field_docs(py_cls)
    fields = []
    for name in own:
        if name.startswith("_") or name not in hints or typing.get_origin(hints[name]) is typing.ClassVar:
            continue
        node, adoc = _node_from_hint(hints[name], f"{py_cls.__name__}.{name}", building, namespace)
        fields.append(Field(name, node, field_docs.get(name) or adoc or comments.get(name, "")))
    bases = ("TypedDict",) if typing.is_typeddict(py_cls) else ()
    obj = ObjectType(py_cls.__name__, tuple(fields), _own_doc(py_cls), bases)
    building[py_cls] = obj
    return obj


def _own_annotation_names(py_cls: type) -> list[str]:
    names: list[str] = []
    for klass in reversed(py_cls.__mro__):
        if klass is object or klass.__module__ in ("typing", "pydantic.main", "builtins"):
            continue
        for n in klass.__dict__.get("__annotations__", {}):
            if n not in names:
                names.append(n)
    if typing.is_typeddict(py_cls):
        for n in py_cls.__annotations__:
            if n not in names:
                names.append(n)
    return names


def _field_docs(py_cls: type) -> dict[str, str]:
    out: dict[str, str] = {}
    if dataclasses.is_dataclass(py_cls):
        for f in dataclasses.fields(py_cls):
            doc = f.metadata.get("doc") or f.metadata.get("description")
            if doc:
                out[f.name] = str(doc)
    model_fields = getattr(py_cls, "model_fields", None)  # pydantic v2
    if isinstance(model_fields, dict):
        for n, info in model_fields.items():
            if getattr(info, "description", None):
                out[n] = info.description
    return out


def _node_from_hint(
    hint: Any, where: str, building: dict[type, ObjectType | None], namespace: dict[str, Any]
) -> tuple[Node, str]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Required, typing.NotRequired, typing.ClassVar) and args:
        return _node_from_hint(args[0], where, building, namespace)  # every field is optional anyway
    if origin is typing.Annotated:
        node, _ = _node_from_hint(args[0], where, building, namespace)
        docs = [a for a in args[1:] if isinstance(a, str)]
        return node, (docs[0] if docs else "")
    if hint is Any:
        return Prim("Any"), ""
    if origin is typing.Literal:
        if not all(a is None or isinstance(a, (str, int, float, bool)) for a in args):
            raise SchemaError(f"{where}: Literal values must be JSON scalars, got {args!r}")
        return EnumOf(tuple(args)), ""
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        vals = tuple(m.value for m in hint)
        if not all(v is None or isinstance(v, (str, int, float, bool)) for v in vals):
            raise SchemaError(f"{where}: enum {hint.__name__} must have JSON scalar values")
        return EnumOf(vals), ""
    if hint is None or hint is type(None):
        return Prim("None"), ""
    for py, kind in ((bool, "bool"), (str, "str"), (int, "int"), (float, "float")):
        if hint is py:
            return Prim(kind), ""
    if origin is list:
        return ListOf(_node_from_hint(args[0], where, building, namespace)[0] if args else Prim("Any")), ""
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return ListOf(_node_from_hint(args[0], where, building, namespace)[0]), ""
        if not args:
            return ListOf(Prim("Any")), ""
        return TupleOf(tuple(_node_from_hint(a, where, building, namespace)[0] for a in args)), ""
    if origin is dict:
        label = "str"
        if args and isinstance(args[0], typing.NewType) and args[0].__supertype__ is str:
            label = args[0].__name__  # dict[Facet, ...] with Facet = NewType("Facet", str)
        elif args and args[0] is not str:
            raise SchemaError(f"{where}: dict keys must be str (JSON object keys are strings), got {args[0]!r}")
        return DictOf(_node_from_hint(args[1], where, building, namespace)[0] if args else Prim("Any"), label), ""
    if origin in (typing.Union, pytypes.UnionType):
        return UnionOf(tuple(_node_from_hint(a, where, building, namespace)[0] for a in args)), ""
    if isinstance(hint, type) and (
        dataclasses.is_dataclass(hint)
        or typing.is_typeddict(hint)
        or hasattr(hint, "model_fields")
        or hint.__dict__.get("__annotations__")
    ):
        return _object_from_class(hint, building, namespace), ""
    raise SchemaError(
        f"{where}: type {hint!r} is not part of the typed-hierarchy language; use str, int, float, "
        "bool, Any, list[...], tuple[...], dict[str, ...], X | None or a class with annotated fields"
    )
