"""The files of a run and what is inside them: a shard's table and part names, the Parquet encoding
with its writer and listed files in the key-value metadata, files read whole with their page checksums,
and the `Committed` record of a shard that a writer reports to the driver. Every file carries a CRC per
Parquet page and every read checks it (`from_parquet`, `read_verified`), so bytes overwritten inside a
file are found even where its footer is intact.

Parts: a shard's table may be written by several processes: the process that ran the unit's loop
writes `{table}/{shard}.parquet`, each judge task its own `{table}/{shard}+{part}.parquet`; the
`samples` file (one per shard, never a part) is written once all of them landed and lists them
(`FILES_KEY`). Every file names its writer (host, pid, role) in `WRITER_KEY`.
"""

from __future__ import annotations

import io
import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from memloop.jobs.errors import StorageError
from memloop.jobs.store.objects import Store
from memloop.jobs.store.tables import SCHEMAS, now

SHARD_TABLES = ("steps", "judgments", "scores", "samples")  # the write order of a shard: samples commits it
RUN_FOLDERS = (*SHARD_TABLES, "runs", "index")  # the folders of a run directory
PART_SEP = "+"  # `{shard}+{part}`: a part of a shard's table written by another process (a judge task)
WRITER_KEY = b"memloop.writer"  # the Parquet key-value metadata naming the process that wrote a file
# In a shard's commit file: {run-relative name: rows} of the shard's other files, so a resume and a
# reader can tell a shard whose `steps` (or a judge's part) went missing from one that never had any.
FILES_KEY = b"memloop.files"


class DamagedRunError(StorageError):
    """A run's tables are missing or unreadable (a partial copy, a listing glitch, a cut-short file)."""


@dataclass(frozen=True)
class Committed:
    """A committed shard, as its writer reports it to the driver: the (unit, status) pairs of its
    samples rows, its largest table's rows, and its files (run-relative, `samples` last). `error` is a
    unit's judge error (the unit is committed ok; its judgment failed)."""

    shard: str
    units: tuple[tuple[str, str], ...]
    rows: int
    files: tuple[str, ...]
    error: str | None = None

    def tables(self) -> set[str]:
        return {f.split("/", 1)[0] for f in self.files}


def part_file(table: str, shard: str, part: str | None = None) -> str:
    """The run-relative name of a shard's table file, or of one of its parts."""
    return f"{table}/{shard}{PART_SEP + part if part else ''}.parquet"


def shard_of(stem: str) -> str:
    """The shard a file stem belongs to (`{shard}` or `{shard}+{part}`)."""
    return stem.split(PART_SEP, 1)[0]


def writer_identity(role: str) -> dict[str, Any]:
    return {"host": socket.gethostname(), "pid": os.getpid(), "role": role}


def to_parquet(table: str, rows: list[dict[str, Any]], writer: dict[str, Any] | None = None) -> bytes:
    return table_bytes(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), writer)


def from_parquet(data: bytes, uri: str = "", columns: list[str] | None = None) -> pa.Table:
    """A Parquet object's table, every page read checked against its checksum; a cut-short, overwritten
    or foreign file raises DamagedRunError naming `uri`."""
    try:
        return pq.read_table(pa.BufferReader(data), columns=columns, page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(uri, f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _unreadable(uri: str, why: str) -> DamagedRunError:
    exc = DamagedRunError(
        f"{uri or 'a table file'} is not a readable Parquet file ({why}); it was cut short or "
        "overwritten: restore it from a copy of the run, or delete it (a resume computes the "
        "units of a shard whose file is deleted again)"
    )
    exc.short = f"{uri} ({why})"  # type: ignore[attr-defined]  # for a list of several damaged files
    return exc


def read_verified(store: Store, name: str, uri: str = "") -> pq.FileMetaData:
    """A Parquet file's footer after reading the whole file and checking every page against the CRC its
    writer recorded (`table_bytes`): bytes overwritten inside a file whose footer is intact raise
    DamagedRunError naming `uri`, as a cut-short file does. (A file written before page checksums is
    still decoded whole, which finds a broken compressed page.)"""
    data = store.get(name)
    try:
        f = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        for i in range(f.num_row_groups):
            f.read_row_group(i)
        return f.metadata
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(uri, f"{type(exc).__name__}: {str(exc)[:200]}") from None


def listed_files(meta: pq.FileMetaData) -> dict[str, int] | None:
    """The files a shard's commit file lists ({run-relative name: rows}); None for shards committed
    before commit files listed them."""
    raw = (meta.metadata or {}).get(FILES_KEY)
    return json.loads(raw) if raw else None


def new_shard_name() -> str:
    return f"{now().strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}"


def table_bytes(t: pa.Table, writer: dict[str, Any] | None = None, files: dict[str, int] | None = None) -> bytes:
    """A table as Parquet bytes (zstd, a CRC per page that every read checks), naming its writer and, in a
    commit file, the shard's other files."""
    meta = dict(t.schema.metadata or {})
    if writer is not None:
        meta[WRITER_KEY] = json.dumps(writer).encode()
    if files is not None:
        meta[FILES_KEY] = json.dumps(files, sort_keys=True).encode()
    if meta:
        t = t.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd", write_page_checksum=True)
    return buf.getvalue()
