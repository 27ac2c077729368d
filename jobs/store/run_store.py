"""Result storage: Parquet tables in a local directory or under gs://bucket/prefix.

Layout of one run (`{output}/{run_id}/`):

    runs/{invocation}.parquet       one manifest row per `memloop run` invocation
    index/{invocation}.parquet      the units an invocation committed, and their shards (for resume)
    samples/{shard}.parquet         final outputs, one row per (dataset, sample, method, repeat) unit
    steps/{shard}.parquet           per-step traces of the same units
    judgments/{shard}.parquet       raw judge answers
    scores/{shard}.parquet          per-sample scores (aggregates are computed by the report)
    report.md, *.png                the report (rewritten by every `memloop report`)
    compare-{run_id}/               `memloop compare` outputs against another run
    judgings/{judging_id}/          a re-judging of the run's outputs (`memloop rescore`): its own
                                    judgments/, scores/, judged/ (the commit record), index/, runs/ and
                                    .lock, laid out and committed like the run's own tables
    .lock                           held while a process computes the run (see `RunStore.acquire_lock`)

Atomicity: every object is written whole (local: write a hidden temporary file, then link or rename
it into place; GCS: a single-request upload, which becomes visible only when complete). A shard's
`steps`, `judgments` and `scores` files are written before its `samples` file, and readers only read
shards whose `samples` file exists, so an interrupted write never shows half a shard.

Parts: a shard's table may be written by several processes: the process that ran the unit's loop
writes `{table}/{shard}.parquet`, each judge task its own `{table}/{shard}+{part}.parquet`; the
`samples` file (one per shard, never a part) is written once all of them landed (`RunStore.commit`).
Every file names its writer (host, pid, role) in its Parquet key-value metadata (`writer_of`). The
driver learns of a shard another process committed from its `Committed` record (`RunStore.record`),
which is what its unit index lists. A re-run skips
units already recorded as `ok`; failed units are tried again and `final_outcomes` picks one row per
unit when reading. It learns which units are done from the invocations' unit indexes and the
listing of `samples/`, reading (two columns of) only those shards no index covers (an invocation
that was killed before writing its index).

Compaction: at the end of an invocation its small shards are merged into shards of up to
`shard_rows` rows (`RunStore.compact`): the merged shard is committed first (its `samples` last),
then the old shards are removed `samples` first. A reader in between sees every unit twice with
identical rows, which `final_outcomes` resolves to one; a crash in between leaves only invisible files.

Write modes (`Store.put`), each what GCS enforces with generation preconditions:
- "create": create-only (`ifGenerationMatch=0`). Shards and manifest rows have unique names, so an
  existing object is a real conflict and raises `ConflictError`.
- "overwrite": last writer wins (no precondition). Report files, compare outputs, exports.
- `Store.replace(name, data, generation)`: compare-and-swap for read-modify-write (the lock).
"""
from __future__ import annotations

import contextlib
import datetime as dt
import errno
import io
import json
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator, Literal, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from jobs.errors import LockHeldError, StorageError
from jobs.store.tables import SCHEMAS, conform, now

WriteMode = Literal["create", "overwrite"]

# One storage call's bound, retries included: a bucket that stops answering fails the call after this
# many seconds instead of retrying for minutes (the run then stops, keeping what it wrote).
STORAGE_DEADLINE_S = 60.0
# One HTTP request's bound inside it (a connection that hangs is dropped and retried within the deadline).
STORAGE_REQUEST_TIMEOUT_S = 20.0
# Once a call has failed, the next calls get this much shorter bound until one succeeds, so a run
# that stops on a storage outage closes (index, manifest, lock) in seconds, not minutes.
STORAGE_DOWN_DEADLINE_S = 5.0


class ConflictError(StorageError):
    """A write precondition did not hold: the object exists (create) or changed (replace)."""


class NotFoundError(StorageError):
    """The object does not exist."""


class DamagedRunError(StorageError):
    """A run's tables are missing or unreadable (a partial copy, a listing glitch, a cut-short file)."""


# ---------------------------------------------------------------------------------------------
# Object stores: whole-object put/get/list under a root. A generation is an opaque string that
# changes whenever the object is written (GCS: the object generation; local: inode and mtime).


class Store(Protocol):
    uri: str

    def put(self, name: str, data: bytes, mode: WriteMode = "create") -> str: ...
    def get(self, name: str) -> bytes: ...
    def read(self, name: str) -> tuple[bytes, str]: ...
    def read_tail(self, name: str, n: int) -> tuple[bytes, int]: ...
    def replace(self, name: str, data: bytes, generation: str) -> str: ...
    def list(self, prefix: str) -> list[str]: ...
    def children(self, prefix: str) -> list[str]: ...
    def delete(self, name: str, generation: str | None = None) -> None: ...


