"""The revision formats methods ask the model for, and their parsers.

* CoK (seed 000 figure 5): `[UPDATED_OBJECTS]` and `[ADDED_OBJECTS]` sections, each one JSON object
  {path: {"update"|"add": value}}, often inside ``` fences and with trailing commas.
* PRISM (seed 002 appendix C): `[OBJECTS FOR UPDATE]` and `[OBJECTS FOR ADD]` sections with one
  {path: {op: value}} object per line; values may be Python tuples or None.
* A JSON-Schema form for constrained decoding: {"revisions": [{"path", "op", "value"}, ...]}, where
  each schema location gets its own branch (a path regex and the value's schema).
Parsers never fail on one bad entry: it becomes a Rejection with the reason and the raw text, and the
good entries are kept. Only an output with none of the expected sections raises RevisionParseError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from memloop.eval.memory.errors import LiteralParseError, PathError, RevisionError, RevisionParseError
from memloop.eval.memory.literal import iter_values, loads
from memloop.eval.memory.revisions import OPS, Rejection, Revision
from memloop.eval.memory.schema import Schema, _build
from memloop.eval.memory.types import DictOf, ListOf, Node, ObjectType, Prim, TupleOf, UnionOf, strip_none

COK_SECTIONS = {"UPDATED_OBJECTS": "update", "ADDED_OBJECTS": "add"}
PRISM_SECTIONS = {"OBJECTS_FOR_UPDATE": "update", "OBJECTS_FOR_ADD": "add"}
_HEADER = re.compile(r"^[ \t]*\[([A-Za-z][A-Za-z _\\]*)\][ \t]*:?", re.MULTILINE)
_FENCE = re.compile(r"^[ \t]*```[A-Za-z]*[ \t]*$", re.MULTILINE)


@dataclass
class ParsedRevisions:
    revisions: list[Revision] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)


def _norm(name: str) -> str:
    return re.sub(r"[ _]+", "_", name.replace("\\", "").strip()).upper()


def split_sections(text: str) -> dict[str, str]:
    """`[NAME]` headers at line starts -> the text up to the next header (first occurrence wins)."""
    heads = list(_HEADER.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        out.setdefault(_norm(m.group(1)), text[m.end() : end])
    return out


def _entries(body: str, default_op: str, out: ParsedRevisions) -> None:
    body = _FENCE.sub("", body)
    for item in iter_values(body):
        if isinstance(item, LiteralParseError):
            start = getattr(item, "start", 0)
            end = body.find("\n{", start)
            out.rejected.append(
                Rejection(
                    f"unreadable revision: {item}", raw=body[start : end if end >= 0 else len(body)].strip()[:200]
                )
            )
            continue
        value, start, end = item
        raw = body[start:end]
        if not isinstance(value, dict):
            out.rejected.append(
                Rejection(f'expected {{path: {{"{default_op}": value}}}}, got {type(value).__name__}', raw=raw[:200])
            )
            continue
        for path, wrapped in value.items():
            out_item = _one(path, wrapped, default_op)
            if isinstance(out_item, Revision):
                out.revisions.append(out_item)
            else:
                out.rejected.append(Rejection(out_item, raw=json.dumps({path: wrapped}, ensure_ascii=False)[:200]))


def _one(path: str, wrapped: Any, default_op: str) -> Revision | str:
    if not (isinstance(wrapped, dict) and len(wrapped) == 1 and str(next(iter(wrapped))).lower() in OPS):
        return f'revision for {path!r} must be {{"{default_op}": value}}, got {json.dumps(wrapped)[:80]}'
    ((op, value),) = wrapped.items()
    op = op.lower()  # "UPDATE"/"ADD" as the prompts spell the operations
    try:
        return Revision(path, op, value)
    except (PathError, RevisionError) as e:
        return str(e)


def _parse_sections(text: str, names: dict[str, str], fmt: str) -> ParsedRevisions:
    sections = split_sections(text)
    found = [n for n in names if n in sections]
    if not found:
        wanted = " and ".join("[" + n.replace("_", " " if fmt == "PRISM" else "_") + "]" for n in names)
        raise RevisionParseError(
            f"the {fmt} output has none of the sections {wanted}; the model must answer "
            "in the format the prompt shows (check the prompt and max_tokens)"
        )
    out = ParsedRevisions()
    for n in names:  # updates first, then adds, in the order the prompts ask for them
        if n in sections:
            _entries(sections[n], names[n], out)
    return out


def parse_cok(text: str) -> ParsedRevisions:
    """Revisions from a Chain-of-Key answer ([UPDATED_OBJECTS] then [ADDED_OBJECTS])."""
    return _parse_sections(text, COK_SECTIONS, "CoK")


def parse_prism(text: str, opened: str | None = None) -> ParsedRevisions:
    """Revisions from a PRISM answer ([OBJECTS FOR UPDATE] then [OBJECTS FOR ADD]).

    `opened`: the section header the prompt ends with (e.g. "[OBJECTS FOR UPDATE]"); an answer that
    starts without a header of its own continues that section rather than losing its lines.
    """
    if opened is not None:
        first = _HEADER.search(text)
        lead = text[: first.start()] if first else text
        if re.search(r"^[ \t]*\{", lead, re.MULTILINE):  # entries before any header of the answer's own
            text = opened + "\n" + text
    return _parse_sections(text, PRISM_SECTIONS, "PRISM")


def render_cok(revisions: Sequence[Revision]) -> str:
    """The CoK answer sections for `revisions` (few-shot examples, replay files)."""
    parts = []
    for name, op in COK_SECTIONS.items():
        body = {r.path.text: {op: r.value} for r in revisions if r.op == op}
        parts.append(f"[{name}]\n```\n{json.dumps(body, ensure_ascii=False, indent=4)}\n```")
    return "\n\n".join(parts) + "\n"


def render_prism(revisions: Sequence[Revision]) -> str:
    """The PRISM answer sections for `revisions`, one object per line ('{}' for an empty section)."""
    parts = []
    for name, op in PRISM_SECTIONS.items():
        lines = [json.dumps({r.path.text: {op: r.value}}, ensure_ascii=False) for r in revisions if r.op == op]
        parts.append("[" + name.replace("_", " ") + "]\n" + ("\n".join(lines) if lines else "{}"))
    return "\n\n".join(parts) + "\n"


# ---- JSON-Schema form for constrained decoding -------------------------------------------------

_META = set("\\.^$|?*+()[]{}")


def _rx(s: str) -> str:
    return "".join("\\" + c if c in _META else c for c in s)


_KEY_RX = r"\. '(?:[^'\\]|\\.)+'"
_INDEX_RX = r"\[(?:0|[1-9][0-9]*)\]"


def _locations(node: Node, rx: str, depth: int, out: list[tuple[str, Node, bool]]) -> None:
    """(path regex, node, is_list) for every addressable location below `node`."""
    if depth > 8:
        return
    node = strip_none(node)
    kids: list[tuple[str, Node]] = []
    if isinstance(node, ObjectType):
        kids = [(_rx(". '" + f.name.replace("\\", "\\\\").replace("'", "\\'") + "'"), f.type) for f in node.fields]
    elif isinstance(node, DictOf):
        kids = [(_KEY_RX, node.value)]
    elif isinstance(node, ListOf):
        kids = [(_INDEX_RX, node.item)]
    elif isinstance(node, TupleOf):
        kids = [(rf"\[{i}\]", t) for i, t in enumerate(node.items)]
    elif isinstance(node, UnionOf):
        for o in node.options:
            if not isinstance(o, Prim):
                _locations(o, rx, depth, out)
        return
    for krx, child in kids:
        out.append((rx + krx, child, isinstance(strip_none(child), ListOf)))
        _locations(child, rx + krx, depth + 1, out)


def revision_list_schema(schema: Schema, ops: Sequence[str] = OPS) -> dict[str, Any]:
    """JSON Schema of {"revisions": [...]} whose items are valid revisions of `schema`'s memories.

    `ops=("add",)` gives the add-only ablation of seed 002. Each branch fixes the path's shape with a
    regex and the value's type with that location's schema; a list location also takes one item (add).
    """
    bad = [o for o in ops if o not in OPS]
    if bad or not ops:
        raise RevisionError(f"ops must be a non-empty subset of {OPS}, got {list(ops)}")
    locs: list[tuple[str, Node, bool]] = []
    _locations(schema.root, "", 0, locs)
    branches = []
    for rx, node, is_list in locs:
        values = [_build(node, schema.placeholders)]
        if is_list and "add" in ops:
            values.append(_build(strip_none(node).item, schema.placeholders))  # type: ignore[union-attr]
        branches.append(
            {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "pattern": "^\\$" + rx + "$"},
                    "op": {"enum": list(ops)},
                    "value": values[0] if len(values) == 1 else {"anyOf": values},
                },
                "required": ["path", "op", "value"],
                "additionalProperties": False,
            }
        )
    return {
        "type": "object",
        "title": f"{schema.name}Revisions",
        "properties": {"revisions": {"type": "array", "items": {"anyOf": branches}}},
        "required": ["revisions"],
        "additionalProperties": False,
    }


_LIST_START = re.compile(r'\s*\{\s*"revisions"\s*:\s*\[')


def _complete_items(text: str) -> tuple[list[Any], str] | None:
    """The complete revisions of a `{"revisions": [...` output cut before its end, and the cut tail;
    None when the text does not start that way."""
    m = _LIST_START.match(text)
    if m is None:
        return None
    decoder, pos, items = json.JSONDecoder(), m.end(), []
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        try:
            item, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            return items, text[pos:]
        items.append(item)


def parse_revision_list(output: str | dict[str, Any], keep_complete: bool = False) -> ParsedRevisions:
    """Revisions from the JSON-Schema form (text or already-decoded object).

    `keep_complete`: an output cut before the list closes (max_tokens) keeps every complete revision
    before the cut and records the cut as a rejection, as the free-text parser keeps every complete
    line; otherwise such an output is a RevisionParseError.
    """
    cut: Rejection | None = None
    if isinstance(output, str):
        try:
            output = loads(output.strip())
        except LiteralParseError as e:
            partial = _complete_items(output) if keep_complete else None
            if partial is None:
                raise RevisionParseError(f"constrained output is not JSON: {e}") from None
            items, tail = partial
            cut = Rejection(
                f"the output ends before its revision list closes (cut at max_tokens?); the "
                f"{len(items)} complete revision(s) before the cut were kept",
                raw=tail[:200],
            )
            output = {"revisions": items}
    if not isinstance(output, dict) or not isinstance(output.get("revisions"), list):
        raise RevisionParseError('constrained output must be {"revisions": [{"path": ..., "op": ..., "value": ...}]}')
    out = ParsedRevisions()
    for item in output["revisions"]:
        raw = json.dumps(item, ensure_ascii=False)[:200]
        if not isinstance(item, dict) or set(item) != {"path", "op", "value"}:
            out.rejected.append(Rejection('a revision needs exactly the keys "path", "op" and "value"', raw=raw))
            continue
        try:
            out.revisions.append(Revision(item["path"], item["op"], item["value"]))
        except (PathError, RevisionError) as e:
            out.rejected.append(Rejection(str(e), raw=raw))
    if cut is not None:
        out.rejected.append(cut)
    return out
