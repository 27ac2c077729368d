"""Deterministic synthetic SUMIE data in the official `dataset_sumie.jsonl` format.

Each entity gets 7 paragraphs. A paragraph states a few attribute-value facts about the entity
(new attributes, further values of multi-valued ones, now and then a restatement) in a writing style
and a sentiment of its own (`paragraph_writing_style`, `paragraph_sentiment`), interleaved with
distractor sentences about other entities of the same category that never mention the target (their
ids are listed in `distractor_sentences`). Sentences are `[id, text]` pairs under `paragraph`, with
ids ("P0", "P1", ...) unique within the entity. Each paragraph's `summary` aggregates every fact from
paragraph 1 up to it, citing the ids of the sentences that state it; values are inserted verbatim, so
each one literally appears in the sentences it cites.

`detail`: "compact" (the default) states short values (a name, a place, a number), about 14 facts an
entity; "rich" adds each category's clause-valued attributes (`vocab.RICH_ATTRIBUTES`) and states more
facts a paragraph, so that an entity's aggregated memory reaches the few hundred tokens of the
official SUMIE's (the paper's unlimited memories average 269-604 tokens) and K = 200 / 300 binds.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
from pathlib import Path
from typing import Any, Iterator

from memloop.eval.datasets.errors import DatasetError
from memloop.eval.datasets.sumie.vocab import (
    CATEGORIES,
    DETAIL_LEVELS,
    FILLERS,
    MUTABLE,
    RICH_ATTRIBUTES,
    SENTIMENT_REMARKS,
    STYLES,
    UPDATE_TEMPLATES,
    Attribute,
    Category,
)

PARAGRAPHS = 7
_STOP = {"the", "a", "an", "of", "and"}


def name_words(name: str) -> set[str]:
    """Distinctive words of a name (lower-cased), used to keep distractors clear of the target."""
    return {w.lower() for w in re.findall(r"\w+", name) if len(w) >= 3 and w.lower() not in _STOP}


def mentions(text: str, name: str) -> bool:
    """Whether `text` contains the name or any of its distinctive words."""
    if name.lower() in text.lower():
        return True
    words = {w.lower() for w in re.findall(r"\w+", text)}
    return bool(words & name_words(name))


class _Names:
    """Unique entity names per category, drawn from the category's name-part pools."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def draw(self, cat: Category, avoid: set[str] = frozenset()) -> tuple[str, str]:
        """A fresh target name, or (with `avoid`) a distractor's name sharing no word with the target."""

        def fits(name: str) -> bool:
            return not ((not avoid and name in self.used) or name_words(name) & avoid)

        for _ in range(1000):
            parts = [self.rng.choice(pool) for pool in cat.name_parts]
            if fits(" ".join(parts)):
                return " ".join(parts), parts[-1]
        # nearly every name is taken: pick among those left (a random draw would keep missing them)
        left = [p for p in itertools.product(*cat.name_parts) if fits(" ".join(p))]
        if not left:
            raise DatasetError(
                f"all {name_capacity(cat)} distinct {cat.name} names are taken; generate fewer entities per run"
            )
        parts = list(self.rng.choice(left))
        return " ".join(parts), parts[-1]


def name_capacity(cat: Category) -> int:
    """How many distinct names the category's name-part pools make."""
    return math.prod(len(pool) for pool in cat.name_parts)


def max_entities(cats: tuple[Category, ...]) -> int:
    """The most entities one run can generate: they cycle through `cats`, so category j (0-based) gets
    the entities j, j + len(cats), ..., and each needs a distinct name of its category."""
    return min(name_capacity(c) * len(cats) + j for j, c in enumerate(cats))


def _render(template: str, subject: str, value: str | None = None, prefix: str = "") -> str:
    """Fill a template; a style prefix is only put before sentences that open with the subject."""
    starts_with_subject = template.startswith("{S}")
    if prefix and starts_with_subject:
        sub_mid = (
            subject if subject[:1].isupper() and not subject.startswith("The ") else subject[:1].lower() + subject[1:]
        )
        body = template.replace("{S}", sub_mid, 1)
        text = prefix + body
    else:
        text = template.replace("{S}", subject[:1].upper() + subject[1:])
    mid = subject if not subject.startswith("The ") else "the " + subject[4:]
    text = text.replace("{s}", mid)
    if value is not None:
        article = "an" if value[:1].lower() in "aeiou" else "a"
        text = re.sub(r"\b([Aa]) \{v\}", lambda m: ("A" if m.group(1) == "A" else "a") + article[1:] + " {v}", text)
        text = text.replace("{v}", value)
    return text[:1].upper() + text[1:]