class LocalStore:
    """A directory. put() writes a hidden temporary file next to the target, then links it into
    place (create: fails if the target exists, like O_EXCL) or renames it over the target (overwrite)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = str(self.root)

    def _path(self, name: str) -> Path:
        return self.root / name

    @staticmethod
    def _generation(path: Path) -> str:
        st = path.stat()
        return f"{st.st_ino}.{st.st_mtime_ns}"

    def _write_tmp(self, target: Path, data: bytes) -> Path:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a directory should be: not a create-only conflict
            raise StorageError(f"cannot write {target}: {target.parent} is not a directory; "
                               "remove what is in the way or choose another `output`") from None
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:  # a full disk or an I/O error: no half-written temporary file stays behind
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def put(self, name: str, data: bytes, mode: WriteMode = "create") -> str:
        target = self._path(name)
        try:
            self.check_folder(target.parent)
            tmp = self._write_tmp(target, data)
            try:
                if mode == "overwrite":
                    os.replace(tmp, target)
                else:
                    self._link_exclusive(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            return self._generation(target)
        except FileExistsError:
            raise ConflictError(f"{target} already exists and is written create-only; "
                                "another process wrote the same object (remove it only if that process is gone)") from None
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc.strerror or exc}; choose a writable `output`") from None

    def check_folder(self, folder: Path) -> None:
        """Raise StorageError when a folder on the way to `folder` is a file (mkdir would say only
        "exists", which reads as a write conflict)."""
        for p in (folder, *folder.parents):
            if p == self.root.parent:
                break
            if p.exists() and not p.is_dir():
                raise StorageError(f"{p} is not a directory (it is a file), so the run cannot write under it; "
                                   "move or delete that file, or choose another `output`")

    @staticmethod
    def _link_exclusive(tmp: Path, target: Path) -> None:
        try:
            os.link(tmp, target)  # atomic create-if-absent of a complete file
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            # file systems without hard links (some FUSE mounts): exclusive create, then copy in
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(tmp.read_bytes())

    def get(self, name: str) -> bytes:
        return self.read(name)[0]

    def read(self, name: str) -> tuple[bytes, str]:
        path = self._path(name)
        try:
            with path.open("rb") as f:
                gen = f"{os.fstat(f.fileno()).st_ino}.{os.fstat(f.fileno()).st_mtime_ns}"
                return f.read(), gen
        except FileNotFoundError:
            raise NotFoundError(f"{path} does not exist; check the run URI") from None

    def read_tail(self, name: str, n: int) -> tuple[bytes, int]:
        """The last `n` bytes of an object and its size (a Parquet footer, without reading the file)."""
        path = self._path(name)
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - n))
                return f.read(), size
        except FileNotFoundError:
            raise NotFoundError(f"{path} does not exist; check the run URI") from None

    @contextlib.contextmanager
    def _mutex(self, target: Path) -> Iterator[None]:
        """Serialises compare-and-swap on one object across the processes of this host."""
        import fcntl

        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.mutex", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def replace(self, name: str, data: bytes, generation: str) -> str:
        target = self._path(name)
        with self._mutex(target):
            try:
                current = self._generation(target)
            except FileNotFoundError:
                raise ConflictError(f"{target} was removed by another process") from None
            if current != generation:
                raise ConflictError(f"{target} was changed by another process")
            tmp = self._write_tmp(target, data)
            try:
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            return self._generation(target)

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix() for p in base.rglob("*")
            if p.is_file() and not p.name.startswith(".")
        )

    def children(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))

    def delete(self, name: str, generation: str | None = None) -> None:
        target = self._path(name)
        try:
            if generation is None:
                target.unlink(missing_ok=True)
                return
            with self._mutex(target):
                try:
                    if self._generation(target) != generation:
                        raise ConflictError(f"{target} was changed by another process; not deleted")
                except FileNotFoundError:
                    return
                target.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot delete {target}: {exc.strerror or exc}; check the output's permissions") from None


class GCSStore:
    """gs://bucket/prefix through google-cloud-storage.

    A single-request upload is atomic (readers see the old state or the whole object). With
    STORAGE_EMULATOR_HOST set, the client talks to that emulator with anonymous credentials.
    """

    def __init__(self, uri: str, client: Any = None, deadline_s: float | None = None) -> None:
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY, ConditionalRetryPolicy, is_generation_specified

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
        self.deadline_s = STORAGE_DEADLINE_S if deadline_s is None else deadline_s
        self.down = False  # the last call failed: the next ones get STORAGE_DOWN_DEADLINE_S
        self._retries = {}
        for down in (False, True):
            retry = DEFAULT_RETRY.with_timeout(min(self.deadline_s, STORAGE_DOWN_DEADLINE_S) if down else self.deadline_s)
            # uploads are retried only when a generation precondition makes a repeat harmless (as GCS advises)
            self._retries[down] = (retry, ConditionalRetryPolicy(retry, is_generation_specified, ["query_params"]))

    @property
    def _retry(self) -> Any:
        return self._retries[self.down][0]

    @property
    def _upload_retry(self) -> Any:
        return self._retries[self.down][1]

    @property
    def _timeout(self) -> float:
        return min(STORAGE_REQUEST_TIMEOUT_S, self._retry.timeout)

    def _failed(self, verb: str, name: str, exc: BaseException) -> StorageError:
        from google.api_core.exceptions import RetryError

        bound = self._retry.timeout  # the bound this call ran under
        retried = isinstance(exc, (RetryError, TimeoutError, ConnectionError))
        if retried:  # the storage is not answering: the next calls get the short bound
            self.down = True
        why = f" (gave up after {bound:g} s)" if retried else ""
        return StorageError(f"cannot {verb} {self.uri}/{name}{why}: {type(exc).__name__}: {str(exc)[:300]}; "
                            "check the bucket, your network and permissions")

    def _blob_name(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _upload(self, name: str, data: bytes, if_generation_match: int | None) -> str:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(self._blob_name(name))
        try:
            blob.upload_from_string(data, content_type="application/octet-stream",
                                    if_generation_match=if_generation_match, retry=self._upload_retry,
                                    timeout=self._timeout)
        except PreconditionFailed:
            if if_generation_match == 0:
                raise ConflictError(f"{self.uri}/{name} already exists and is written create-only; another "
                                    "process wrote the same object (remove it only if that process is gone)") from None
            raise ConflictError(f"{self.uri}/{name} was changed by another process") from None
        except Exception as exc:
            raise self._failed("write", name, exc) from None
        self.down = False
        return str(blob.generation)

    def put(self, name: str, data: bytes, mode: WriteMode = "create") -> str:
        return self._upload(name, data, 0 if mode == "create" else None)

    def replace(self, name: str, data: bytes, generation: str) -> str:
        return self._upload(name, data, int(generation))

    def get(self, name: str) -> bytes:
        return self.read(name)[0]

    def read(self, name: str) -> tuple[bytes, str]:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            blob = self.bucket.get_blob(self._blob_name(name), retry=self._retry, timeout=self._timeout)
            self.down = False
            if blob is not None:
                gen = blob.generation  # (the download may reset it from its response headers)
                # the bytes of exactly the generation whose metadata was read
                return blob.download_as_bytes(if_generation_match=gen, retry=self._retry,
                                              timeout=self._timeout), str(gen)
        except (NotFound, PreconditionFailed):
            pass  # deleted or rewritten between the two requests: report it as gone; the caller re-reads
        except Exception as exc:
            raise self._failed("read", name, exc) from None
        raise NotFoundError(f"{self.uri}/{name} does not exist; check the run URI")

    def read_tail(self, name: str, n: int) -> tuple[bytes, int]:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            blob = self.bucket.get_blob(self._blob_name(name), retry=self._retry, timeout=self._timeout)
            self.down = False
            if blob is not None:
                size, gen = int(blob.size or 0), blob.generation
                if size == 0:
                    return b"", 0
                return blob.download_as_bytes(start=max(0, size - n), end=size - 1, if_generation_match=gen,
                                              retry=self._retry, timeout=self._timeout), size
        except (NotFound, PreconditionFailed):
            pass
        except Exception as exc:
            raise self._failed("read", name, exc) from None
        raise NotFoundError(f"{self.uri}/{name} does not exist; check the run URI")

    def list(self, prefix: str) -> list[str]:
        full = self._blob_name(prefix).rstrip("/") + "/"
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            names = [b.name[cut:] for b in self.client.list_blobs(self.bucket, prefix=full, retry=self._retry,
                                                                   timeout=self._timeout)]
        except Exception as exc:
            raise self._failed("list", prefix, exc) from None
        self.down = False
        return sorted(n for n in names if not n.rsplit("/", 1)[-1].startswith("."))

    def children(self, prefix: str) -> list[str]:
        full = (self._blob_name(prefix).rstrip("/") + "/") if (prefix or self.prefix) else ""
        try:
            it = self.client.list_blobs(self.bucket, prefix=full, delimiter="/", retry=self._retry,
                                        timeout=self._timeout)
            for _ in it:  # the prefixes are known once the pages are read
                pass
            dirs = [p[len(full):].rstrip("/") for p in it.prefixes]
        except Exception as exc:
            raise self._failed("list", prefix, exc) from None
        return sorted(d for d in dirs if d and not d.startswith("."))

    def delete(self, name: str, generation: str | None = None) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            self.bucket.blob(self._blob_name(name)).delete(
                if_generation_match=int(generation) if generation is not None else None, retry=self._retry,
                timeout=self._timeout)
        except NotFound:
            pass
        except PreconditionFailed:
            raise ConflictError(f"{self.uri}/{name} was changed by another process; not deleted") from None
        except Exception as exc:
            raise self._failed("delete", name, exc) from None


def open_store(uri: str) -> Store:
    if uri.startswith("gs://"):
        return GCSStore(uri)
    if "://" in uri:
        hint = f"; for a local directory write the path without the scheme ({uri[len('file://'):]})" \
            if uri.startswith("file://") else "; write a local directory or gs://BUCKET/PREFIX"
        raise StorageError(f"output {uri!r}: only local paths and gs://bucket/prefix are supported{hint}")
    return LocalStore(uri)


def join_uri(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if base.startswith("gs://") else str(Path(base).expanduser().resolve() / name)


# ---------------------------------------------------------------------------------------------
# Parquet tables of one run.


SHARD_TABLES = ("steps", "judgments", "scores", "samples")  # the write order of a shard: samples commits it
RUN_FOLDERS = (*SHARD_TABLES, "runs", "index")  # the folders of a run directory
PART_SEP = "+"  # `{shard}+{part}`: a part of a shard's table written by another process (a judge task)
WRITER_KEY = b"memloop.writer"  # the Parquet key-value metadata naming the process that wrote a file
# In a shard's commit file: {run-relative name: rows} of the shard's other files, so a resume and a
# reader can tell a shard whose `steps` (or a judge's part) went missing from one that never had any.
FILES_KEY = b"memloop.files"
FOOTER_READ = 64 * 1024  # bytes read from a file's end to find its Parquet footer (a second read if longer)


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
    return _table_bytes(pa.Table.from_pylist(rows, schema=SCHEMAS[table]), writer)


def from_parquet(data: bytes, uri: str = "", columns: list[str] | None = None) -> pa.Table:
    """A Parquet object's table; a cut-short or foreign file raises DamagedRunError naming `uri`."""
    try:
        return pq.read_table(pa.BufferReader(data), columns=columns)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(uri, f"{type(exc).__name__}: {str(exc)[:200]}") from None


