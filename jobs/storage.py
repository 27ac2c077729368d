"""Result storage: Parquet tables in a local directory or under gs://bucket/prefix.

Layout of one run (`{output}/{run_id}/`):

    runs/{invocation}.parquet       one manifest row per `memloop run` invocation
    samples/{shard}.parquet         final outputs, one row per (dataset, sample, method, repeat) unit
    steps/{shard}.parquet           per-step traces of the same units
    judgments/{shard}.parquet       raw judge answers
    scores/{shard}.parquet          per-sample scores (aggregates are computed by the report)
    report/                         report.md and PNG plots

Atomicity: every object is written whole (local: write a hidden temporary file, then rename; GCS:
a single-request upload, which becomes visible only when complete, with a create-if-absent
precondition). A shard's `steps`, `judgments` and `scores` files are written before its `samples`
file, and readers only read shards whose `samples` file exists, so an interrupted write never shows
half a shard. A re-run skips units already recorded as `ok`; failed units are tried again and the
latest outcome wins when reading.
"""
from __future__ import annotations

import io
import os
import uuid
from pathlib import Path
from typing import Any, Iterable, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.errors import StorageError
from jobs.tables import SCHEMAS, TABLES, now

# ---------------------------------------------------------------------------------------------
# Object stores: whole-object put/get/list under a root.


class Store(Protocol):
    uri: str

    def put(self, name: str, data: bytes) -> None: ...
    def get(self, name: str) -> bytes: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete(self, name: str) -> None: ...


