"""JSONPath addresses into a memory: `$.attributes.Amenities`, `$. 'values'. 'flexibility'`, `$.a[0]`.

Parsing uses jsonpath-ng, which reads the papers' quoted forms (keys with spaces, quotes, '&').
It rejects one form the CoK paper itself writes, a bare key with a space (`$.attributes.Noise Level`);
such bare segments are quoted first and then handed to jsonpath-ng. Only addresses of one node are
accepted (fields and single indices); wildcards, slices, filters and `..` are refused with a reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Union

from memloop.eval.memory.errors import PathError

Segment = Union[str, int]
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_KEYWORDS = {"where", "wherenot"}  # jsonpath-ng operators that cannot be bare keys
# The canonical and common forms, read without the ply parser (about 100x faster); anything else,
# and every error message, goes through jsonpath-ng. Property-tested to agree with it.
_FAST_SEG = re.compile(r"""\.[ ]*'((?:[^'\\]|\\['\\])*)'|\.([A-Za-z_][A-Za-z0-9_]*)|\[(0|[1-9][0-9]*)\]""")
_UNESCAPE = re.compile(r"\\(['\\])")


@dataclass(frozen=True)
class Path:
    """A path as a tuple of keys (str) and list indices (int); `$` is the empty tuple."""

    segments: tuple[Segment, ...] = ()

    @classmethod
    def parse(cls, text: "str | Path") -> "Path":
        if isinstance(text, Path):
            return text
        if not isinstance(text, str):
            raise PathError(
                f"a JSONPath must be a string like \"$. 'attributes'. 'Amenities'\", got {type(text).__name__}"
            )
        return Path(_parse(text.strip()))

    @property
    def text(self) -> str:
        """Canonical text in the papers' quoted style: `$. 'values'. 'flexibility'[0]`."""
        out = ["$"]
        for s in self.segments:
            out.append(f"[{s}]" if isinstance(s, int) else ". '" + s.replace("\\", "\\\\").replace("'", "\\'") + "'")
        return "".join(out)

    @property
    def parent(self) -> "Path":
        return Path(self.segments[:-1])

    def child(self, seg: Segment) -> "Path":
        return Path(self.segments + (seg,))

    def __str__(self) -> str:
        return self.text

    def __len__(self) -> int:
        return len(self.segments)


def _quote_bare_segments(text: str) -> str:
    """Quote dot-segments that are not identifiers (`.Noise Level` -> `.'Noise Level'`)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in "'\"":  # copy a quoted run unchanged
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif c == "." and i + 1 < n and text[i + 1] not in ".'\"[ ":
            j = i + 1
            while j < n and text[j] not in ".[":
                j += 1
            seg = text[i + 1 : j].rstrip()
            if (_IDENT.match(seg) and seg not in _KEYWORDS) or seg == "*":
                out.append("." + seg)
            else:
                out.append(".'" + seg.replace("\\", "\\\\").replace("'", "\\'") + "'")
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


MAX_SEGMENTS = (
    200  # as deep as a value may nest (`memloop.eval.memory.literal.MAX_DEPTH`); keeps the parser off the stack's end
)


@lru_cache(maxsize=4096)
def _parse(text: str) -> tuple[Segment, ...]:
    if not text.startswith("$"):
        raise PathError(f"JSONPath {text!r:.80} must start with '$' (e.g. \"$. 'attributes'. 'Amenities'\")")
    if text == "$":
        return ()
    fast = _fast_parse(text)
    # an upper bound of the segments, checked before the recursive parser reads them
    n = len(fast) if fast is not None else text.count(".") + text.count("[")
    if n > MAX_SEGMENTS:
        raise PathError(
            f"JSONPath {text[:60]!r}... has {'about ' if fast is None else ''}{n} segments, more than "
            f"{MAX_SEGMENTS}; a revision path must address a node of the memory"
        )
    return fast if fast is not None else _jsonpath_ng_parse(text)


def _jsonpath_ng_parse(text: str) -> tuple[Segment, ...]:
    import jsonpath_ng
    from jsonpath_ng import jsonpath as jp

    try:  # ply raises plain Exception on some lexer errors, hence the broad catch
        expr = jsonpath_ng.parse(_quote_bare_segments(text))
    except RecursionError:
        raise PathError(
            f"JSONPath {text[:60]!r}... is nested too deeply to read; a revision path must address a node of the memory"
        ) from None
    except Exception as e:
        raise PathError(f"JSONPath {text!r} is malformed ({e}); quote keys like \"$. 'Food & Beverage'\"") from None

    segs: list[Segment] = []

    def walk(node: object) -> None:
        if isinstance(node, jp.Root):
            return
        if isinstance(node, jp.Child):
            walk(node.left)
            walk(node.right)
            return
        if isinstance(node, jp.Fields) and len(node.fields) == 1 and node.fields[0] != "*":
            segs.append(node.fields[0])
            return
        if isinstance(node, jp.Index) and len(node.indices) == 1:
            if node.indices[0] < 0:
                raise PathError(
                    f"JSONPath {text!r}: negative index {node.indices[0]} is not supported; "
                    "use the exact index (or add at index len(list) to append)"
                )
            segs.append(node.indices[0])
            return
        raise PathError(
            f"JSONPath {text!r} uses {type(node).__name__} ({node}); a revision path must "
            "address exactly one node with keys and indices (no wildcards, slices, filters or '..')"
        )

    try:
        walk(expr)
    except RecursionError:
        raise PathError(
            f"JSONPath {text[:60]!r}... is nested too deeply to read; a revision path must address a node of the memory"
        ) from None
    return tuple(segs)


def _fast_parse(text: str) -> tuple[Segment, ...] | None:
    segs: list[Segment] = []
    pos = 1
    while pos < len(text):
        m = _FAST_SEG.match(text, pos)
        if m is None:
            return None
        quoted, ident, index = m.groups()
        if quoted is not None:
            segs.append(_UNESCAPE.sub(r"\1", quoted))
        elif ident is not None:
            if ident in _KEYWORDS:
                return None
            segs.append(ident)
        else:
            segs.append(int(index))
        pos = m.end()
    return tuple(segs)
