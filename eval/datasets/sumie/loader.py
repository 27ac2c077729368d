"""Loader of the official SUMIE format (`dataset_sumie.jsonl`), one Sample per entity.

The record's shape is `memloop.eval.datasets.sumie.rows.SumieRecord` (as in the SUMIE release's README; each
summary aggregates the paragraphs up to its own); a record that does not fit it is a `MissingFieldError` naming
the line and the field. Unknown top-level fields are kept in metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

from memloop.eval.datasets.errors import DatasetError, EmptyDatasetError, InconsistentGoldError
from memloop.eval.datasets.records import Record, read_records
from memloop.eval.datasets.rows import parse_row
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.datasets.sumie.rows import FIX, SumieRecord


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
                        raise InconsistentGoldError(
                            f"{where} turn {t}: {item['attribute']!r} cites sentence {sid!r} not in paragraphs 1..{t}"
                        )
                    resolved[key] = text
                if item["value"].lower() not in resolved[key].lower():
                    raise InconsistentGoldError(
                        f"{where} turn {t}: value {item['value']!r} does not appear in sentence {sid!r}: "
                        f"{resolved[key]!r}"
                    )
    distractor_ids = {str(i) for i in sample.metadata["distractor_sentence_ids"]}
    for paragraph in seen:
        for sid, text in paragraph.items():
            if sid in distractor_ids and name.lower() in text.lower():
                raise InconsistentGoldError(f"{where}: distractor sentence {sid!r} mentions the entity {name!r}")


def sumie_sample(record: Record, where: str = "record") -> Sample:
    """One official SUMIE record as a Sample (chunks = paragraphs; gold per turn, aggregated)."""
    row = parse_row(SumieRecord, record, where, FIX)
    name, category = row.entity_name, row.entity_category
    turns: list[dict[str, list[str]]] = []
    for para in row.paragraph_summaries:
        turn: dict[str, list[str]] = {}
        for item in para.summary:
            values = turn.setdefault(item.attribute, [])
            if item.value not in values:
                values.append(item.value)
        turns.append(turn)
    chunks = [para.chunk for para in row.paragraph_summaries]
    digest = hashlib.sha1(json.dumps(chunks).encode("utf-8")).hexdigest()[:10]
    metadata = {
        "entity": name,
        "entity_category": category,
        "sentences": [[[i, text] for i, text in para.sentences] for para in row.paragraph_summaries],
        "distractor_sentence_ids": row.distractor_ids,
        "paragraph_sentiments": [para.paragraph_sentiment for para in row.paragraph_summaries],
        "paragraph_writing_styles": [para.paragraph_writing_style for para in row.paragraph_summaries],
    }
    metadata.update(row.model_extra or {})
    return Sample(
        id=f"sumie/{slug(category)}/{slug(name)}-{digest}",
        task="sumie",
        chunks=tuple(chunks),
        query=f"Summarize the information about {name}.",
        gold={
            "entity_name": name,
            "entity_category": category,
            "turns": turns,
            "facts": [[item.model_dump() for item in para.summary] for para in row.paragraph_summaries],
        },
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


def load_sumie_dataset(
    path: str | Path | None = None,
    synthetic: bool = False,
    entities: int = 200,
    seed: int = 0,
    limit: int | None = None,
    verify_gold: bool = False,
    conflicts: float = 0.0,
    detail: str = "compact",
) -> list[Sample]:
    """The registry's `sumie` task: an official-format file, or (synthetic=True) generated entities
    (`conflicts`: probability per paragraph that a stated value changes; `detail`: "compact" short
    values, or "rich" clause-valued facts as many as the official SUMIE's)."""
    if synthetic:
        from memloop.eval.datasets.sumie.generator import generate_sumie

        n = entities if limit is None else min(entities, limit)
        source = (
            f"memloop's SUMIE generator (seed {seed}, {entities} entities"
            + (f", {detail} detail" if detail != "compact" else "")
            + "), not the official release"
        )
        return [
            _with_source(sumie_sample(r, f"synthetic entity {i}"), source)
            for i, r in enumerate(generate_sumie(n, seed, conflicts=conflicts, detail=detail))
        ]
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
