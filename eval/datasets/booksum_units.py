"""Rebuilding a BookSum book's full text, in reading order, from the chapter rows BookSum has.

BookSum gives a book as the units its study guides summarise: single chapters (`3.txt`), aggregates
of several (`chapters_1_to_3.txt`), or a play's acts and scenes (`act_1_scene_2.txt`,
`act_2_scenes_1_to_3.txt`, `act_3.txt`). Guides cut a book differently, so units overlap, and a
chapter may exist only inside an aggregate (units `01`, `chapters_1_to_3`, `03`: chapter 2 is only in
the aggregate).

The book is rebuilt from the finest units (those containing no other unit), in order. An aggregate
then fills what they miss: the finer units it contains are located in its text (BookSum's aggregates
are their chapters' files joined), and the text around them becomes parts of its own; where they
cannot be found verbatim, the aggregate's text stands in for them as one part. Fine units that partly
overlap (`chapters_1_to_2`, `chapters_2_to_3`) share the lines they have in common as parts of both,
so chapter 3 is kept and each is a range of parts with the other chapters around it (where they share
no line verbatim, the later one follows whole and the shared chapters appear twice). Every unit, fine
or aggregate, is then a range of consecutive parts, so every row stays a target.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

Position = tuple[int, int]  # (chapter, 0) for a novel's chapter; (act, scene) for a play
_WORDS = re.compile(r"[a-z]+|\d+")
_WHOLE_ACT = 10**6  # the last scene of an act named without scenes


def unit_span(name: str) -> tuple[Position, Position] | None:
    """(first, last) position a unit covers, from its file name or summary id; None without a number.

    "3" -> ((3, 0), (3, 0)); "chapters_1_to_3" -> ((1, 0), (3, 0)); "act_1_scene_2" -> ((1, 2), (1, 2));
    "act_2_scenes_1_to_3" -> ((2, 1), (2, 3)); "act_3" -> ((3, 0), (3, 10**6))."""
    words = _WORDS.findall(name.lower())
    if not any(w.startswith("act") for w in words):
        numbers = [int(w) for w in words if w.isdigit()]
        return ((numbers[0], 0), (numbers[-1], 0)) if numbers else None
    marks: list[tuple[str, int]] = []  # ("act" | "scene", number) in order
    kind = ""
    for w in words:
        if w in ("act", "acts", "scene", "scenes"):
            kind = w.rstrip("s")
        elif w.isdigit() and kind:
            marks.append((kind, int(w)))
    spans: list[tuple[Position, Position]] = []
    act = 0
    for i, (kind, n) in enumerate(marks):
        if kind == "scene":
            spans.append(((act, n), (act, n)))
            continue
        act = n
        if i + 1 == len(marks) or marks[i + 1][0] == "act":  # an act named without scenes: all of it
            spans.append(((act, 0), (act, _WHOLE_ACT)))
    return (spans[0][0], spans[-1][1]) if spans else None


@dataclass
class Part:
    """A piece of the rebuilt book: one unit's text, or the text an aggregate adds between finer units."""

    start: Position
    end: Position
    text: str
    name: str  # the unit it is, or "<aggregate> (part)"
    units: set[str] = field(default_factory=set)  # the units whose text includes this part


@dataclass(frozen=True)
class Unit:
    name: str
    start: Position
    end: Position
    text: str


def _inside(a: Unit | Part, b: Unit | Part) -> bool:
    return b.start <= a.start and a.end <= b.end and (a.start, a.end) != (b.start, b.end)


def _locate(pieces: list[Part], text: str) -> list[tuple[int, int]] | None:
    """Where each piece's text sits in `text`, in order (whitespace-insensitive at the ends); None if one is missing."""
    spans, pos = [], 0
    for p in pieces:
        i = text.find(p.text.strip(), pos)
        if i < 0:
            return None
        spans.append((i, i + len(p.text.strip())))
        pos = spans[-1][1]
    return spans


def _lines(text: str) -> list[tuple[str, int, int]]:
    """The non-blank lines of `text`: (the line stripped, where it starts, where it ends)."""
    return [(m.group().strip(), m.start(), m.end()) for m in re.finditer(r"[^\n]+", text) if m.group().strip()]


def _overlap(tail: list[str], head: list[str]) -> int:
    """How many lines end `tail` and start `head` alike, at most (the prefix function of head + a separator +
    tail, so linear in the lines)."""
    seq: list[str | None] = [*head, None, *tail]
    pi = [0] * len(seq)
    for i in range(1, len(seq)):
        k = pi[i - 1]
        while k and seq[i] != seq[k]:
            k = pi[k - 1]
        pi[i] = k + 1 if seq[i] is not None and seq[i] == seq[k] else k
    return pi[-1]


