"""`memloop export`: a run's final tables in a table-first hive layout for SQL engines.

    {dest}/{table}/run_id={run_id}/part-0.parquet     table in samples, steps, judgments, scores, runs

`samples` holds exactly one row per unit (its final outcome, `memloop.jobs.store.run_store.final_outcomes`), and
`steps`, `judgments` and `scores` only the rows of that outcome, so DuckDB or BigQuery over the
files never counts a retried unit twice. `runs` keeps one row per invocation. The `run_id` column
lives in the path only (hive partitioning adds it back), as BigQuery's hive tables require.
Exporting again replaces the run's partition; other runs' partitions are left alone. A partition is
never replaced by one with fewer rows unless `force` is given (a damaged copy of a run, e.g. one
whose `steps/` folder is missing, would otherwise overwrite the good export with empty tables), and
the partition's run id is the one written in the run's tables, not the directory's name.
A destination inside a run, or holding one, is refused before anything is written: the run lists its table
folders recursively, so partitions written there would read as the run's own shards. A run being computed
now is refused too (its tables are partial) unless `allow_partial` is given.
docs/operations.md has the SQL snippets and the JSON columns' schemas.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from memloop.jobs.errors import StorageError
from memloop.jobs.store.lock import describe_holder
from memloop.jobs.store.objects import NotFoundError, Store
from memloop.jobs.store.outputs import join_uri, open_store
from memloop.jobs.store.run_files import DamagedRunError
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import SCHEMAS

EXPORT_TABLES = ("samples", "steps", "judgments", "scores", "runs")


@dataclass
class ExportResult:
    run_id: str
    dest: str
    rows: dict[str, int]  # table -> rows written
    partial: bool = False  # the run was being computed (exported with allow_partial)


def default_dest(rs: RunStore) -> str:
    """`{output}/export`: next to the run directories, so every run of an output shares one dataset."""
    return join_uri(rs.store.uri, "export")


def partition_name(table: str, run_id: str) -> str:
    return f"{table}/run_id={run_id}/part-0.parquet"


def final_table(rs: RunStore, table: str) -> pa.Table:
    """The table as the run's readers see it, without the `run_id` column (it is the partition)."""
    t = rs.table(table).cast(SCHEMAS[table])
    return t.drop_columns(["run_id"])


class ExportShrinkError(StorageError):
    """An export would replace a partition with fewer rows than it holds."""


class ExportDestinationError(StorageError):
    """The destination cannot take an export: a file, inside a run, or holding runs."""


class RunInProgressError(StorageError):
    """The run is being computed now: its tables are partial."""


# A run keeps one manifest per invocation right under runs/ ({invocation}.parquet); an export's runs/ holds only
# run_id=... partitions, so this tells a run's directory from an export's.
_MANIFEST = re.compile(r"(?:^|/)runs/[^/]+\.parquet$")


def _ancestors(uri: str) -> list[str]:
    """`uri` and every folder above it, nearest first (a bucket's prefixes up to the bucket)."""
    if uri.startswith("gs://"):
        parts = uri[len("gs://") :].rstrip("/").split("/")
        return ["gs://" + "/".join(parts[:k]) for k in range(len(parts), 0, -1)]
    p = Path(uri).expanduser().resolve()
    return [str(a) for a in (p, *p.parents)]


def _is_run_dir(uri: str) -> bool:
    if not uri.startswith("gs://"):
        runs = Path(uri) / "runs"
        return (
            runs.is_dir()
            and any(f.is_file() and f.suffix == ".parquet" for f in runs.iterdir())
            and any((Path(uri) / table).is_dir() for table in ("samples", "index"))
        )
    return any(_MANIFEST.search(n) for n in open_store(uri).list("runs"))