def _unreadable(uri: str, why: str) -> DamagedRunError:
    exc = DamagedRunError(f"{uri or 'a table file'} is not a readable Parquet file ({why}); it was cut short or "
                          "overwritten: restore it from a copy of the run, or delete it (a resume computes the "
                          "units of a shard whose file is deleted again)")
    exc.short = f"{uri} ({why})"  # type: ignore[attr-defined]  # for a list of several damaged files
    return exc


def read_footer(store: Store, name: str, uri: str = "") -> pq.FileMetaData:
    """A Parquet file's footer (its row count and key-value metadata) from the file's last bytes only;
    a cut-short or foreign file raises DamagedRunError naming `uri`."""
    tail, size = store.read_tail(name, FOOTER_READ)
    if size < 12 or tail[-4:] != b"PAR1":
        raise _unreadable(uri, f"no Parquet footer at the end of its {size} bytes")
    n = int.from_bytes(tail[-8:-4], "little")
    if n + 12 > size:
        raise _unreadable(uri, f"its footer claims {n} bytes of a {size}-byte file")
    if n + 8 > len(tail):
        tail, _ = store.read_tail(name, n + 8)
    try:
        return pq.read_metadata(pa.BufferReader(b"PAR1" + tail[-(n + 8):]))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _unreadable(uri, f"{type(exc).__name__}: {str(exc)[:200]}") from None


