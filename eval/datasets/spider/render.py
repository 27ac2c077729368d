"""Tables as LOFT-style text (`Table: name` + CSV rows) and their packing into token-bounded chunks."""

from __future__ import annotations

import csv
import io
import sqlite3

from memloop.eval.datasets.errors import DatasetError
from memloop.eval.tokens import TokenCounter


def table_names(con: sqlite3.Connection) -> list[str]:
    rows = con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY rowid"
    )
    return [r[0] for r in rows]


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="").writerow(["" if v is None else v for v in values])
    return buf.getvalue()


def table_lines(con: sqlite3.Connection, table: str) -> tuple[str, list[str]]:
    """(CSV header, CSV rows) of one table, rows in rowid order."""
    cur = con.execute(f'SELECT * FROM "{table}"')
    header = _csv_line([d[0] for d in cur.description])
    return header, [_csv_line(list(row)) for row in cur]


def pack_tables(tables: list[tuple[str, str, list[str]]], chunk_tokens: int, count: TokenCounter) -> list[str]:
    """Chunks of at most `chunk_tokens` tokens holding every row of `(name, CSV header, CSV rows)` once.

    Whole tables are packed greedily (separated by a blank line, as LOFT lays out its corpus); a
    table larger than a chunk is split at row boundaries, each piece repeating `Table: name` and the
    CSV header.
    """
    pieces: list[str] = []
    for table, header, rows in tables:
        lead = [f"Table: {table}", header]
        if count("\n".join(lead)) > chunk_tokens:
            raise DatasetError(
                f"the header of table {table!r} alone exceeds {chunk_tokens} tokens: use a larger chunk size"
            )
        start = 0
        while True:  # largest run of rows that fits with the header (binary search: token counts grow with rows)
            lo, hi = start, len(rows)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if count("\n".join(lead + rows[start:mid])) <= chunk_tokens:
                    lo = mid
                else:
                    hi = mid - 1
            if lo == start and start < len(rows):
                raise DatasetError(
                    f"a row of table {table!r} exceeds {chunk_tokens} tokens with its header: use a larger chunk size"
                )
            pieces.append("\n".join(lead + rows[start:lo]))
            start = lo
            if start >= len(rows):
                break
    chunks: list[str] = []
    for piece in pieces:
        candidate = f"{chunks[-1]}\n\n{piece}" if chunks else piece
        if chunks and count(candidate) <= chunk_tokens:
            chunks[-1] = candidate
        else:
            chunks.append(piece)
    return chunks


def render_database(con: sqlite3.Connection, chunk_tokens: int, count: TokenCounter) -> list[str]:
    """Every table of a SQLite database, packed by `pack_tables`."""
    return pack_tables([(t, *table_lines(con, t)) for t in table_names(con)], chunk_tokens, count)
