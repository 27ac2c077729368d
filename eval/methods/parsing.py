"""Turning free LLM text into values: JSON objects inside prose or code fences, sectioned outputs.

Small models wrap JSON in fences, add trailing commas (the papers' own examples have them) and
write prose around it; we repair only those two things and otherwise report why parsing failed.
"""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
from memloop.eval.asking import ParseFailure

FENCE = re.compile(r"```(?:json|JSON|python)?\s*\n?(.*?)```", re.S)
TRAILING_COMMA = re.compile(r",(\s*[}\]])")
_PUNCT_END = (".", "?", "!", '"', "'", "”", "’")
# What json raises on text it cannot read: JSONDecodeError, and for hostile text a ValueError (an
# integer past Python's int-digits limit) or a RecursionError (arrays nested thousands deep).
_UNREADABLE = (ValueError, RecursionError)


def _why(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "a value nested too deeply to read"
    if isinstance(exc, json.JSONDecodeError):
        return exc.msg
    return "an integer too long to read" if "digits" in str(exc) else str(exc)[:120]


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except json.JSONDecodeError:
        return json.loads(TRAILING_COMMA.sub(r"\1", candidate))


def extract_json(text: str, want: type | tuple[type, ...] = (dict, list)) -> Any:
    """The first JSON value of type `want` in `text` (whole text, fenced block, or embedded)."""
    stripped = text.strip()
    candidates = [stripped] + [m.group(1).strip() for m in FENCE.finditer(text)]
    hostile = ""  # why a value that is not merely malformed JSON could not be read
    for cand in candidates:
        try:
            value = _loads(cand)
        except json.JSONDecodeError:
            continue
        except _UNREADABLE as exc:
            hostile = hostile or _why(exc)
            continue
        if isinstance(value, want):
            return value
    decoder = json.JSONDecoder()
    repaired = TRAILING_COMMA.sub(r"\1", text)
    skip_to = 0
    for i, ch in enumerate(repaired):
        if ch in "{[" and i >= skip_to:
            try:
                value, _ = decoder.raw_decode(repaired, i)
            except json.JSONDecodeError:
                continue
            except _UNREADABLE as exc:
                hostile = hostile or _why(exc)
                if isinstance(exc, RecursionError):  # the brackets it opened nest as deep: read on past them
                    skip_to = len(repaired) - len(repaired[i:].lstrip("{[ \t\r\n"))
                continue
            if isinstance(value, want):
                return value
    kinds = want.__name__ if isinstance(want, type) else "/".join(t.__name__ for t in want)
    raise ParseFailure(f"no JSON {kinds} found in the output" + (f" (it holds {hostile})" if hostile else ""))


def parse_json_object(text: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    value = extract_json(text, dict)
    if schema is not None:
        try:
            jsonschema.validate(value, schema)
        except jsonschema.ValidationError as exc:
            raise ParseFailure(f"JSON does not match the schema: {exc.message}") from None
    return value


def split_sections(text: str, names: list[str]) -> dict[str, str]:
    """Cut `text` at `[NAME]` headers (in any order); returns name -> body for the headers found."""
    pattern = re.compile(r"^\s*\[(" + "|".join(re.escape(n) for n in names) + r")\]\s*$", re.M)
    marks = list(pattern.finditer(text))
    out: dict[str, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(text)
        out.setdefault(m.group(1), text[m.end() : end].strip())
    return out


def json_lines(body: str) -> list[dict[str, Any]]:
    """Every JSON object in a section body: one object, several (one a line), or fenced blocks."""
    body = FENCE.sub(lambda m: m.group(1), body)
    decoder = json.JSONDecoder()
    repaired = TRAILING_COMMA.sub(r"\1", body)
    objs, i = [], 0
    while i < len(repaired):
        if repaired[i] == "{":
            try:
                value, end = decoder.raw_decode(repaired, i)
            except _UNREADABLE as exc:
                raise ParseFailure(f"invalid JSON object near {repaired[i : i + 60]!r} ({_why(exc)})") from None
            objs.append(value)
            i = end
        else:
            i += 1
    return objs


def ends_in_punctuation(text: str) -> bool:
    t = text.rstrip()
    return bool(t) and t.endswith(_PUNCT_END)


def as_text(value: Any) -> str:
    """Render a memory for a prompt: JSON in its compact form, text as is.

    Compact (no indentation, no spaces after separators) because this is also the form counted
    against the memory limit K: indentation adds about 43% tokens that carry no information and
    would charge JSON memories for layout in the very comparison with text that seed 000 makes.
    """
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