def listed_files(meta: pq.FileMetaData) -> dict[str, int] | None:
    """The files a shard's commit file lists ({run-relative name: rows}); None for shards committed
    before commit files listed them."""
    raw = (meta.metadata or {}).get(FILES_KEY)
    return json.loads(raw) if raw else None


# a unit with one of these outcomes is done: resuming never computes it again ("n/a": the method
# does not apply to the sample, e.g. the long-context ceiling on an input longer than the context)
DONE_STATUSES = frozenset({"ok", "n/a"})


def final_outcomes(samples: pa.Table) -> pa.Table:
    """One `samples` row per unit: an `ok` (or `n/a`) row beats a `failed` one, then the latest (by
    `finished_at`, then shard name) wins. The one definition of a unit's outcome, used by every
    reader of a run (`RunStore`, `memloop export`)."""
    if samples.num_rows == 0:
        return samples
    df = samples.to_pandas()
    df["_ok"] = df["status"].isin(DONE_STATUSES)
    df = df.sort_values(["_ok", "finished_at", "shard"], kind="stable").drop_duplicates("unit", keep="last")
    df = df.drop(columns="_ok").sort_values(["dataset", "sample_id", "method", "repeat"], kind="stable")
    return pa.Table.from_pandas(df, schema=samples.schema, preserve_index=False)


def rows_of_outcomes(raw: pa.Table, outcomes: pa.Table) -> pa.Table:
    """The rows of a per-unit table (`steps`, `judgments`, `scores`) written with each unit's final
    outcome (same unit and shard); rows of superseded attempts are dropped."""
    if raw.num_rows == 0:
        return raw
    pairs = set(zip(outcomes.column("unit").to_pylist(), outcomes.column("shard").to_pylist()))
    mask = [(u, s) in pairs for u, s in zip(raw.column("unit").to_pylist(), raw.column("shard").to_pylist())]
    return raw.filter(pa.array(mask, pa.bool_()))


LOCK_NAME = ".lock"
_LIVE_LOCKS: set[str] = set()  # the URIs of the locks this process holds now


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds")


