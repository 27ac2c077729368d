"""Revisions (seed 002 definition 3.4): (path, op, value) with op 'add' or 'update'.

* add: `path` must not exist yet; missing parents are created as the schema says (partial objects
  are allowed), a list grows by adding at index len(list), and adding an item-typed value at an
  existing list path appends it (CoK: additions "may increase the size of lists").
* update: `path` must exist; its value is replaced.
Every revision is checked against the schema at its path before anything changes; a rejected
revision carries a reason and leaves the memory exactly as it was.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Iterable, Literal, Sequence

from memloop.eval.memory.errors import PathError, RevisionError
from memloop.eval.memory.paths import Path
from memloop.eval.memory.schema import PLACEHOLDER, Schema
from memloop.eval.memory.types import DictOf, ListOf, ObjectType, TupleOf, strip_none, type_text

Op = Literal["add", "update"]
OPS = ("add", "update")


def to_json_data(value: Any) -> Any:
    """Tuples -> lists (JSON has no tuples); dict keys must be strings."""
    if isinstance(value, (list, tuple)):
        return [to_json_data(v) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise RevisionError(f"object key {k!r} is not a string; JSON memories only have string keys")
            out[k] = to_json_data(v)
        return out
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        raise RevisionError(f"value {value} is not JSON (NaN and infinities have no JSON form)")
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise RevisionError(f"value of type {type(value).__name__} is not JSON data")


@dataclass(frozen=True)
class Revision:
    path: Path
    op: Op
    value: Any

    def __init__(self, path: "Path | str", op: str, value: Any) -> None:
        if op not in OPS:
            raise RevisionError(f"revision op must be 'add' or 'update', got {op!r}")
        object.__setattr__(self, "path", Path.parse(path))
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "value", to_json_data(value))

    def to_dict(self) -> dict[str, Any]:
        """The PRISM line form: {path: {op: value}}."""
        return {self.path.text: {self.op: self.value}}


@dataclass(frozen=True)
class Rejection:
    """A revision (or raw text that never became one) that was not applied, and why."""

    reason: str
    revision: Revision | None = None
    raw: str = ""


@dataclass
class ApplyResult:
    memory: dict[str, Any]
    applied: list[Revision] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


_MISSING = object()


def _get(container: Any, seg: Any) -> Any:
    if isinstance(container, dict) and isinstance(seg, str):
        return container.get(seg, _MISSING)
    if isinstance(container, list) and isinstance(seg, int):
        return container[seg] if seg < len(container) else _MISSING
    return _MISSING


def _empty_for(node: Any) -> Any:
    node = strip_none(node)
    if isinstance(node, (ObjectType, DictOf)):
        return {}
    if isinstance(node, ListOf):
        return []
    if isinstance(node, TupleOf):
        return [None] * len(node.items)
    return _MISSING


def _is_placeholder(v: Any) -> bool:
    return v is None or v == PLACEHOLDER


def check(memory: dict[str, Any], rev: Revision, schema: Schema) -> str | None:
    """Why `rev` cannot be applied to `memory` (None when it can). Never mutates."""
    return _plan(memory, rev, schema)[0]


def _plan(memory: dict[str, Any], rev: Revision, schema: Schema, ops: Sequence[str] = OPS) -> tuple[str | None, str]:
    """(reason or None, how to apply: 'set', 'append' to an existing list, or 'create-list' of one item)."""
    reason = _check(memory, rev, schema, ops)
    if reason in (_APPEND, _CREATE_LIST):
        return None, reason  # type: ignore[return-value]
    return reason, "set"


_APPEND = "append"
_CREATE_LIST = "create-list"


def _check(memory: dict[str, Any], rev: Revision, schema: Schema, ops: Sequence[str] = OPS) -> str | None:
    p = rev.path
    if not p.segments:
        return "a revision cannot replace the whole memory ('$'); address a field such as $. 'attributes'"
    try:
        node = schema.node_at(p)
    except PathError as e:
        return str(e)
    cur: Any = memory
    for i, seg in enumerate(p.segments[:-1]):
        nxt = _get(cur, seg)
        if nxt is _MISSING or (rev.op == "add" and _is_placeholder(nxt)):
            if rev.op == "update":
                return (
                    f"update of {p.text}: {Path(p.segments[: i + 1]).text} does not exist in the memory; "
                    "use 'add' to create a new path"
                )
            if isinstance(seg, int) and isinstance(cur, list) and seg > len(cur):
                return f"add at {p.text}: index {seg} skips past the end of a list of {len(cur)} items"
            # the rest of the path will be created: each container must be clear from the schema
            for j in range(i, len(p.segments) - 1):
                if _empty_for(schema.node_at(Path(p.segments[: j + 1]))) is _MISSING:
                    where = Path(p.segments[: j + 1]).text
                    return (
                        f"add at {p.text}: {where} does not exist and its type "
                        f"({type_text(schema.node_at(Path(p.segments[: j + 1])))}) does not say which container "
                        f"to create; add the whole value at {where} instead"
                    )
            # new lists can only start at index 0
            for j in range(i + 1, len(p.segments)):
                s = p.segments[j]
                if (
                    isinstance(s, int)
                    and s != 0
                    and isinstance(strip_none(schema.node_at(Path(p.segments[:j]))), ListOf)
                ):
                    return (
                        f"add at {p.text}: {Path(p.segments[:j]).text} is a new list, so it starts at index 0, not {s}"
                    )
            return _new_value_errors(schema, p, node, rev.value)
        if not isinstance(nxt, (dict, list)):
            return f"{rev.op} at {p.text}: {Path(p.segments[: i + 1]).text} holds {nxt!r}, which has no children"
        cur = nxt
    last = p.segments[-1]
    existing = _get(cur, last)
    if rev.op == "update":
        if existing is _MISSING:
            return f"update of {p.text}: the path does not exist in the memory; use 'add' to create it"
        return _value_errors(schema, p, node, rev.value)
    # add
    if existing is not _MISSING:
        if isinstance(existing, list) and isinstance(strip_none(node), ListOf):
            if not schema.errors_at(p.child(len(existing)), rev.value):
                return _APPEND  # add an item to an existing list
        if "update" not in ops:  # the add-only variant: never point at the operation it forbids
            return (
                f"add at {p.text}: the path already exists and revisions may only add; add at a new path, "
                "or add one item to a list"
            )
        return f"add at {p.text}: the path already exists; use 'update' to replace its value"
    if isinstance(last, int) and isinstance(cur, list) and last != len(cur):
        return f"add at {p.text}: a list of {len(cur)} items grows only at index {len(cur)}"
    return _new_value_errors(schema, p, node, rev.value)


def _new_value_errors(schema: Schema, p: Path, node: Any, value: Any) -> str | None:
    """A new path takes a value of its type, or one item when it is a list (the list is created)."""
    reason = _value_errors(schema, p, node, value)
    if reason and isinstance(strip_none(node), ListOf) and not schema.errors_at(p.child(0), value):
        return _CREATE_LIST
    return reason


def _value_errors(schema: Schema, p: Path, node: Any, value: Any) -> str | None:
    errs = schema.errors_at(p, value)
    if errs:
        here, tail = f"at {p.text}: ", f" (expected {type_text(node)})"
        short = [e[len(here) :] if e.startswith(here) else e for e in errs]  # the path is said once
        short = [e[: -len(tail)] if e.endswith(tail) else e for e in short]
        return f"{p.text} expects {type_text(node)}: " + "; ".join(short)
    return None


def _apply_checked(memory: dict[str, Any], rev: Revision, schema: Schema, mode: str) -> None:
    """Mutate `memory` with a revision that `check` accepted."""
    p = rev.path
    cur: Any = memory
    for i, seg in enumerate(p.segments[:-1]):
        nxt = _get(cur, seg)
        if nxt is _MISSING or (rev.op == "add" and _is_placeholder(nxt)):
            nxt = _empty_for(schema.node_at(Path(p.segments[: i + 1])))
            if isinstance(cur, list) and seg == len(cur):
                cur.append(nxt)
            else:
                cur[seg] = nxt
        cur = nxt
    last = p.segments[-1]
    value = copy.deepcopy(rev.value)
    if mode == _CREATE_LIST:
        value = [value]
    if mode == _APPEND:
        cur[last].append(value)  # check() allowed this only for appending to a list
    elif isinstance(cur, list) and last == len(cur):
        cur.append(value)
    else:
        cur[last] = value


def apply_revisions(
    memory: dict[str, Any], revisions: Iterable[Revision], schema: Schema, ops: Sequence[str] = OPS
) -> ApplyResult:
    """Apply revisions in order to a copy of `memory`; each is accepted or rejected on its own.

    `ops`: the operations the caller allows (the add-only variant passes ("add",)), so a rejection
    never advises an operation the model may not use."""
    if schema.errors(memory):
        raise RevisionError(
            f"the memory does not conform to schema {schema.name}: {schema.errors(memory)[0]}; "
            "start from {} or a memory that validates"
        )
    out = ApplyResult(copy.deepcopy(memory))
    for rev in revisions:
        reason, mode = _plan(out.memory, rev, schema, ops)
        if reason is None:
            _apply_checked(out.memory, rev, schema, mode)
            out.applied.append(rev)
        else:
            out.rejected.append(Rejection(reason, rev))
    return out


def apply_revision(memory: dict[str, Any], rev: Revision, schema: Schema) -> dict[str, Any]:
    """Apply one revision to a copy of `memory`; RevisionError with the reason if it is rejected."""
    res = apply_revisions(memory, [rev], schema)
    if res.rejected:
        raise RevisionError(res.rejected[0].reason)
    return res.memory