def _template(rng: random.Random, attr: Attribute, value: str) -> str:
    """A template for the fact; a lower-case value never opens a sentence (it would have to be re-cased)."""
    fits = [t for t in attr.templates if not (t.startswith("{v}") and value[:1].islower())]
    return rng.choice(fits)


def _plan(rng: random.Random, cat: Category, rich: bool = False) -> list[list[tuple[Attribute, str]]]:
    """Which (attribute, value) facts each of the 7 paragraphs states for the first time."""
    attrs = list(cat.attributes) + (list(RICH_ATTRIBUTES[cat.name]) if rich else [])
    rng.shuffle(attrs)
    unused = {a.name: [v for v in rng.sample(a.values, len(a.values))] for a in attrs}
    introduced: list[Attribute] = []
    plan: list[list[tuple[Attribute, str]]] = []
    pending = list(attrs)
    for t in range(PARAGRAPHS):
        facts: list[tuple[Attribute, str]] = []
        want = (6 if t == 0 else rng.choice((4, 5, 5, 6))) if rich else (3 if t == 0 else rng.choice((1, 2, 2, 3)))
        while len(facts) < want:
            extendable = [a for a in introduced if a.multi and unused[a.name] and a not in [f[0] for f in facts]]
            if pending and (not extendable or rng.random() < 0.6):
                attr = pending.pop(0)
                introduced.append(attr)
            elif extendable:
                attr = rng.choice(extendable)
            else:
                break
            facts.append((attr, unused[attr.name].pop()))
        plan.append(facts)
    return plan