def check_destination(dest: str, *, tables: bool) -> None:
    """Refuse a destination that is an existing file, or (`tables`: the export writes table folders) lies inside
    a run or holds runs. Raises ExportDestinationError saying which and what to do; writes nothing."""
    if not dest.startswith("gs://") and Path(dest).expanduser().exists() and not Path(dest).expanduser().is_dir():
        raise ExportDestinationError(f"--to {dest}: is a file, not a directory; give a new or existing directory")
    if not tables:
        return
    for folder in _ancestors(dest):
        if _is_run_dir(folder):
            raise ExportDestinationError(
                f"--to {dest}: is inside the run {folder}; its tables would mix with the run's own and break it. "
                "Export next to the runs instead (the default, OUTPUT/export) or to a directory of its own"
            )
    inside = sorted({_MANIFEST.split(n)[0] or "." for n in open_store(dest).list("") if _MANIFEST.search(n)})
    if inside:
        raise ExportDestinationError(
            f"--to {dest}: holds the run(s) {', '.join(inside[:3])}{' ...' if len(inside) > 3 else ''}; export to "
            "a directory that holds no run (the default is OUTPUT/export)"
        )


def put_export(store: Store, name: str, data: bytes) -> None:
    """Write one file of an export; a failure names `--to` (the store's own advice is for a run's `output`)."""
    try:
        store.put(name, data, mode="overwrite")
    except StorageError as exc:
        what = str(exc).split("; ")[0]
        raise StorageError(
            f"--to {store.uri}: {what}; give --to a directory (or gs:// prefix) this user can write"
        ) from None


def check_not_computing(rs: RunStore, allow_partial: bool) -> dict[str, Any] | None:
    """The holder of a run being computed now (None if none); raises RunInProgressError unless `allow_partial`."""
    holder = rs.computing()
    if holder and not allow_partial:
        raise RunInProgressError(
            f"{rs.uri} is being computed now by {describe_holder(holder)}; its tables are partial. Export "
            "it when that run has finished, or pass --allow-partial to export what it holds so far"
        )
    return holder


def run_id_of(rs: RunStore) -> str:
    """The run id written in the run's tables (a copied or renamed directory keeps its tables' id)."""
    ids = set(rs.table("samples").column("run_id").to_pylist()) | set(rs.table("runs").column("run_id").to_pylist())
    ids.discard(None)
    if len(ids) > 1:
        raise DamagedRunError(
            f"{rs.uri} mixes the tables of several runs ({', '.join(sorted(ids))}); "
            "export each run from its own directory"
        )
    return ids.pop() if ids else rs.run_id


def _rows_held(store: Store, name: str) -> int:
    """Rows of an existing partition file (0 when there is none)."""
    try:
        data = store.get(name)
    except NotFoundError:
        return 0
    try:
        return pq.read_metadata(pa.BufferReader(data)).num_rows
    except (pa.ArrowException, OSError):
        return 0  # an unreadable partition holds nothing worth keeping


def export_run(run_uri: str, dest: str | None = None, force: bool = False, allow_partial: bool = False) -> ExportResult:
    rs = RunStore.at(run_uri)
    partial = check_not_computing(rs, allow_partial) is not None
    run_id = run_id_of(rs)
    dest = dest or default_dest(rs)
    check_destination(dest, tables=True)
    store = open_store(dest)
    tables = {table: final_table(rs, table) for table in EXPORT_TABLES}
    if not force:  # every table checked before any is written, so a refused export changes nothing
        for table, t in tables.items():
            held = _rows_held(store, partition_name(table, run_id))
            if t.num_rows < held:
                raise ExportShrinkError(
                    f"{join_uri(store.uri, partition_name(table, run_id))} holds {held} rows but the run at "
                    f"{rs.uri} has only {t.num_rows} in `{table}`; the run directory may be damaged or a partial "
                    "copy. Check it, or pass --force to replace the partition anyway"
                )
    rows = {}
    for table, t in tables.items():
        buf = io.BytesIO()
        pq.write_table(t, buf, compression="zstd")
        put_export(store, partition_name(table, run_id), buf.getvalue())
        rows[table] = t.num_rows
    return ExportResult(run_id, store.uri, rows, partial)