class LocalStore:
    """A directory. put() writes a hidden temporary file next to the target and renames it."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = str(self.root)

    def _path(self, name: str) -> Path:
        return self.root / name

    def put(self, name: str, data: bytes) -> None:
        target = self._path(name)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc.strerror or exc}; choose a writable `output`") from None

    def get(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise StorageError(f"{self._path(name)} does not exist; check the run URI") from None

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix() for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        )

    def delete(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)


class GCSStore:
    """gs://bucket/prefix through google-cloud-storage.

    A single-request upload is atomic (readers see the old state or the whole object). With
    STORAGE_EMULATOR_HOST set, the client talks to that emulator with anonymous credentials.
    """

    def __init__(self, uri: str, client: Any = None) -> None:
        from google.cloud import storage

        rest = uri[len("gs://"):]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise StorageError(f"{uri!r} names no bucket; write gs://BUCKET/PREFIX")
        self.uri = uri.rstrip("/")
        self.prefix = prefix.strip("/")
        if client is None:
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(project=os.environ.get("GOOGLE_CLOUD_PROJECT", "memloop"),
                                        credentials=AnonymousCredentials())
            else:
                try:
                    client = storage.Client()
                except Exception as exc:  # no default credentials or project
                    raise StorageError(
                        f"cannot create a GCS client for {uri}: {exc}; run `gcloud auth application-default login` "
                        "or set GOOGLE_APPLICATION_CREDENTIALS"
                    ) from None
        self.client = client
        self.bucket = client.bucket(bucket)

    def _blob_name(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, name: str, data: bytes) -> None:
        try:
            # Shard names are unique, so create-if-absent: never overwrite a finished shard.
            self.bucket.blob(self._blob_name(name)).upload_from_string(
                data, content_type="application/octet-stream", if_generation_match=0)
        except Exception as exc:
            raise StorageError(f"cannot write {self.uri}/{name}: {exc}; check the bucket and your permissions") from None

    def get(self, name: str) -> bytes:
        from google.api_core.exceptions import NotFound

        try:
            return self.bucket.blob(self._blob_name(name)).download_as_bytes()
        except NotFound:
            raise StorageError(f"{self.uri}/{name} does not exist; check the run URI") from None

    def list(self, prefix: str) -> list[str]:
        full = self._blob_name(prefix).rstrip("/") + "/"
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            names = [b.name[cut:] for b in self.client.list_blobs(self.bucket, prefix=full)]
        except Exception as exc:
            raise StorageError(f"cannot list {self.uri}/{prefix}: {exc}; check the bucket and your permissions") from None
        return sorted(n for n in names if not n.rsplit("/", 1)[-1].startswith("."))

    def delete(self, name: str) -> None:
        from google.api_core.exceptions import NotFound

        try:
            self.bucket.blob(self._blob_name(name)).delete()
        except NotFound:
            pass


def open_store(uri: str) -> Store:
    if uri.startswith("gs://"):
        return GCSStore(uri)
    if "://" in uri:
        raise StorageError(f"output {uri!r}: only local paths and gs://bucket/prefix are supported")
    return LocalStore(uri)


def join_uri(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if base.startswith("gs://") else str(Path(base).expanduser().resolve() / name)


# ---------------------------------------------------------------------------------------------
# Parquet tables of one run.


def to_parquet(table: str, rows: list[dict[str, Any]]) -> bytes:
    schema = SCHEMAS[table]
    arrow = pa.Table.from_pylist(rows, schema=schema)
    buf = io.BytesIO()
    pq.write_table(arrow, buf, compression="zstd")
    return buf.getvalue()


def from_parquet(data: bytes) -> pa.Table:
    return pq.read_table(pa.BufferReader(data))


class RunStore:
    """The tables of one run under `{output}/{run_id}`."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store = store
        self.run_id = run_id
        self._root = run_id

    @classmethod
    def open(cls, output: str, run_id: str) -> "RunStore":
        return cls(open_store(output), run_id)

    @classmethod
    def at(cls, run_uri: str) -> "RunStore":
        """Open an existing run by its URI (`{output}/{run_id}`)."""
        base, _, rid = run_uri.rstrip("/").rpartition("/")
        if not rid:
            raise StorageError(f"{run_uri!r} is not a run URI; give OUTPUT/RUN_ID as printed by `memloop run`")
        rs = cls(open_store(base or "."), rid)
        if not rs.store.list(f"{rid}/samples") and not rs.store.list(f"{rid}/runs"):
            raise StorageError(f"{run_uri} holds no run (no samples/ or runs/ tables); check the URI printed by `memloop run`")
        return rs

    @property
    def uri(self) -> str:
        return join_uri(self.store.uri, self.run_id)

    def name(self, *parts: str) -> str:
        return "/".join((self._root, *parts))

    def check_writable(self) -> None:
        """Write and delete a probe object, so an unwritable output fails before any work starts."""
        probe = self.name(f".probe-{uuid.uuid4().hex[:8]}")
        try:
            self.store.put(probe, b"probe")
        except StorageError as exc:
            raise StorageError(f"`output`: {exc}") from None
        self.store.delete(probe)

    # writing -------------------------------------------------------------------------------

    def write_shard(self, tables: dict[str, list[dict[str, Any]]]) -> str:
        """Write one shard of per-unit rows; `samples` goes last and commits the shard."""
        if not tables.get("samples"):
            raise ValueError("a shard needs at least one samples row (the commit record)")
        shard = f"{now().strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}"
        for table in ("steps", "judgments", "scores", "samples"):
            rows = [dict(r, run_id=self.run_id, shard=shard) for r in tables.get(table, ())]
            if rows or table == "samples":
                self.store.put(self.name(table, f"{shard}.parquet"), to_parquet(table, rows))
        return shard

    def write_manifest(self, row: dict[str, Any]) -> None:
        row = dict(row, run_id=self.run_id)
        self.store.put(self.name("runs", f"{row['invocation']}.parquet"), to_parquet("runs", [row]))

    def put_file(self, rel: str, data: bytes) -> None:
        self.store.put(self.name(rel), data)

    # reading -------------------------------------------------------------------------------

    def _shard_names(self, table: str) -> dict[str, str]:
        out = {}
        for n in self.store.list(self.name(table)):
            if n.endswith(".parquet"):
                out[n.rsplit("/", 1)[-1][: -len(".parquet")]] = n
        return out

    def _read_all(self, table: str, shards: Iterable[str] | None = None) -> pa.Table:
        names = self._shard_names(table)
        keep = names if shards is None else {s: names[s] for s in shards if s in names}
        parts = [from_parquet(self.store.get(n)) for _, n in sorted(keep.items())]
        if not parts:
            return SCHEMAS[table].empty_table()
        return pa.concat_tables([p.cast(SCHEMAS[table]) for p in parts])

    def samples(self) -> pa.Table:
        """Committed unit outcomes, one row per unit: an `ok` row wins over `failed`, then the latest."""
        raw = self._read_all("samples")
        if raw.num_rows == 0:
            return raw
        df = raw.to_pandas()
        df["_ok"] = df["status"] == "ok"
        df = df.sort_values(["_ok", "finished_at", "shard"]).drop_duplicates("unit", keep="last")
        df = df.drop(columns="_ok").sort_values(["dataset", "sample_id", "method", "repeat"])
        return pa.Table.from_pandas(df, schema=SCHEMAS["samples"], preserve_index=False)

    def table(self, table: str) -> pa.Table:
        """A per-unit table restricted to the winning shard of each unit (see `samples`)."""
        winners = self.samples()
        if table == "samples":
            return winners
        if table == "runs":
            return self._read_all("runs")
        pairs = set(zip(winners.column("unit").to_pylist(), winners.column("shard").to_pylist()))
        shards = {s for _, s in pairs}
        raw = self._read_all(table, shards)
        if raw.num_rows == 0:
            return raw
        mask = [(u, s) in pairs for u, s in zip(raw.column("unit").to_pylist(), raw.column("shard").to_pylist())]
        return raw.filter(pa.array(mask, pa.bool_()))

    def done_units(self) -> set[str]:
        s = self.samples()
        if s.num_rows == 0:
            return set()
        return {u for u, st in zip(s.column("unit").to_pylist(), s.column("status").to_pylist()) if st == "ok"}