def generate_entity(
    rng: random.Random, names: _Names, cat: Category, conflicts: float = 0.0, detail: str = "compact"
) -> dict[str, Any]:
    """One entity in the official SUMIE record format.

    With `conflicts` > 0, from paragraph 3 on each paragraph may (with that probability) change the
    value of a mutable single-valued attribute stated earlier (a new CEO, a new price); from then on the aggregated
    summary holds the
    new value only, so methods must update, not just add."""
    name, last = names.draw(cat)
    names.used.add(name)
    descriptor = cat.descriptor.format(last=last)
    home_style = rng.choice(sorted(STYLES))  # most paragraphs keep the entity's usual register
    avoid = name_words(name)
    next_id = 0
    paragraphs: list[dict[str, Any]] = []
    distractors: list[str] = []
    gold: dict[tuple[str, str], dict[str, Any]] = {}  # (attribute, value) -> summary item, in first-seen order
    stated: list[tuple[Attribute, str]] = []
    attributes = cat.attributes + (RICH_ATTRIBUTES[cat.name] if detail == "rich" else ())
    for t, facts in enumerate(_plan(rng, cat, detail == "rich")):
        sentiment = rng.choice(sorted(SENTIMENT_REMARKS))
        style = home_style if rng.random() < 0.6 else rng.choice(sorted(STYLES))
        sentences: list[tuple[str, str, tuple[str, str] | None]] = []  # (kind, text, fact)
        # a restatement now and then: the gold does not change but gains a second citation
        restate = [rng.choice(stated)] if stated and (not facts or (t >= 2 and rng.random() < 0.5)) else []
        for i, (attr, value) in enumerate(facts + restate):
            subject = name if (i == 0 or rng.random() < 0.3) else descriptor
            prefix = rng.choice(STYLES[style]) if rng.random() < 0.5 else ""
            sentences.append(("fact", _render(_template(rng, attr, value), subject, value, prefix), (attr.name, value)))
        if conflicts > 0 and t >= 2 and rng.random() < conflicts:
            current = {a: v for (a, v) in gold}  # single-valued attributes hold one value each
            by_name = {a.name: a for a in attributes}
            restated = {a.name for a, _ in restate}
            options = sorted(a for a in current if a in MUTABLE and not by_name[a].multi and a not in restated)
            if options:
                attr = by_name[rng.choice(options)]
                new = rng.choice([v for v in attr.values if v != current[attr.name]])
                text = _render(
                    rng.choice(UPDATE_TEMPLATES).replace("{a}", attr.name), rng.choice((name, descriptor)), new
                )
                sentences.append(("update", text, (attr.name, new)))
        remark = _render(rng.choice(SENTIMENT_REMARKS[sentiment]), descriptor if facts else name)
        sentences.insert(rng.randrange(min(1, len(sentences)), len(sentences) + 1), ("remark", remark, None))
        for _ in range(rng.choice((0, 1, 1, 2))):
            filler = _render(rng.choice(FILLERS), rng.choice((name, descriptor)))
            sentences.insert(rng.randrange(1, len(sentences) + 1), ("remark", filler, None))
        for _ in range(rng.choice((1, 2, 2, 3))):
            other, _last = names.draw(cat, avoid=avoid)
            attr = rng.choice(cat.attributes)
            other_value = rng.choice(attr.values)
            text = _render(_template(rng, attr, other_value), other, other_value)
            if mentions(text, name):  # a value that happens to share a word with the target's name
                continue
            sentences.insert(rng.randrange(0, len(sentences) + 1), ("distractor", text, None))
        rows = []
        for kind, text, fact in sentences:
            sid = f"P{next_id}"
            rows.append([sid, text])
            if kind == "distractor":
                distractors.append(sid)
            elif kind == "update":  # the old value leaves the summary; it is no longer true
                for key in [k for k in gold if k[0] == fact[0]]:
                    del gold[key]
                stated = [(a, v) for a, v in stated if a.name != fact[0]]
                gold[fact] = {"attribute": fact[0], "value": fact[1], "sentence_ids": [sid], "evidences": [text]}
            elif fact is not None:
                item = gold.setdefault(
                    fact, {"attribute": fact[0], "value": fact[1], "sentence_ids": [], "evidences": []}
                )
                item["sentence_ids"].append(sid)
                item["evidences"].append(text)
            next_id += 1
        stated.extend(facts)
        paragraphs.append(
            {
                "paragraph": rows,
                "summary": [
                    dict(v, sentence_ids=list(v["sentence_ids"]), evidences=list(v["evidences"])) for v in gold.values()
                ],
                "paragraph_sentiment": sentiment,
                "paragraph_writing_style": style,
            }
        )
    return {
        "entity_name": name,
        "entity_category": cat.name,
        "paragraph_summaries": paragraphs,
        "distractor_sentences": distractors,
    }


def generate_sumie(
    entities: int,
    seed: int = 0,
    categories: tuple[str, ...] | None = None,
    conflicts: float = 0.0,
    detail: str = "compact",
) -> Iterator[dict[str, Any]]:
    """`entities` records, cycling through the categories; the same seed always gives the same records.
    `conflicts` is the per-paragraph probability of a value update (see `generate_entity`); `detail`
    "compact" or "rich" (see the module docstring)."""
    if detail not in DETAIL_LEVELS:
        raise DatasetError(f"unknown SUMIE detail {detail!r}: use one of {list(DETAIL_LEVELS)}")
    if entities < 1:
        raise DatasetError(f"entities must be at least 1 (got {entities})")
    cats = CATEGORIES if categories is None else tuple(c for c in CATEGORIES if c.name in categories)
    if not cats:
        raise DatasetError(f"unknown SUMIE categories {categories}: choose from {[c.name for c in CATEGORIES]}")
    if not 0.0 <= conflicts <= 1.0:
        raise DatasetError(f"conflicts is a probability: give a number in [0, 1] (got {conflicts})")
    most = max_entities(cats)
    if entities > most:
        short = min(cats, key=name_capacity)
        raise DatasetError(
            f"entities: at most {most:,} can be generated (got {entities:,}): the {short.name} "
            f"category has {name_capacity(short)} distinct names; lower `entities` to {most:,} or less"
        )
    rng = random.Random(seed)
    names = _Names(rng)
    for i in range(entities):
        yield generate_entity(rng, names, cats[i % len(cats)], conflicts, detail)


def write_sumie_jsonl(path: str | Path, entities: int, seed: int = 0, conflicts: float = 0.0) -> Path:
    """Write official-format JSONL atomically (temp file then rename); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as f:
        for record in generate_sumie(entities, seed, conflicts=conflicts):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    tmp.replace(p)
    return p
