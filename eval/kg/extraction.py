"""Parsing the book-KG extraction output (seed 001, Appendix E format).

Named entities (...):
Jo / Jo March
Meg / Margaret
Knowledge graph edges (...):
1. Jo, Meg; in; March sisters
2. Father; away fighting in war          <- no object: a self-loop (entity description)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NUMBER = re.compile(r"^\s*(?:[-*•]\s*)?(?:\d+\s*[.)]\s*)?")
_ENTITY_HEADER = re.compile(r"named entities", re.I)
_EDGE_HEADER = re.compile(r"knowledge graph edges", re.I)


@dataclass(frozen=True)
class Triple:
    subject: str
    predicate: str
    object: str | None  # None: an entity description / action without object (self-loop)


@dataclass
class Extraction:
    aliases: list[list[str]] = field(default_factory=list)  # each line: names of one entity
    triples: list[Triple] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)  # lines that were not parseable, with reasons


def _names(part: str) -> list[str]:
    return [n.strip() for n in part.split(",") if n.strip()]


def parse_extraction(text: str) -> Extraction:
    """Entities with aliases and edges (multi-subject/object lines expand to every pair)."""
    out = Extraction()
    section = "entities"
    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        if _EDGE_HEADER.search(line):
            section = "edges"
            continue
        if _ENTITY_HEADER.search(line):
            section = "entities"
            continue
        if line.startswith("[") and line.endswith("]"):
            continue
        body = _NUMBER.sub("", line).strip()
        if section == "entities" and ";" in body:
            section = "edges"  # the model went on to edges without writing the header
        if section == "entities":
            names = [n.strip() for n in body.split("/") if n.strip()]
            if names:
                out.aliases.append(names)
            continue
        parts = [p.strip() for p in body.split(";")]
        if len(parts) == 2 and parts[0] and parts[1]:
            for s in _names(parts[0]):
                out.triples.append(Triple(s, parts[1], None))
        elif len(parts) == 3 and parts[0] and parts[1] and parts[2]:
            objs = _names(parts[2])
            for s in _names(parts[0]):
                for o in objs:
                    out.triples.append(Triple(s, parts[1], o))
        else:
            out.rejected.append(f"not `subject; predicate; [object]`: {line[:80]!r}")
    return out