@dataclass
class Lock:
    """A held run lock: an object created create-only, refreshed and released only while its
    generation is still the one this process wrote (so a broken-and-retaken lock is never touched)."""

    store: Store
    name: str
    uri: str
    holder: dict[str, Any]
    generation: str
    released: bool = field(default=False)
    took_over: dict[str, Any] | None = None  # the dead or stale holder this lock was taken from
    took_over_why: str = ""

    def refresh(self) -> None:
        """Write a new heartbeat; raises LockHeldError when another process has taken the lock."""
        holder = dict(self.holder, heartbeat_at=_iso(now()))
        try:
            self.generation = self.store.replace(self.name, json.dumps(holder).encode(), self.generation)
        except (ConflictError, NotFoundError):
            raise LockHeldError(f"the lock {self.uri} was taken over by another process (it judged this one "
                                "stale); stop this run: the other one computes the same units") from None
        self.holder = holder

    def __post_init__(self) -> None:
        _LIVE_LOCKS.add(self.uri)

    def release(self) -> bool:
        """Delete the lock if it is still ours; False when another process had taken it over."""
        if self.released:
            return True
        self.released = True
        _LIVE_LOCKS.discard(self.uri)  # even if the delete fails: this process no longer computes the run
        try:
            self.store.delete(self.name, self.generation)
            return True
        except ConflictError:
            return False

    def __enter__(self) -> "Lock":
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class RunStore:
    """The tables of one run under `{output}/{run_id}`.

    `shard_tables` are the tables a shard writes, in order; the last (`commit_table`) commits it and
    holds one row per unit with its `status` (a re-judging, `JudgingStore`, commits with `judged`)."""

    shard_tables: tuple[str, ...] = SHARD_TABLES
    commit_table = "samples"

    def __init__(self, store: Store, run_id: str, role: str = "driver", root: str | None = None) -> None:
        self.store = store
        self.run_id = run_id
        self._root = root or run_id
        self.writer = writer_identity(role)  # recorded in every file this process writes
        # shards committed in this invocation (by this process, or reported by their writers): name -> record
        self.committed: dict[str, Committed] = {}
        self._lock = threading.Lock()
        # shards whose commit file lists a file that is gone: {shard: the missing files} (by `done_units`)
        self.incomplete: dict[str, list[str]] = {}
        self._listed: dict[str, dict[str, int]] = {}  # {shard: its commit file's list}, from the last read

    @classmethod
    def open(cls, output: str, run_id: str, role: str = "driver") -> "RunStore":
        return cls(open_store(output), run_id, role)

    @classmethod
    def at(cls, run_uri: str) -> "RunStore":
        """Open an existing run by its URI (`{output}/{run_id}`)."""
        base, _, rid = run_uri.rstrip("/").rpartition("/")
        if not rid:
            raise StorageError(f"{run_uri!r} is not a run URI; give OUTPUT/RUN_ID as printed by `memloop run`")
        rs = cls(open_store(base or "."), rid)
        samples, runs = rs.store.list(f"{rid}/samples"), rs.store.list(f"{rid}/runs")
        if not samples and not runs:
            raise StorageError(f"{run_uri} holds no run (no samples/ or runs/ tables); check the URI printed by `memloop run`")
        if not samples:  # manifests but no outcomes: a partial copy, or a listing that came back empty
            units = sum(int(t.column("computed")[0].as_py() or 0) + int(t.column("failed")[0].as_py() or 0)
                        for t in (from_parquet(rs.store.get(n), rs._uri(n)) for n in runs if n.endswith(".parquet")))
            if units:
                raise DamagedRunError(
                    f"{run_uri} has no samples/ table although its runs/ manifests record {units} finished "
                    f"unit(s); the run directory is incomplete (a partial copy?): copy the whole run, or point at "
                    "the original")
            raise DamagedRunError(f"{run_uri} has no finished unit yet (no samples/ table); run its config with "
                                  "`memloop run` first")
        return rs

    @property
    def uri(self) -> str:
        return join_uri(self.store.uri, self._root)

    def judging_ids(self) -> list[str]:
        """The re-judgings of this run (`memloop rescore`), by judging id."""
        return self.store.children(self.name(JUDGINGS))

    def judging(self, judging_id: str) -> "JudgingStore":
        """The tables of one re-judging of this run (created by its first write)."""
        return JudgingStore(self.store, self.run_id, judging_id)

    def _uri(self, name: str) -> str:
        """The full URI of an object of the store (for messages)."""
        return join_uri(self.store.uri, name)

    def name(self, *parts: str) -> str:
        return "/".join((self._root, *parts))

    def check_writable(self) -> None:
        """Write and delete a probe object, so an unwritable output fails before any work starts; in a
        directory, each table's folder must be a folder (a file there fails every shard's write)."""
        probe = self.name(f".probe-{uuid.uuid4().hex[:8]}")
        try:
            self.store.put(probe, b"probe", mode="create")
            if isinstance(self.store, LocalStore):
                for table in RUN_FOLDERS:
                    self.store.check_folder(self.store.root / self.name(table))
        except StorageError as exc:
            raise StorageError(f"`output`: {exc}") from None
        self.store.delete(probe)

    def check_reachable(self) -> None:
        """What a dry run checks of the output without creating anything in a directory: a local
        output's nearest existing folder is a writable directory and no table folder is a file; a
        bucket is reachable and writable (a probe object is written and deleted)."""
        if not isinstance(self.store, LocalStore):
            self.check_writable()
            return
        run_dir = self.store.root / self.run_id
        for table in RUN_FOLDERS:
            try:
                self.store.check_folder(run_dir / table)
            except StorageError as exc:
                raise StorageError(f"`output`: {exc}") from None
        p = run_dir
        while not p.exists() and p != p.parent:
            p = p.parent
        if not p.is_dir():
            raise StorageError(f"`output`: {p} is not a directory; choose a writable `output`")
        if not os.access(p, os.W_OK | os.X_OK):
            raise StorageError(f"`output`: {p} is not writable by this user; choose a writable `output`")

    # the run lock ---------------------------------------------------------------------------

    def acquire_lock(self, owner: str, *, stale_after_s: float | None = None) -> Lock:
        """Take the run's lock (`{run}/.lock`, created create-only) or raise LockHeldError naming the
        holder. A lock whose last heartbeat (`Lock.refresh`) is older than `stale_after_s` seconds is
        taken over with a generation-matched replace, so of two processes breaking the same stale
        lock exactly one wins. With `stale_after_s=None` a lock is never judged stale."""
        name = self.name(LOCK_NAME)
        lock_uri = join_uri(self.store.uri, name)
        t = _iso(now())
        holder = {"owner": owner, "host": socket.gethostname(), "pid": os.getpid(), "pid_ns": _pid_namespace(),
                  "acquired_at": t, "heartbeat_at": t}
        data = json.dumps(holder).encode()
        for _ in range(3):  # the lock may be released between our create and our read
            try:
                return Lock(self.store, name, lock_uri, holder, self.store.put(name, data, mode="create"))
            except ConflictError:
                pass
            try:
                raw, gen = self.store.read(name)
            except NotFoundError:
                continue
            unreadable = None  # why the lock object does not say who holds it
            try:
                current = json.loads(raw)
                if not isinstance(current, dict):
                    unreadable, current = f"a JSON {type(current).__name__}, not an object", {}
            except ValueError as exc:
                unreadable, current = f"not JSON: {str(exc)[:80]}", {}
            if unreadable:
                current = {"owner": "(unreadable lock object)", "heartbeat_at": None}
            dead = _holder_is_dead(current, lock_uri)
            if dead or (stale_after_s is not None and _age_s(current.get("heartbeat_at")) > stale_after_s):
                why = ("its process is gone from this host" if dead and current.get("pid") != os.getpid()
                       else "its invocation in this process has ended" if dead
                       else f"it is unreadable ({unreadable}), so it names no holder and no heartbeat" if unreadable
                       else "it records no heartbeat" if not current.get("heartbeat_at")
                       else f"its last heartbeat is over {stale_after_s:g} s old")
                try:
                    return Lock(self.store, name, lock_uri, holder, self.store.replace(name, data, gen),
                                took_over=current, took_over_why=why)
                except (ConflictError, NotFoundError):
                    continue
            raise LockHeldError(
                f"run {self.uri} is being computed by {current.get('owner')!r} (host {current.get('host')}, "
                f"pid {current.get('pid')}, since {current.get('acquired_at')}, last heartbeat "
                f"{current.get('heartbeat_at')}); wait for it to finish, or if that process is gone delete "
                f"{lock_uri}", holder=current)
        raise LockHeldError(f"the lock {lock_uri} keeps changing hands; another process is taking it", holder={})

    # writing -------------------------------------------------------------------------------

    def write_shard(self, tables: dict[str, list[dict[str, Any]]]) -> str:
        """Write one shard of per-unit rows; the commit table (`samples`) goes last and commits the shard."""
        if not tables.get(self.commit_table):
            raise ValueError(f"a shard needs at least one {self.commit_table} row (the commit record)")
        shard = new_shard_name()
        files = [(f, len(tables[t])) for t in self.shard_tables[:-1]
                 if (f := self.write_part(shard, t, tables.get(t, ()))) is not None]
        self.commit(shard, tables[self.commit_table], files)
        return shard

    def write_part(self, shard: str, table: str, rows: Iterable[dict[str, Any]], part: str | None = None,
                   mode: WriteMode = "create") -> str | None:
        """Write a shard's `table` rows (or one `part` of them) before its commit; returns the
        run-relative file name, None when there are no rows. Invisible until `commit`."""
        rows = list(rows)
        if not rows:
            return None
        if table == self.commit_table:
            raise ValueError(f"the {table} rows are the commit record: write them with `commit`")
        rel = part_file(table, shard, part)
        t = pa.Table.from_pylist([dict(r, run_id=self.run_id, shard=shard) for r in rows], schema=SCHEMAS[table])
        self.store.put(self.name(rel), _table_bytes(t, self.writer), mode=mode)
        return rel

    def commit(self, shard: str, samples: list[dict[str, Any]], files: Iterable[tuple[str, int]],
               error: str | None = None, keep: bool = True) -> Committed:
        """Write the shard's `samples` file (create-only), after every file in `files` (run-relative
        names and their rows) landed: from now on readers see the shard whole. `keep`: count it in
        this process's index (a worker, which reports it to the driver instead, does not)."""
        if not samples:
            raise ValueError(f"a shard needs at least one {self.commit_table} row (the commit record)")
        files = list(files)
        t = pa.Table.from_pylist([dict(r, run_id=self.run_id, shard=shard) for r in samples],
                                 schema=SCHEMAS[self.commit_table])
        rel = part_file(self.commit_table, shard)
        self.store.put(self.name(rel), _table_bytes(t, self.writer, dict(files)), mode="create")
        per_table: dict[str, int] = {self.commit_table: t.num_rows}
        for f, n in files:
            per_table[f.split("/", 1)[0]] = per_table.get(f.split("/", 1)[0], 0) + n
        c = Committed(shard, tuple(zip(t.column("unit").to_pylist(), t.column("status").to_pylist())),
                      max(per_table.values()), tuple(f for f, _ in files) + (rel,), error)
        if keep:
            self.record(c)
        return c

    def record(self, c: Committed) -> None:
        """Count a shard committed in this invocation (by this process or reported by its writer)
        in the unit index and the compaction."""
        with self._lock:
            self.committed[c.shard] = c

    def writer_of(self, rel: str) -> dict[str, Any]:
        """The process that wrote a run file (`{table}/{name}.parquet`): host, pid and role."""
        meta = pq.read_metadata(pa.BufferReader(self.store.get(self.name(rel)))).metadata or {}
        return json.loads(meta[WRITER_KEY]) if WRITER_KEY in meta else {}

    def compact(self, target_rows: int) -> dict[str, int]:
        """Merge the small shards committed in this invocation into shards of up to `target_rows`
        rows (of their largest table); returns the shard counts before and after."""
        before = len(self.committed)
        group: list[str] = []
        rows = 0
        groups: list[list[str]] = []
        for shard in sorted(self.committed):
            n = self.committed[shard].rows
            if n >= target_rows:
                continue
            if group and rows + n > target_rows:
                groups.append(group)
                group, rows = [], 0
            group.append(shard)
            rows += n
        groups.append(group)
        for g in groups:
            if len(g) < 2:
                continue
            new = new_shard_name()
            merged: dict[str, pa.Table] = {}
            for table in self.shard_tables:
                parts = [conform(table, self._read_one(self.name(f)))
                         for s in g for f in self.committed[s].files if f.startswith(f"{table}/")]
                t = pa.concat_tables(parts) if parts else SCHEMAS[table].empty_table()
                merged[table] = t.set_column(t.schema.get_field_index("shard"), "shard",
                                             pa.array([new] * t.num_rows, pa.string()))
            files = [(f, merged[t].num_rows) for t in self.shard_tables[:-1]
                     if (f := self.write_part(new, t, merged[t].to_pylist())) is not None]
            self.commit(new, merged[self.commit_table].to_pylist(), files)
            for s in g:  # samples first: the old shard stops being visible before its parts go
                for f in reversed(self.committed[s].files):
                    self.store.delete(self.name(f))
                del self.committed[s]
        return {"before": before, "after": len(self.committed)}

    def write_index(self, invocation: str) -> None:
        """The units this process committed and their shards (what a resume reads)."""
        with self._lock:
            rows = [{"run_id": self.run_id, "unit": u, "shard": shard, "status": st}
                    for shard, c in sorted(self.committed.items()) for u, st in c.units]
        if rows:
            self.store.put(self.name("index", f"{invocation}.parquet"), to_parquet("index", rows, self.writer),
                           mode="create")

    def write_manifest(self, row: dict[str, Any]) -> None:
        row = dict(row, run_id=self.run_id)
        self.store.put(self.name("runs", f"{row['invocation']}.parquet"), to_parquet("runs", [row], self.writer),
                       mode="create")

    def put_file(self, rel: str, data: bytes) -> None:
        """A derived file (report.md, plots, compare outputs): rewritten by every report."""
        self.store.put(self.name(rel), data, mode="overwrite")

    # reading -------------------------------------------------------------------------------

    def _shard_names(self, table: str) -> dict[str, list[str]]:
        """{shard: its files of `table`} (a shard's own file and its parts, in name order)."""
        out: dict[str, list[str]] = {}
        for n in self.store.list(self.name(table)):
            if n.endswith(".parquet"):
                out.setdefault(shard_of(n.rsplit("/", 1)[-1][: -len(".parquet")]), []).append(n)
        return out

    def _read_one(self, name: str, columns: list[str] | None = None) -> pa.Table:
        return from_parquet(self.store.get(name), self._uri(name), columns)

    def _read_all(self, table: str, shards: Iterable[str] | None = None) -> pa.Table:
        names = self._shard_names(table)
        keep = names if shards is None else {s: names[s] for s in shards if s in names}
        parts = [self._read_one(n) for _, ns in sorted(keep.items()) for n in ns]
        if table == self.commit_table:
            for p in parts:
                files = (p.schema.metadata or {}).get(FILES_KEY)
                if files and p.num_rows:
                    self._listed[p.column("shard")[0].as_py()] = json.loads(files)
        if not parts:
            return SCHEMAS[table].empty_table()
        return pa.concat_tables([conform(table, p) for p in parts])

    def samples(self) -> pa.Table:
        """Committed unit outcomes, one row per unit (see `final_outcomes`)."""
        return final_outcomes(self._read_all(self.commit_table))

    def table(self, table: str) -> pa.Table:
        """A per-unit table restricted to the final outcome of each unit (see `final_outcomes`)."""
        if table == "runs":  # one row per invocation, not per unit
            return self._read_all("runs")
        winners = self.samples()
        if table == self.commit_table:
            return winners
        shards = set(winners.column("shard").to_pylist())
        self._check_listed(table, winners)
        return rows_of_outcomes(self._read_all(table, shards), winners)

    def _check_listed(self, table: str, winners: pa.Table) -> None:
        """Raise DamagedRunError naming the units whose final shard lists a `table` file that is gone:
        their outcome says ok while their rows are missing, so no table of the run would agree."""
        present = {n for ns in self._shard_names(table).values() for n in ns}
        gone = {shard: [f for f in self._listed.get(shard, {}) if f.startswith(f"{table}/")
                        and self.name(f) not in present] for shard in set(winners.column("shard").to_pylist())}
        gone = {shard: fs for shard, fs in gone.items() if fs}
        if not gone:
            return
        units = [u for u, shard in zip(winners.column("unit").to_pylist(), winners.column("shard").to_pylist())
                 if shard in gone]
        files = sorted(f for fs in gone.values() for f in fs)
        raise DamagedRunError(
            f"{self.uri}: the `{table}` rows of {len(units)} unit(s) are missing ({', '.join(units[:5])}"
            f"{f' and {len(units) - 5} more' if len(units) > 5 else ''}): their shards' {', '.join(files[:3])}"
            f"{' ...' if len(files) > 3 else ''} is gone; restore it from a copy of the run, or run the config "
            "again with `memloop run` (a resume computes units whose rows are missing)")

    def done_units(self) -> set[str]:
        """Units recorded done (`ok` or `n/a`) in a shard whose files are all there, from the unit indexes
        and the listing of committed shards; only shards no index covers (a killed invocation's) are
        opened, and only their unit and status columns. The shards counted on are checked by their
        footers: one with a file that is gone is not counted (its units are computed again, and
        `incomplete` names it); an unreadable file raises DamagedRunError naming every such file."""
        shards = self._shard_names(self.commit_table)
        units: dict[str, set[str]] = {}  # shard -> its done units
        covered: set[str] = set()
        for name in self.store.list(self.name("index")):
            if not name.endswith(".parquet"):
                continue
            t = self._read_one(name)
            for u, shard, st in zip(t.column("unit").to_pylist(), t.column("shard").to_pylist(),
                                    t.column("status").to_pylist()):
                if shard in shards:  # a shard that still exists (committed, not compacted away)
                    covered.add(shard)
                    if st in DONE_STATUSES:
                        units.setdefault(shard, set()).add(u)
        for shard, names in shards.items():
            if shard not in covered:
                for name in names:
                    t = self._read_one(name, columns=["unit", "status"])
                    units.setdefault(shard, set()).update(
                        u for u, st in zip(t.column("unit").to_pylist(), t.column("status").to_pylist())
                        if st in DONE_STATUSES)
        counted = {shard: shards[shard] for shard, us in units.items() if us}
        missing = self._check_shards(counted)
        done = set().union(*(us for shard, us in units.items() if shard not in missing))
        # a shard missing a file whose units are all done elsewhere (computed again already) is history
        self.incomplete = {shard: fs for shard, fs in missing.items() if not units[shard] <= done}
        return done

    def _check_shards(self, shards: dict[str, list[str]]) -> dict[str, list[str]]:
        """{shard: its listed files that are gone} of `shards` ({shard: its commit file names}), reading
        only footers; raises DamagedRunError naming every unreadable or short file."""
        from concurrent.futures import ThreadPoolExecutor

        present = {n for table in self.shard_tables[:-1] for ns in self._shard_names(table).values() for n in ns}

        def footer(name: str) -> pq.FileMetaData | str:
            try:
                return read_footer(self.store, name, self._uri(name))
            except NotFoundError:  # removed since the listing (a compaction): its listing is stale
                return f"{self._uri(name)} (gone while it was read)"
            except DamagedRunError as exc:
                return getattr(exc, "short", str(exc))

        with ThreadPoolExecutor(max_workers=16) as ex:
            commits = dict(zip([n for ns in shards.values() for n in ns],
                               ex.map(footer, [n for ns in shards.values() for n in ns])))
            expected: dict[str, tuple[str, int]] = {}  # file name -> (shard, rows)
            missing: dict[str, list[str]] = {}
            for shard, names in shards.items():
                for name in names:
                    meta = commits[name]
                    for rel, rows in ((listed_files(meta) or {}) if not isinstance(meta, str) else {}).items():
                        if self.name(rel) in present:
                            expected[self.name(rel)] = (shard, rows)
                        else:
                            missing.setdefault(shard, []).append(rel)
            damaged = [m for m in commits.values() if isinstance(m, str)]
            for name, meta in zip(expected, ex.map(footer, list(expected))):
                if isinstance(meta, str):
                    damaged.append(meta)
                elif meta.num_rows != expected[name][1]:
                    damaged.append(f"{self._uri(name)} (holds {meta.num_rows} rows, its shard's commit "
                                   f"records {expected[name][1]})")
        if damaged:
            raise DamagedRunError(
                f"{len(damaged)} file(s) of {self.uri} are damaged: {'; '.join(sorted(damaged)[:5])}"
                f"{' ...' if len(damaged) > 5 else ''}; restore them from a copy of the run, or delete them "
                "(a resume computes the units of a shard whose file is deleted again)")
        return missing


