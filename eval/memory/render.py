"""Renderings of a memory for the prompt, byte-stable so consecutive prompts share long prefixes.

* in-place: the memory as canonical JSON. Keys keep insertion order (a new key lands at the end of
  its object, so everything before it is unchanged), two-space indent, `ensure_ascii=False`.
* amendments (seed 002 figure 4): the base memory followed by one line per accepted revision,
  `{"<path>": {"<op>": value}}`, replayed in order: an `add` at a list path appends to the list, an
  `update` replaces (the note the model reads, `s002-amendments-note`, says the same). Appending a revision appends
  bytes, so step i's text is a prefix of step i+1's. `fold_amendments` reads the text back into one
  memory by replaying the lines.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from memloop.eval.memory.errors import RevisionError, RevisionParseError
from memloop.eval.memory.literal import LiteralParseError, parse_value
from memloop.eval.memory.revisions import OPS, Revision, apply_revisions
from memloop.eval.memory.schema import Schema

SEPARATOR = "\n"


def render_in_place(memory: dict[str, Any], indent: int | None = 2) -> str:
    """Canonical JSON of a memory (deterministic for a given memory and key insertion order)."""
    try:
        return json.dumps(
            memory,
            ensure_ascii=False,
            indent=indent,
            allow_nan=False,
            separators=(",", ": ") if indent else (", ", ": "),
        )
    except ValueError as e:
        raise RevisionError(f"the memory holds a value JSON cannot write ({e}); replace NaN/infinity values") from None


def render_revision(rev: Revision) -> str:
    """One amendment line in the PRISM form {"$. 'a'. 'b'": {"add": value}}."""
    return json.dumps({rev.path.text: {rev.op: rev.value}}, ensure_ascii=False)


def render_amendments(base: dict[str, Any], revisions: Iterable[Revision], indent: int | None = 2) -> str:
    """Base memory, then each revision on its own line; every piece ends with a newline."""
    parts = [render_in_place(base, indent) + SEPARATOR]
    parts.extend(render_revision(r) + SEPARATOR for r in revisions)
    return "".join(parts)


@dataclass
class Amendments:
    """An amendments memory: a base plus the accepted revisions in order."""

    schema: Schema
    base: dict[str, Any] = field(default_factory=dict)
    revisions: list[Revision] = field(default_factory=list)

    _folded: tuple[int, int, dict[str, Any]] | None = field(default=None, init=False, repr=False, compare=False)

    def revise(self, revisions: Sequence[Revision], ops: Sequence[str] = OPS) -> list:
        """Validate against the folded memory; append only the accepted ones. Returns the rejections
        (`ops`: the operations the caller allows, as in `apply_revisions`)."""
        res = apply_revisions(self.fold(), revisions, self.schema, ops)
        self.revisions.extend(res.applied)
        self._folded = (id(self.base), len(self.revisions), res.memory)  # folding is incremental
        return res.rejected

    def text(self, indent: int | None = 2) -> str:
        return render_amendments(self.base, self.revisions, indent)

    @classmethod
    def from_text(cls, text: str, schema: Schema) -> "Amendments":
        """Rebuild from a stored rendering (e.g. to resume a run); every amendment must still apply."""
        base, revs = parse_amendments(text)
        am = cls(schema, base, revs)
        am.fold()  # raises RevisionError if an amendment does not apply
        return am

    def fold(self) -> dict[str, Any]:
        """The in-place memory these amendments stand for (a fresh copy each call)."""
        if self._folded is not None and self._folded[:2] == (id(self.base), len(self.revisions)):
            return copy.deepcopy(self._folded[2])
        res = apply_revisions(self.base, self.revisions, self.schema)
        if res.rejected:  # cannot happen for revisions added through revise()
            raise RevisionError(f"amendment {res.rejected[0].revision} no longer applies: {res.rejected[0].reason}")
        self._folded = (id(self.base), len(self.revisions), res.memory)
        return copy.deepcopy(res.memory)


def parse_amendments(text: str) -> tuple[dict[str, Any], list[Revision]]:
    """Read an amendments rendering back into (base, revisions)."""
    try:
        base, pos = parse_value(text)
    except LiteralParseError as e:
        raise RevisionParseError(f"amendments text does not start with a JSON memory: {e}") from None
    if not isinstance(base, dict):
        raise RevisionParseError("amendments text must start with a JSON object (the base memory)")
    revs: list[Revision] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t\r\n":
            pos += 1
        if pos >= n:
            return base, revs
        try:
            obj, pos = parse_value(text, pos)
        except LiteralParseError as e:
            raise RevisionParseError(f"amendment line is not JSON: {e}") from None
        if not isinstance(obj, dict) or len(obj) != 1:
            raise RevisionParseError(f"an amendment must be one {{path: {{op: value}}}} object, got {obj!r:.80}")
        ((path, body),) = obj.items()
        if not isinstance(body, dict) or len(body) != 1:
            raise RevisionParseError(f'amendment for {path} must be {{"add"|"update": value}}, got {body!r:.80}')
        ((op, value),) = body.items()
        revs.append(Revision(path, op, value))


def fold_amendments(text: str, schema: Schema) -> dict[str, Any]:
    """One in-place memory from an amendments rendering (its lines replayed in order, as revisions)."""
    base, revs = parse_amendments(text)
    res = apply_revisions(base, revs, schema)
    if res.rejected:
        raise RevisionError(
            f"amendment {res.rejected[0].revision.path.text if res.rejected[0].revision else ''} "
            f"does not apply: {res.rejected[0].reason}"
        )
    return res.memory


def shared_prefix_chars(prev: str, nxt: str) -> int:
    """Length of the longest common prefix of two renderings, in characters."""
    from memloop.eval.tokens import common_prefix

    return common_prefix(prev, nxt)


def shared_prefix_tokens(prev: str, nxt: str, encode: Callable[[str], Sequence[int]] | None = None) -> int:
    """Tokens of the longest common token prefix (what a prefix cache reuses). Default: cl100k_base."""
    from memloop.eval.tokens import cl100k_encode, common_prefix

    encode = encode or cl100k_encode
    return common_prefix(list(encode(prev)), list(encode(nxt)))
