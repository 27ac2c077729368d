"""LOFT's SQL task files: queries (`queries.jsonl`) and model predictions (`preds.jsonl`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memloop.eval.datasets.errors import MissingFieldError
from memloop.eval.datasets.records import read_records, require


@dataclass(frozen=True)
class LoftQuery:
    qid: str
    question: str
    answers: list[list[Any]]  # gold rows
    db_id: str
    sql: str | None
    candidate_pids: tuple[str, ...] = ()


def _rows(value: Any, where: str, field: str) -> list[list[Any]]:
    if not isinstance(value, list) or not all(isinstance(r, list) for r in value):
        raise MissingFieldError(f"{where}: {field!r} must be a list of rows (lists)")
    return value


def load_loft_queries(path: str | Path) -> list[LoftQuery]:
    """LOFT queries: {qid, query_text, answers: [[cell, ...], ...], metadata: {db_id, sql_query, candidate_pids}}."""
    out = []
    for where, rec in read_records(path, "LOFT queries file"):
        meta = require(rec, "metadata", dict, where)
        out.append(
            LoftQuery(
                qid=str(require(rec, "qid", (str, int), where)),
                question=require(rec, "query_text", str, where),
                answers=_rows(require(rec, "answers", list, where), where, "answers"),
                db_id=require(meta, "db_id", str, f"{where} metadata"),
                sql=meta.get("sql_query"),
                candidate_pids=tuple(meta.get("candidate_pids", ())),
            )
        )
    return out


@dataclass(frozen=True)
class LoftTable:
    pid: str
    name: str
    header: str
    rows: list[str]


def load_loft_corpus(path: str | Path) -> dict[str, LoftTable]:
    """LOFT's SQL corpus (`corpus.jsonl`): one table per passage, {pid, title_text (table name),
    passage_text (CSV: header line, then rows), metadata}."""
    out: dict[str, LoftTable] = {}
    for where, rec in read_records(path, "LOFT corpus file"):
        pid = str(require(rec, "pid", (str, int), where))
        lines = [line for line in require(rec, "passage_text", str, where).strip().split("\n") if line.strip()]
        if not lines:
            raise MissingFieldError(f"{where}: table {pid} has an empty passage_text (it needs at least a CSV header)")
        out[pid] = LoftTable(pid, require(rec, "title_text", str, where).strip(), lines[0], lines[1:])
    return out


def load_loft_predictions(path: str | Path) -> dict[str, list[list[list[Any]]]]:
    """LOFT predictions: qid -> model_outputs (one list of rows per turn)."""
    out: dict[str, list[list[list[Any]]]] = {}
    for where, rec in read_records(path, "LOFT predictions file"):
        turns = require(rec, "model_outputs", list, where)
        out[str(require(rec, "qid", (str, int), where))] = [_rows(t, where, "model_outputs[turn]") for t in turns]
    return out