JUDGINGS = "judgings"


class JudgingStore(RunStore):
    """A re-judging of a run (`memloop rescore`) under `{run}/judgings/{judging_id}/`: `judgments` and
    `scores` rows carrying the judging id, committed by a `judged` row per unit, resumed from its own
    index, locked and recorded (`runs/`) as a run is. The run's own tables are never written."""

    shard_tables = ("judgments", "scores", "judged")
    commit_table = "judged"

    def __init__(self, store: Store, run_id: str, judging_id: str, role: str = "driver") -> None:
        super().__init__(store, run_id, role, root=f"{run_id}/{JUDGINGS}/{judging_id}")
        self.judging_id = judging_id


def new_shard_name() -> str:
    return f"{now().strftime('%Y%m%dT%H%M%S%f')}-{uuid.uuid4().hex[:8]}"


def _table_bytes(t: pa.Table, writer: dict[str, Any] | None = None, files: dict[str, int] | None = None) -> bytes:
    meta = dict(t.schema.metadata or {})
    if writer is not None:
        meta[WRITER_KEY] = json.dumps(writer).encode()
    if files is not None:
        meta[FILES_KEY] = json.dumps(files, sort_keys=True).encode()
    if meta:
        t = t.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(t, buf, compression="zstd")
    return buf.getvalue()


def _pid_namespace() -> int | None:
    """The inode of this process's PID namespace: two containers may share a host name, not this."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None


def _holder_is_dead(holder: dict[str, Any], lock_uri: str) -> bool:
    """True when the lock's holder ran on this host (same PID namespace) and its process is gone,
    e.g. a driver killed with kill -9, or it is this process and no longer holds it (its release
    failed during a storage outage): the lock can be taken over at once. A reused PID reads as
    alive, and a holder on another host is judged by its heartbeat only."""
    pid = holder.get("pid")
    if (holder.get("host") != socket.gethostname() or not isinstance(pid, int) or pid <= 0
            or holder.get("pid_ns") is None or holder.get("pid_ns") != _pid_namespace()):
        return False
    if pid == os.getpid():
        return lock_uri not in _LIVE_LOCKS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by another user
        return False
    return False


def _age_s(iso: str | None) -> float:
    if not iso:
        return float("inf")
    try:
        return (now() - dt.datetime.fromisoformat(iso)).total_seconds()
    except ValueError:
        return float("inf")