def _join_overlapping(parts: list[Part], u: Unit) -> None:
    """Add fine unit `u`, which partly overlaps the last parts (e.g. chapters_2_to_3 after chapters_1_to_2),
    losing nothing: the lines its text shares with the end of theirs (BookSum's aggregates are their chapters
    joined) become parts of both, a part cut where the shared lines begin, and the rest of `u` a part of its
    own. Where they share no line, `u` follows whole as a part of its own (the shared chapters then twice)."""
    at = next(i for i, p in enumerate(parts) if p.end >= u.start)  # the parts whose span meets u's
    tail = [(i, line) for i in range(at, len(parts)) for line in _lines(parts[i].text)]
    head = _lines(u.text)
    k = _overlap([line[0] for _, line in tail], [line[0] for line in head])
    if k == 0:
        parts.append(Part(max(u.start, parts[-1].end), u.end, u.text, u.name, {u.name}))
        return
    j, (_, cut, _) = tail[len(tail) - k]
    p = parts[j]
    if p.text[:cut].strip():  # the shared lines begin inside part j: cut it there
        parts[j : j + 1] = [
            Part(p.start, u.start, p.text[:cut].strip(), p.name, set(p.units)),
            Part(u.start, p.end, p.text[cut:].strip(), p.name, set(p.units)),
        ]
        j += 1
    for q in parts[j:]:
        q.units.add(u.name)
    rest = u.text[head[k - 1][2] :].strip()
    if rest:
        parts.append(Part(parts[-1].end, u.end, rest, u.name, {u.name}))


def rebuild(units: list[Unit]) -> tuple[list[Part], dict[str, tuple[int, int]]]:
    """(the book's parts in reading order, unit -> (first, last) index of the parts it covers)."""
    ordered = sorted(units, key=lambda u: (u.start, u.end, u.name))
    fine = [u for u in ordered if not any(_inside(v, u) for v in ordered)]
    parts: list[Part] = []
    last: Unit | None = None
    for u in fine:
        if last is not None and (u.start, u.end) == (last.start, last.end):  # the same span: the first text stands
            for p in parts:
                if last.name in p.units:
                    p.units.add(u.name)
        elif parts and u.start <= parts[-1].end:  # partly overlapping (chapters_1_to_2, chapters_2_to_3)
            _join_overlapping(parts, u)
        else:
            parts.append(Part(u.start, u.end, u.text, u.name, {u.name}))
        last = u
    coarse = sorted((u for u in ordered if u not in fine), key=lambda u: (u.end[0] - u.start[0], u.end[1] - u.start[1]))
    for agg in coarse:
        idx = [i for i, p in enumerate(parts) if agg.start <= p.start and p.end <= agg.end]
        if not idx:  # an aggregate over parts nobody else gives: it is a part itself
            at = next((i for i, p in enumerate(parts) if p.start > agg.start), len(parts))
            parts.insert(at, Part(agg.start, agg.end, agg.text, agg.name, {agg.name}))
            continue
        a, b = idx[0], idx[-1]
        inner = parts[a : b + 1]
        found = _locate(inner, agg.text)
        if found is None:  # its parts are not in its text verbatim: the aggregate's own text replaces them
            merged = Part(agg.start, agg.end, agg.text, agg.name, {agg.name}.union(*(p.units for p in inner)))
            parts[a : b + 1] = [merged]
            continue
        rebuilt: list[Part] = []
        cut = 0
        bounds = [agg.start] + [p.end for p in inner]
        for k, (p, (i, j)) in enumerate(zip(inner, found)):
            gap = agg.text[cut:i]
            if gap.strip():
                rebuilt.append(Part(bounds[k], p.start, gap.strip(), f"{agg.name} (part)", {agg.name}))
            p.units.add(agg.name)
            rebuilt.append(p)
            cut = j
        if agg.text[cut:].strip():
            rebuilt.append(Part(inner[-1].end, agg.end, agg.text[cut:].strip(), f"{agg.name} (part)", {agg.name}))
        parts[a : b + 1] = rebuilt
    covers: dict[str, tuple[int, int]] = {}
    for i, p in enumerate(parts):
        for name in p.units:
            first, _ = covers.get(name, (i, i))
            covers[name] = (first, i)
    return parts, covers
