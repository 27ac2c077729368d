"""A lenient reader for the JSON values LLMs write in revision sections.

The papers' own prompts show values that strict JSON rejects: Python tuples `("a", "???")`,
`None`, trailing commas (seed 000 figure 5), single-quoted strings. No library reads JSON and
Python literals together with the end offset we need to read several values from one section,
so this is a small recursive-descent reader. It never evaluates code: only literals are accepted.
Tuples become lists so that every value read here is plain JSON data.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

from memloop.eval.memory.errors import LiteralParseError

_WS = " \t\r\n"
_NAMES = {"true": True, "false": False, "null": None, "True": True, "False": False, "None": None}
_ESCAPES = {'"': '"', "'": "'", "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


MAX_DEPTH = 200  # far beyond any memory; keeps hostile input from exhausting the stack


class _Reader:
    def __init__(self, text: str) -> None:
        self.text = text
        self.depth = 0

    def fail(self, pos: int, what: str) -> LiteralParseError:
        line = self.text.count("\n", 0, pos) + 1
        snippet = self.text[pos : pos + 40].replace("\n", "\\n")
        return LiteralParseError(
            f"{what} at line {line}, offset {pos} (near {snippet!r}); "
            "the value must be JSON (tuples, None and trailing commas are tolerated)"
        )

    def ws(self, pos: int) -> int:
        t = self.text
        while pos < len(t) and t[pos] in _WS:
            pos += 1
        return pos

    def value(self, pos: int) -> tuple[Any, int]:
        pos = self.ws(pos)
        if pos >= len(self.text):
            raise self.fail(pos, "expected a value but the text ended")
        c = self.text[pos]
        if c in "{[(":
            if self.depth >= MAX_DEPTH:
                raise self.fail(pos, f"value nested more than {MAX_DEPTH} levels deep")
            self.depth += 1
            try:
                return self.obj(pos + 1) if c == "{" else self.seq(pos + 1, "]" if c == "[" else ")")
            finally:
                self.depth -= 1
        if c in "\"'":
            return self.string(pos)
        if c == "-" or c.isdigit():
            return self.number(pos)
        end = pos
        while end < len(self.text) and (self.text[end].isalnum() or self.text[end] == "_"):
            end += 1
        word = self.text[pos:end]
        if word in _NAMES:
            return _NAMES[word], end
        raise self.fail(pos, f"unexpected {'name ' + repr(word) if word else 'character ' + repr(c)}")

    def obj(self, pos: int) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        pos = self.ws(pos)
        while True:
            pos = self.ws(pos)
            if pos < len(self.text) and self.text[pos] == "}":
                return out, pos + 1
            if pos >= len(self.text) or self.text[pos] not in "\"'":
                raise self.fail(pos, "expected a quoted key or '}'")
            key, pos = self.string(pos)
            pos = self.ws(pos)
            if pos >= len(self.text) or self.text[pos] != ":":
                raise self.fail(pos, "expected ':' after a key")
            val, pos = self.value(pos + 1)
            out[key] = val
            pos = self.ws(pos)
            if pos < len(self.text) and self.text[pos] == ",":
                pos += 1
            elif pos >= len(self.text) or self.text[pos] != "}":
                raise self.fail(pos, "expected ',' or '}' in an object")

    def seq(self, pos: int, close: str) -> tuple[list[Any], int]:
        out: list[Any] = []
        while True:
            pos = self.ws(pos)
            if pos < len(self.text) and self.text[pos] == close:
                return out, pos + 1
            val, pos = self.value(pos)
            out.append(val)
            pos = self.ws(pos)
            if pos < len(self.text) and self.text[pos] == ",":
                pos += 1
            elif pos >= len(self.text) or self.text[pos] != close:
                raise self.fail(pos, f"expected ',' or {close!r} in a list")

    def string(self, pos: int) -> tuple[str, int]:
        t, quote = self.text, self.text[pos]
        if quote == '"':  # the common case: let the json module do escapes exactly
            try:
                return json.decoder.scanstring(t, pos + 1, False)  # type: ignore[attr-defined]
            except json.JSONDecodeError as e:
                raise self.fail(pos, f"bad string ({e.msg})") from None
        buf: list[str] = []
        i = pos + 1
        while i < len(t):
            c = t[i]
            if c == quote:
                return "".join(buf), i + 1
            if c == "\\" and i + 1 < len(t):
                n = t[i + 1]
                if n == "u" and i + 6 <= len(t):
                    try:
                        buf.append(chr(int(t[i + 2 : i + 6], 16)))
                        i += 6
                        continue
                    except ValueError:
                        raise self.fail(i, "bad \\u escape") from None
                buf.append(_ESCAPES.get(n, "\\" + n))
                i += 2
                continue
            buf.append(c)
            i += 1
        raise self.fail(pos, "unterminated string")

    def number(self, pos: int) -> tuple[int | float, int]:
        m = json.scanner.NUMBER_RE.match(self.text, pos)  # type: ignore[attr-defined]
        if not m or m.end() == pos or m.group(0) == "-":
            raise self.fail(pos, "bad number")
        integer, frac, exp = m.groups()
        if frac or exp:
            val = float(m.group(0))
            if val in (float("inf"), float("-inf")):
                raise self.fail(pos, "number out of range (JSON has no infinity)")
            return val, m.end()
        try:
            return int(integer), m.end()
        except ValueError:  # beyond Python's int-digits limit (sys.get_int_max_str_digits)
            raise self.fail(pos, f"an integer of {len(integer.lstrip('-'))} digits is too long") from None


def parse_value(text: str, pos: int = 0) -> tuple[Any, int]:
    """Read one value starting at `pos` (leading whitespace skipped); return it and the end offset."""
    return _Reader(text).value(pos)


def loads(text: str) -> Any:
    """Read exactly one value from `text`; trailing non-space text is an error."""
    r = _Reader(text)
    val, end = r.value(0)
    end = r.ws(end)
    if end != len(text):
        raise r.fail(end, "unexpected text after the value")
    return val


def iter_values(text: str) -> Iterator[tuple[Any, int, int] | LiteralParseError]:
    """Read consecutive top-level values (e.g. one JSON object per line).

    Yields (value, start, end), or a LiteralParseError for a value that could not be read, after
    which reading resumes at the next line that starts with '{' so one bad line spoils only itself.
    """
    r = _Reader(text)
    pos = r.ws(0)
    while pos < len(text):
        try:
            val, end = r.value(pos)
            yield val, pos, end
            pos = r.ws(end)
            if pos < len(text) and text[pos] == ",":  # a list of objects written without brackets
                pos = r.ws(pos + 1)
        except LiteralParseError as e:
            e.start = pos  # type: ignore[attr-defined]  # where the unreadable value began
            yield e
            nxt = text.find("\n{", pos)
            if nxt < 0:
                return
            pos = r.ws(nxt + 1)
