"""Loader of the official SUMIE format (`dataset_sumie.jsonl`), one Sample per entity.

Record (as in the SUMIE release's README): entity_name, entity_category, paragraph_summaries =
[{paragraph: [[sentence id, text], ...], summary: [{attribute, value, sentence_ids, evidences}, ...],
paragraph_sentiment, paragraph_writing_style}, ...] (each summary aggregates the paragraphs up to its
own), distractor_sentences = [sentence id, ...]. Also accepted: `sentences` instead of `paragraph`,
a plain-string `paragraph`, and `[id, text]` pairs in `distractor_sentences`. Unknown top-level
fields are kept in metadata.
"""
from __future__ import annotations

import dataclasses

import hashlib
import json
from pathlib import Path
from typing import Any

from memloop.eval.datasets.errors import DatasetError, EmptyDatasetError, InconsistentGoldError, MissingFieldError
from memloop.eval.datasets.records import Record, read_records, require
from memloop.eval.datasets.sample import Sample, slug

_KNOWN = {"entity_name", "entity_category", "paragraph_summaries", "distractor_sentences"}


def _sentences(paragraph: Record, where: str) -> list[tuple[Any, str]]:
    key = "paragraph" if "paragraph" in paragraph else "sentences"
    if isinstance(paragraph.get(key), str):  # untagged text: one pseudo-sentence per line
        return [(f"line{i}", line) for i, line in enumerate(l for l in paragraph[key].split("\n") if l.strip())]
    rows = require(paragraph, key, list, where)
    out = []
    for j, row in enumerate(rows):
        if not (isinstance(row, (list, tuple)) and len(row) == 2 and isinstance(row[1], str)):
            raise MissingFieldError(f"{where}: {key}[{j}] must be a pair [sentence id, text]")
        out.append((row[0], row[1]))
    return out


def _summary(paragraph: Record, where: str) -> list[dict[str, Any]]:
    items = require(paragraph, "summary", list, where)
    out = []
    for j, item in enumerate(items):
        at = f"{where} summary[{j}]"
        if not isinstance(item, dict):
            raise MissingFieldError(f"{at}: must be an object with attribute and value")
        attribute = require(item, "attribute", str, at)
        value = item.get("value")
        if value is None or isinstance(value, (dict, list)):
            raise MissingFieldError(f"{at}: 'value' must be a string or number")
        ids = item.get("sentence_ids", [])
        ev = item.get("evidences", [])
        out.append({"attribute": attribute, "value": str(value), "sentence_ids": list(ids if isinstance(ids, list) else [ids]),
                    "evidences": list(ev if isinstance(ev, list) else [ev])})
    return out


def verify_sumie_record(record: Record, where: str = "record") -> None:
    """Raise InconsistentGoldError unless every gold value appears (case-insensitively) in each sentence it
    cites, every cited id exists in paragraphs up to that turn, and no distractor names the entity.

    Ids are resolved where a fact first appears: in that paragraph first, then in earlier ones (releases
    may restart ids per paragraph); a fact carried into later summaries keeps that resolution."""
    sample = sumie_sample(record, where)
    name = sample.gold["entity_name"]
    seen: list[dict[str, str]] = []
    resolved: dict[tuple[str, str, str], str] = {}  # (attribute, value, sentence id) -> sentence text
    for t, (sentences, facts) in enumerate(zip(sample.metadata["sentences"], sample.gold["facts"]), 1):
        seen.append({str(i): s for i, s in sentences})
        for item in facts:
            for sid in item["sentence_ids"]:
                key = (item["attribute"], item["value"], str(sid))
                if key not in resolved:
                    text = next((p[str(sid)] for p in reversed(seen) if str(sid) in p), None)
                    if text is None:
                        raise InconsistentGoldError(f"{where} turn {t}: {item['attribute']!r} cites sentence {sid!r} not in paragraphs 1..{t}")
                    resolved[key] = text
                if item["value"].lower() not in resolved[key].lower():
                    raise InconsistentGoldError(f"{where} turn {t}: value {item['value']!r} does not appear in sentence {sid!r}: {resolved[key]!r}")
    distractor_ids = {str(i) for i in sample.metadata["distractor_sentence_ids"]}
    for paragraph in seen:
        for sid, text in paragraph.items():
            if sid in distractor_ids and name.lower() in text.lower():
                raise InconsistentGoldError(f"{where}: distractor sentence {sid!r} mentions the entity {name!r}")


