"""Spider-style table QA: each question over a database becomes a Sample whose chunks are the tables.

Sources: the built-in databases and questions (default); Spider's own files (`dev.json`-style list
of {db_id, question, query} plus `database/<db_id>/<db_id>.sqlite`); or LOFT queries (`queries.jsonl`,
gold = its `answers`) with their tables from SQLite files or from LOFT's own `corpus.jsonl` (each
query's `candidate_pids` name its tables). Gold rows of Spider-style questions are computed by executing the SQL.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from pathlib import Path
from typing import Any, Iterable

from memloop.eval.datasets.errors import DatasetError, DatasetNotFoundError, InconsistentGoldError, UnknownFormatError
from memloop.eval.datasets.records import read_records, require
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.datasets.spider.databases import BUILTIN, build
from memloop.eval.datasets.spider.loft import load_loft_corpus, load_loft_queries
from memloop.eval.datasets.spider.render import pack_tables, render_database
from memloop.eval.tokens import TokenizerLike, token_counter

_ORDER_BY = re.compile(r"\border\s+by\b", re.IGNORECASE)


def open_sqlite(path: str | Path) -> sqlite3.Connection:
    """A read-only connection to a user's SQLite file, or a named error if it is not one."""
    p = Path(path)
    if not p.is_file():
        raise DatasetNotFoundError(f"SQLite database {p} does not exist")
    with p.open("rb") as f:
        if f.read(16) != b"SQLite format 3\x00":
            raise UnknownFormatError(f"{p} is not a SQLite database (wrong header): pass a .sqlite file")
    return sqlite3.connect(f"file:{p}?mode=ro", uri=True)


def execute(con: sqlite3.Connection, sql: str, where: str = "query") -> list[list[Any]]:
    try:
        return [list(r) for r in con.execute(sql).fetchall()]
    except sqlite3.Error as exc:
        raise DatasetError(f"{where}: SQL failed ({exc}): {sql}") from None


def same_rows(a: list[list[Any]], b: list[list[Any]], ordered: bool) -> bool:
    """Execution-result equality: as lists when order matters, else as multisets."""
    norm = lambda rows: [tuple(r) for r in rows]  # noqa: E731
    return norm(a) == norm(b) if ordered else sorted(map(repr, norm(a))) == sorted(map(repr, norm(b)))


class _Databases:
    """db_id -> connection, from a directory (Spider layout or flat), a single file, or (no source) the built-ins."""

    def __init__(self, source: str | Path | None) -> None:
        self.source = Path(source) if source is not None else None
        self.cache: dict[str, sqlite3.Connection] = {}
        self.builtin = {db.db_id: db for db in BUILTIN}
        if self.source is not None and not self.source.exists():
            raise DatasetNotFoundError(
                f"databases {self.source} do not exist: pass a .sqlite file or a directory of them"
            )

    def get(self, db_id: str) -> sqlite3.Connection:
        if db_id in self.cache:
            return self.cache[db_id]
        con = None
        if self.source is not None:
            if self.source.is_file():
                con = open_sqlite(self.source)  # one file serves every question
            else:
                for cand in (
                    self.source / db_id / f"{db_id}.sqlite",
                    self.source / f"{db_id}.sqlite",
                    self.source / f"{db_id}.db",
                ):
                    if cand.is_file():
                        con = open_sqlite(cand)
                        break
        if con is None and self.source is None and db_id in self.builtin:
            con = build(self.builtin[db_id])
        if con is None:
            where = self.source if self.source is not None else "the built-in databases"
            raise DatasetNotFoundError(
                f"database {db_id!r} not found in {where}: give `databases` the folder holding "
                f"{db_id}/{db_id}.sqlite (Spider's layout) or {db_id}.sqlite"
            )
        self.cache[db_id] = con
        return con


def _sample(
    db_id: str, qid: str, question: str, gold: list[list[Any]], sql: str | None, chunks: list[str], chunk_tokens: int
) -> Sample:
    return Sample(
        id=f"spider/{slug(db_id)}/{qid}",
        task="spider",
        chunks=tuple(chunks),
        query=question,
        gold=gold,
        metadata={
            "db_id": db_id,
            "sql": sql,
            "ordered": bool(sql and _ORDER_BY.search(sql)),
            "chunk_tokens": chunk_tokens,
        },
    )


def _qid(db_id: str, question: str) -> str:
    return hashlib.sha1(f"{db_id}\n{question}".encode()).hexdigest()[:12]


LOFT_QUERY_FILES = ("queries.jsonl", "test_queries.jsonl", "dev_queries.jsonl")


def loft_files(folder: str | Path) -> tuple[Path, Path] | None:
    """(queries, corpus) of a LOFT Spider folder (`corpus.jsonl` and `queries.jsonl`, else LOFT's
    `test_queries.jsonl` or `dev_queries.jsonl`), or None when the folder does not hold them."""
    root = Path(folder).expanduser()
    corpus = root / "corpus.jsonl"
    queries = next((root / q for q in LOFT_QUERY_FILES if (root / q).is_file()), None)
    return (queries, corpus) if queries is not None and corpus.is_file() else None


