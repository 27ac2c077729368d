"""`memloop export`: a run's final tables in a table-first hive layout for SQL engines.

    {dest}/{table}/run_id={run_id}/part-0.parquet     table in samples, steps, judgments, scores, runs

`samples` holds exactly one row per unit (its final outcome, `jobs.store.storage.final_outcomes`), and
`steps`, `judgments` and `scores` only the rows of that outcome, so DuckDB or BigQuery over the
files never counts a retried unit twice. `runs` keeps one row per invocation. The `run_id` column
lives in the path only (hive partitioning adds it back), as BigQuery's hive tables require.
Exporting again replaces the run's partition; other runs' partitions are left alone.
docs/operations.md has the SQL snippets and the JSON columns' schemas.
"""
from __future__ import annotations

import io
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.store.storage import RunStore, join_uri, open_store
from jobs.store.tables import SCHEMAS

EXPORT_TABLES = ("samples", "steps", "judgments", "scores", "runs")


@dataclass
class ExportResult:
    run_id: str
    dest: str
    rows: dict[str, int]  # table -> rows written


def default_dest(rs: RunStore) -> str:
    """`{output}/export`: next to the run directories, so every run of an output shares one dataset."""
    return join_uri(rs.store.uri, "export")


def partition_name(table: str, run_id: str) -> str:
    return f"{table}/run_id={run_id}/part-0.parquet"


def final_table(rs: RunStore, table: str) -> pa.Table:
    """The table as the run's readers see it, without the `run_id` column (it is the partition)."""
    t = rs.table(table).cast(SCHEMAS[table])
    return t.drop_columns(["run_id"])


def export_run(run_uri: str, dest: str | None = None) -> ExportResult:
    rs = RunStore.at(run_uri)
    dest = dest or default_dest(rs)
    store = open_store(dest)
    rows = {}
    for table in EXPORT_TABLES:
        t = final_table(rs, table)
        buf = io.BytesIO()
        pq.write_table(t, buf, compression="zstd")
        store.put(partition_name(table, rs.run_id), buf.getvalue(), mode="overwrite")
        rows[table] = t.num_rows
    return ExportResult(rs.run_id, store.uri, rows)