def sumie_sample(record: Record, where: str = "record") -> Sample:
    """One official SUMIE record as a Sample (chunks = paragraphs; gold per turn, aggregated)."""
    name = require(record, "entity_name", str, where)
    category = require(record, "entity_category", str, where)
    paragraphs = require(record, "paragraph_summaries", list, where)
    if not paragraphs:
        raise MissingFieldError(f"{where}: 'paragraph_summaries' is empty: an entity needs at least one paragraph")
    chunks, sentences, turns, facts, sentiments, styles = [], [], [], [], [], []
    for k, para in enumerate(paragraphs):
        at = f"{where} paragraph {k + 1}"
        if not isinstance(para, dict):
            raise MissingFieldError(f"{at}: must be an object with 'sentences' and 'summary'")
        rows = _sentences(para, at)
        if not rows:
            raise MissingFieldError(f"{at}: has no sentences")
        items = _summary(para, at)
        chunks.append(para["paragraph"] if isinstance(para.get("paragraph"), str) else " ".join(text for _, text in rows))
        sentiments.append(para.get("paragraph_sentiment"))
        styles.append(para.get("paragraph_writing_style"))
        sentences.append([[i, text] for i, text in rows])
        turn: dict[str, list[str]] = {}
        for item in items:
            values = turn.setdefault(item["attribute"], [])
            if item["value"] not in values:
                values.append(item["value"])
        turns.append(turn)
        facts.append(items)
    distractors = record.get("distractor_sentences", [])
    if not isinstance(distractors, list):
        raise MissingFieldError(f"{where}: 'distractor_sentences' must be a list of sentence ids")
    distractor_ids = [d[0] if isinstance(d, (list, tuple)) else d for d in distractors]
    digest = hashlib.sha1(json.dumps(chunks).encode("utf-8")).hexdigest()[:10]
    metadata = {"entity": name, "entity_category": category, "sentences": sentences, "distractor_sentence_ids": distractor_ids,
                "paragraph_sentiments": sentiments, "paragraph_writing_styles": styles}
    metadata.update({k: v for k, v in record.items() if k not in _KNOWN})
    return Sample(
        id=f"sumie/{slug(category)}/{slug(name)}-{digest}",
        task="sumie",
        chunks=tuple(chunks),
        query=f"Summarize the information about {name}.",
        gold={"entity_name": name, "entity_category": category, "turns": turns, "facts": facts},
        metadata=metadata,
    )


def _with_source(sample: Sample, source: str) -> Sample:
    """The sample with `metadata["source"]`: which data ran, the release file or memloop's generator."""
    return dataclasses.replace(sample, metadata={**sample.metadata, "source": source})


def load_sumie(path: str | Path, limit: int | None = None, verify_gold: bool = False) -> list[Sample]:
    """Samples from an official-format SUMIE file (.jsonl, .json or .parquet), or a hub id."""
    samples = []
    for where, record in read_records(path, "SUMIE file"):
        if verify_gold:
            verify_sumie_record(record, where)
        samples.append(_with_source(sumie_sample(record, where), f"SUMIE file {path}"))
        if limit is not None and len(samples) >= limit:
            break
    if not samples:
        raise EmptyDatasetError(f"SUMIE file {path} has no entities")
    return samples


def load_sumie_dataset(path: str | Path | None = None, synthetic: bool = False, entities: int = 200, seed: int = 0,
                       limit: int | None = None, verify_gold: bool = False, conflicts: float = 0.0,
                       detail: str = "compact") -> list[Sample]:
    """The registry's `sumie` task: an official-format file, or (synthetic=True) generated entities
    (`conflicts`: probability per paragraph that a stated value changes; `detail`: "compact" short
    values, or "rich" clause-valued facts as many as the official SUMIE's)."""
    if synthetic:
        from memloop.eval.datasets.sumie.generator import generate_sumie

        n = entities if limit is None else min(entities, limit)
        source = (f"memloop's SUMIE generator (seed {seed}, {entities} entities"
                  + (f", {detail} detail" if detail != "compact" else "") + "), not the official release")
        return [_with_source(sumie_sample(r, f"synthetic entity {i}"), source)
                for i, r in enumerate(generate_sumie(n, seed, conflicts=conflicts, detail=detail))]
    if path is None:
        raise DatasetError("the sumie task needs `path` (an official dataset_sumie.jsonl) or `synthetic: true`")
    return load_sumie(path, limit=limit, verify_gold=verify_gold)


def truncate_gold(gold: Any, n_chunks: int) -> Any:
    """Gold for the first `n_chunks` paragraphs: one entry of `turns` and `facts` per paragraph is kept.

    Used by `memloop.eval.datasets.truncate` (a run's `max_chunks`); gold of another shape is returned whole.
    """
    if not isinstance(gold, dict) or "turns" not in gold:
        return gold
    return dict(gold, turns=gold["turns"][:n_chunks], facts=gold.get("facts", [])[:n_chunks])