def load_spider(
    databases: str | Path | None = None,
    queries: str | Path | None = None,
    chunk_tokens: int = 8192,
    tokenizer: TokenizerLike = None,
    db_ids: Iterable[str] | None = None,
    limit: int | None = None,
    verify: bool = False,
    corpus: str | Path | None = None,
    loft: str | Path | None = None,
    loft_required: bool = False,
) -> list[Sample]:
    """Samples for Spider-style QA; see the module docstring for the sources.

    `verify=True` re-executes each LOFT query's SQL and raises InconsistentGoldError if it disagrees
    with the file's answers. `loft`: a LOFT Spider folder (see `loft_files`) read when present (its
    queries over its own tables, LOFT-Spider's contexts); when absent, memloop's built-in databases,
    each sample's `metadata["source"]` saying so (`loft_required=True` refuses instead).
    """
    source = "builtin"
    if loft is not None:
        if queries is not None or corpus is not None or databases is not None:
            raise DatasetError(
                "`loft` names LOFT's folder (queries and corpus); leave `queries`, `corpus` and "
                "`databases` out, or use them without `loft`"
            )
        found = loft_files(loft)
        if found is None and loft_required:
            raise DatasetNotFoundError(
                f"no LOFT Spider files in {loft} (corpus.jsonl and one of "
                f"{', '.join(LOFT_QUERY_FILES)}); set `loft` to LOFT's spider folder"
            )
        if found is not None:
            queries, corpus = found
            source = f"loft:{Path(queries).name}"
        else:
            source = f"builtin (no LOFT files in {loft})"
    elif queries is not None:
        source = f"file:{Path(queries).name}"
    samples = _load_spider(databases, queries, chunk_tokens, tokenizer, db_ids, limit, verify, corpus)
    for s in samples:
        s.metadata["source"] = source
    return samples


def _load_spider(
    databases: str | Path | None,
    queries: str | Path | None,
    chunk_tokens: int,
    tokenizer: TokenizerLike,
    db_ids: Iterable[str] | None,
    limit: int | None,
    verify: bool,
    corpus: str | Path | None,
) -> list[Sample]:
    count = token_counter(tokenizer)
    dbs = _Databases(databases)
    rendered: dict[str, list[str]] = {}
    wanted = set(db_ids) if db_ids is not None else None

    def chunks_of(db_id: str) -> list[str]:
        if db_id not in rendered:
            rendered[db_id] = render_database(dbs.get(db_id), chunk_tokens, count)
        return rendered[db_id]

    samples: list[Sample] = []
    if corpus is not None and (queries is None or Path(queries).suffix.lower() != ".jsonl"):
        raise DatasetError("`corpus` (LOFT's corpus.jsonl) goes with LOFT `queries` (a queries.jsonl file)")
    if queries is None:
        if databases is not None:
            raise DatasetError("with your own `databases`, also pass `queries` (Spider dev.json or LOFT queries.jsonl)")
        for db in BUILTIN:
            if wanted is None or db.db_id in wanted:
                for q in db.questions:
                    gold = execute(dbs.get(db.db_id), q.sql, f"{db.db_id}: {q.question}")
                    samples.append(
                        _sample(
                            db.db_id,
                            _qid(db.db_id, q.question),
                            q.question,
                            gold,
                            q.sql,
                            chunks_of(db.db_id),
                            chunk_tokens,
                        )
                    )
    elif Path(queries).suffix.lower() == ".jsonl":
        tables = load_loft_corpus(corpus) if corpus is not None else None
        packed: dict[tuple[str, ...], list[str]] = {}  # queries over the same tables share their chunks
        for q in load_loft_queries(queries):
            if wanted is not None and q.db_id not in wanted:
                continue
            if tables is not None:
                missing = [pid for pid in q.candidate_pids if pid not in tables]
                if not q.candidate_pids or missing:
                    raise DatasetNotFoundError(
                        f"query {q.qid}: its tables {missing or '(no candidate_pids)'} are not in the corpus "
                        f"{corpus}: pass the corpus.jsonl of the same LOFT dataset"
                    )
                if q.candidate_pids not in packed:
                    chosen = [tables[pid] for pid in q.candidate_pids]
                    packed[q.candidate_pids] = pack_tables(
                        [(t.name, t.header, t.rows) for t in chosen], chunk_tokens, count
                    )
                chunks = packed[q.candidate_pids]
            else:
                chunks = chunks_of(q.db_id)
            if verify and q.sql:
                got = execute(dbs.get(q.db_id), q.sql, f"query {q.qid}")
                if not same_rows(got, q.answers, bool(_ORDER_BY.search(q.sql))):
                    raise InconsistentGoldError(
                        f"query {q.qid}: executing its SQL gives {got[:5]}..., the file says {q.answers[:5]}..."
                    )
            samples.append(_sample(q.db_id, q.qid, q.question, q.answers, q.sql, chunks, chunk_tokens))
    else:
        for where, rec in read_records(queries, "Spider questions file"):
            db_id = require(rec, "db_id", str, where)
            if wanted is not None and db_id not in wanted:
                continue
            question = require(rec, "question", str, where)
            sql = require(rec, "query", str, where)
            gold = execute(dbs.get(db_id), sql, where)
            samples.append(_sample(db_id, _qid(db_id, question), question, gold, sql, chunks_of(db_id), chunk_tokens))
    return samples[:limit]
