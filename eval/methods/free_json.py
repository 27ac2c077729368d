"""Free JSON memories read the way seed 000's prompts ask for them, then put in memloop's one shape.

The paper's prompts ask for a JSON dictionary of attributes with detailed descriptions, "a list"
only when an attribute has several values (figure 6), and for books the fields "Characters, Events,
Backgrounds, Motivations, Objectives, Other", each a dictionary of named elements with descriptions
(figure 10, whose example writes them lowercase and says "background"). So any JSON object is a
valid answer; only text with no JSON object in it (cut, or prose) fails, as it would have for the
paper. What the prompts allow is normalised instead of refused:
- a single value (a string, a number) becomes a one-element list; nested values become
  "key: value" strings, so no description is lost; an entity table inside appendix B's
  `attributes` wrapper is the table;
- book field names are matched case- and space-insensitively, "backgrounds" read as "background";
  a field outside the six goes into "other" under its own name, and a field that is not a
  dictionary is kept as one element named after the field.
`VALIDITY` says it in words, for the procedure card and the docs.
"""

from __future__ import annotations

import json
from typing import Any, Callable

from memloop.eval.asking import ParseFailure
from memloop.eval.methods.parsing import FENCE, TRAILING_COMMA, extract_json

BOOK_FIELDS = ("characters", "events", "background", "motivations", "objectives", "other")
# figure 10's own spellings of the fields, case-folded, where they differ from the schema's
FIELD_ALIASES = {"backgrounds": "background", "other information": "other"}

VALIDITY = (
    "any whole JSON object (figure 6 asks for a list only for several values; figure 10 names the "
    "fields capitalised); single values become one-element lists, field names are case-folded; a step "
    "fails when its output holds no whole JSON object (an object cut off is not read from a fragment)"
)


def read_memory(text: str, book: bool) -> dict[str, Any]:
    """The memory in `text` in memloop's shape: {attribute: [str]} for an entity, the six book fields of
    {element: [str]} for a book. ParseFailure only when the text holds no JSON object."""
    value = _whole_object(text)
    if book:
        return book_memory(value)
    if len(value) == 1 and _field(next(iter(value))) == "attributes" and isinstance(next(iter(value.values())), dict):
        value = next(iter(value.values()))  # appendix B's and figure 5's `attributes` wrapper around the table
    return descriptions_table(value)


def _whole_object(text: str) -> dict[str, Any]:
    """The JSON object the output opens with. `extract_json` reads the first object that parses, which
    in an output cut at the cap (or malformed) is a fragment nested inside the memory, e.g. one
    character's entry; taken as the memory it would replace the whole memory with that fragment."""
    value = extract_json(text, dict)
    fenced = FENCE.search(text)
    body = fenced.group(1) if fenced and "{" in fenced.group(1) else text  # prose around a block may hold braces
    start = body.find("{")
    try:
        top, _ = json.JSONDecoder().raw_decode(TRAILING_COMMA.sub(r"\1", body), start)
    except (ValueError, RecursionError):
        raise ParseFailure(
            "the JSON object is cut off or malformed; only a fragment inside it parses, which is not the memory"
        ) from None
    return top if isinstance(top, dict) else value


def descriptions(value: Any) -> list[str]:
    """One attribute's descriptions as a list of strings (None or empty: none)."""
    if value is None:
        return []
    if isinstance(value, list):
        out: list[str] = []
        for item in value:
            out += descriptions(item)
        return out
    if isinstance(value, dict):
        return [f"{k}: {d}" if d else str(k) for k, v in value.items() for d in (descriptions(v) or [""])]
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return [text.strip()] if text.strip() else []


def descriptions_table(value: dict[str, Any]) -> dict[str, list[str]]:
    """{name: [str]} from {name: any JSON value}."""
    return {str(k): descriptions(v) for k, v in value.items()}


def _field(name: str) -> str:
    key = " ".join(str(name).split()).casefold()
    return FIELD_ALIASES.get(key, key)


def book_memory(value: dict[str, Any]) -> dict[str, dict[str, list[str]]]:
    out: dict[str, dict[str, list[str]]] = {}
    for name, body in value.items():
        field = _field(name)
        if field not in BOOK_FIELDS:  # a field of the model's own: kept, under "other"
            table = {str(name): descriptions(body)}
            field = "other"
        elif isinstance(body, dict):
            table = descriptions_table(body)
        else:  # figure 10 asks for a dictionary; a bare value is kept as one element named after the field
            table = {field: descriptions(body)} if descriptions(body) else {}
        merged = out.setdefault(field, {})
        for k, v in table.items():
            merged[k] = merged.get(k, []) + [d for d in v if d not in merged.get(k, [])]
    return out


def parser(book: bool) -> Callable[[str], dict[str, Any]]:
    """A step's parse function for a free JSON memory (raises ParseFailure when no JSON object is found)."""

    def parse(text: str) -> dict[str, Any]:
        return read_memory(text, book)

    return parse
