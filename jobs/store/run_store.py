"""The run store: the Parquet tables of one run (`RunStore`) or of a re-judging of it (`JudgingStore`),
in any object store (a local directory or gs://bucket/prefix), written shard by shard and read back
with one outcome per unit (`final_outcomes`).

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

A shard's parts and the files' metadata are `memloop.jobs.store.run_files`. The driver learns of a shard
another process committed from its `Committed` record (`RunStore.record`), which is what its unit
index lists. A re-run skips units already recorded as `ok`; failed units are tried again and
`final_outcomes` picks one row per unit when reading. It learns which units are done from the
invocations' unit indexes and the listing of `samples/`, reading (two columns of) only those shards
no index covers (an invocation that was killed before writing its index).

Compaction (`RunStore.compact`, its policy in `memloop.jobs.store.compaction`) merges an invocation's small
shards at its end. The object stores under a run (a directory, gs://) and their write modes are
`memloop.jobs.store.objects`, `local`, `gcs` and `outputs`; the run's lock is `memloop.jobs.store.lock`.
"""

from __future__ import annotations

import json
import os
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.parquet as pq
from memloop.jobs.errors import StorageError
from memloop.jobs.store.compaction import merged_table, small_shard_groups
from memloop.jobs.store.local import LocalStore
from memloop.jobs.store.lock import LOCK_NAME, Lock, acquire_lock, live_holder
from memloop.jobs.store.objects import ConflictError, NotFoundError, Store, WriteMode
from memloop.jobs.store.outputs import join_uri, open_store
from memloop.jobs.store.run_files import (
    FILES_KEY,
    RUN_FOLDERS,
    SHARD_TABLES,
    WRITER_KEY,
    Committed,
    DamagedRunError,
    from_parquet,
    listed_files,
    new_shard_name,
    part_file,
    read_verified,
    shard_of,
    table_bytes,
    to_parquet,
    writer_identity,
)
from memloop.jobs.store.tables import SCHEMAS, conform

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
        # shards of earlier invocations found whole by `done_units` (their done units, rows and files): a later
        # invocation's compaction merges the small ones too, so one that failed (a full disk) is made up
        self.prior: dict[str, Committed] = {}

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
            raise StorageError(
                f"{run_uri} holds no run (no samples/ or runs/ tables); check the URI printed by `memloop run`"
            )
        if not samples:  # manifests but no outcomes: a partial copy, or a listing that came back empty
            manifests = [from_parquet(rs.store.get(n), rs._uri(n)) for n in runs if n.endswith(".parquet")]
            units = sum(
                int(t.column("computed")[0].as_py() or 0) + int(t.column("failed")[0].as_py() or 0) for t in manifests
            )
            computed = sum(int(t.column("computed")[0].as_py() or 0) for t in manifests)
            causes = _recorded_causes(manifests)
            if units and not computed and causes:  # every unit failed and none was written: name why
                raise DamagedRunError(
                    f"{run_uri}: every one of its {units} finished unit(s) failed and none was recorded; the "
                    f"cause: {causes[0]}"
                    + (f" (and {len(causes) - 1} other error(s))" if len(causes) > 1 else "")
                    + "; fix it (e.g. fewer engine actors or a smaller model for an out-of-memory kill) and run "
                    "the config again"
                )
            if units:
                raise DamagedRunError(
                    f"{run_uri} has no samples/ table although its runs/ manifests record {units} finished "
                    f"unit(s); the run directory is incomplete (a partial copy?): copy the whole run, or point at "
                    "the original"
                )
            raise DamagedRunError(
                f"{run_uri} has no finished unit yet (no samples/ table); run its config with `memloop run` first"
            )
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
        holder; a lock whose heartbeat is older than `stale_after_s` seconds, or whose holder is gone
        from this host, is taken over by exactly one process (`memloop.jobs.store.lock.acquire_lock`)."""
        name = self.name(LOCK_NAME)
        return acquire_lock(
            self.store, name, join_uri(self.store.uri, name), self.uri, owner, stale_after_s=stale_after_s
        )

    def computing(self) -> dict[str, Any] | None:
        """The holder of the run's lock while it computes the run now (owner, host, pid, heartbeat), else None:
        what a reader of the tables must know, since they are then partial."""
        name = self.name(LOCK_NAME)
        return live_holder(self.store, name, join_uri(self.store.uri, name))

    # writing -------------------------------------------------------------------------------

    def write_shard(self, tables: dict[str, list[dict[str, Any]]]) -> str:
        """Write one shard of per-unit rows; the commit table (`samples`) goes last and commits the shard."""
        if not tables.get(self.commit_table):
            raise ValueError(f"a shard needs at least one {self.commit_table} row (the commit record)")
        shard = new_shard_name()
        files = [
            (f, len(tables[t]))
            for t in self.shard_tables[:-1]
            if (f := self.write_part(shard, t, tables.get(t, ()))) is not None
        ]
        self.commit(shard, tables[self.commit_table], files)
        return shard

    def write_part(
        self,
        shard: str,
        table: str,
        rows: Iterable[dict[str, Any]],
        part: str | None = None,
        mode: WriteMode = "create",
    ) -> str | None:
        """Write a shard's `table` rows (or one `part` of them) before its commit; returns the
        run-relative file name, None when there are no rows. Invisible until `commit`."""
        rows = list(rows)
        if not rows:
            return None
        if table == self.commit_table:
            raise ValueError(f"the {table} rows are the commit record: write them with `commit`")
        rel = part_file(table, shard, part)
        t = pa.Table.from_pylist([dict(r, run_id=self.run_id, shard=shard) for r in rows], schema=SCHEMAS[table])
        self.store.put(self.name(rel), table_bytes(t, self.writer), mode=mode)
        return rel

    def commit(
        self,
        shard: str,
        samples: list[dict[str, Any]],
        files: Iterable[tuple[str, int]],
        error: str | None = None,
        keep: bool = True,
    ) -> Committed:
        """Write the shard's `samples` file (create-only), after every file in `files` (run-relative
        names and their rows) landed: from now on readers see the shard whole. `keep`: count it in
        this process's index (a worker, which reports it to the driver instead, does not)."""
        if not samples:
            raise ValueError(f"a shard needs at least one {self.commit_table} row (the commit record)")
        files = list(files)
        t = pa.Table.from_pylist(
            [dict(r, run_id=self.run_id, shard=shard) for r in samples], schema=SCHEMAS[self.commit_table]
        )
        rel = part_file(self.commit_table, shard)
        try:
            self.store.put(self.name(rel), table_bytes(t, self.writer, dict(files)), mode="create")
        except ConflictError:
            # A commit run again after its process died past the write (Ray re-runs a commit task whose
            # worker its memory monitor killed) finds its own file: the shard is committed. Anything
            # else under the shard's unique name is not this commit's, and stays an error.
            if not self._same_commit(self.name(rel), t):
                raise
        per_table: dict[str, int] = {self.commit_table: t.num_rows}
        for f, n in files:
            per_table[f.split("/", 1)[0]] = per_table.get(f.split("/", 1)[0], 0) + n
        c = Committed(
            shard,
            tuple(zip(t.column("unit").to_pylist(), t.column("status").to_pylist())),
            max(per_table.values()),
            tuple(f for f, _ in files) + (rel,),
            error,
        )
        if keep:
            self.record(c)
        return c

    def _same_commit(self, name: str, t: pa.Table) -> bool:
        """Whether the commit file `name` holds exactly the commit rows `t` (units and statuses)."""
        cols = ["unit", "status", "shard"]
        return self._read_one(name, cols).select(cols).to_pylist() == t.select(cols).to_pylist()

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
        rows (of their largest table), each merged shard committed before its old shards go
        (`memloop.jobs.store.compaction`); returns the shard counts before and after."""
        shards = {**self.prior, **self.committed}
        before = len(shards)
        for group in small_shard_groups(shards, target_rows):
            new = new_shard_name()
            merged = {
                table: merged_table(
                    table,
                    [self._read_one(self.name(f)) for s in group for f in shards[s].files if f.startswith(f"{table}/")],
                    new,
                )
                for table in self.shard_tables
            }
            files = [
                (f, merged[t].num_rows)
                for t in self.shard_tables[:-1]
                if (f := self.write_part(new, t, merged[t].to_pylist())) is not None
            ]
            self.commit(new, merged[self.commit_table].to_pylist(), files)
            for s in group:  # samples first: the old shard stops being visible before its parts go
                for f in reversed(shards[s].files):
                    self.store.delete(self.name(f))
                self.committed.pop(s, None)
                self.prior.pop(s, None)
                del shards[s]
            shards[new] = self.committed[new]
        return {"before": before, "after": len(shards)}

    def compactable(self, target_rows: int) -> bool:
        """Whether earlier invocations left small shards that a compaction would merge (`prior`, after
        `done_units`): a rerun with nothing to compute then still compacts them."""
        return bool(small_shard_groups(self.prior, target_rows))

    def remove_orphans(self) -> list[str]:
        """Delete the files of shards that were never committed (their writer was killed between a shard's parts
        and its commit, e.g. kill -9 of the driver): invisible to every reader, they only take space. Call with
        the run's lock held, before this invocation writes. Returns the names deleted."""
        committed = set(self._shard_names(self.commit_table))
        if not committed:  # an empty listing proves nothing (a glitch, a table folder out of reach): keep all
            return []
        for name in self.store.list(self.name("index")):  # shards an index names were committed
            if name.endswith(".parquet"):
                committed.update(self._read_one(name, columns=["shard"]).column("shard").to_pylist())
        gone = [
            n
            for table in self.shard_tables[:-1]
            for shard, names in self._shard_names(table).items()
            if shard not in committed
            for n in names
        ]
        for name in gone:
            self.store.delete(name)
        return gone

    def write_index(self, invocation: str) -> None:
        """The units this process committed and their shards (what a resume reads)."""
        with self._lock:
            rows = [
                {"run_id": self.run_id, "unit": u, "shard": shard, "status": st}
                for shard, c in sorted(self.committed.items())
                for u, st in c.units
            ]
        if rows:
            self.store.put(
                self.name("index", f"{invocation}.parquet"), to_parquet("index", rows, self.writer), mode="create"
            )

    def write_manifest(self, row: dict[str, Any]) -> None:
        row = dict(row, run_id=self.run_id)
        self.store.put(
            self.name("runs", f"{row['invocation']}.parquet"), to_parquet("runs", [row], self.writer), mode="create"
        )

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
        gone = {
            shard: [f for f in self._listed.get(shard, {}) if f.startswith(f"{table}/") and self.name(f) not in present]
            for shard in set(winners.column("shard").to_pylist())
        }
        gone = {shard: fs for shard, fs in gone.items() if fs}
        if not gone:
            return
        units = [
            u
            for u, shard in zip(winners.column("unit").to_pylist(), winners.column("shard").to_pylist())
            if shard in gone
        ]
        files = sorted(f for fs in gone.values() for f in fs)
        raise DamagedRunError(
            f"{self.uri}: the `{table}` rows of {len(units)} unit(s) are missing ({', '.join(units[:5])}"
            f"{f' and {len(units) - 5} more' if len(units) > 5 else ''}): their shards' {', '.join(files[:3])}"
            f"{' ...' if len(files) > 3 else ''} is gone; restore it from a copy of the run, or run the config "
            "again with `memloop run` (a resume computes units whose rows are missing)"
        )

    def done_units(self) -> set[str]:
        """Units recorded done (`ok` or `n/a`) in a shard whose files are all there, from the unit indexes
        and the listing of committed shards; only shards no index covers (a killed invocation's) are
        opened for their unit and status columns. The shards counted on are checked whole: each file is
        read and every page checked against its CRC (`read_verified`); one with a file that is gone is
        not counted (its units are computed again, and `incomplete` names it); a file that is cut short,
        overwritten or holds other rows than its commit records raises DamagedRunError naming every
        such file."""
        shards = self._shard_names(self.commit_table)
        units: dict[str, set[str]] = {}  # shard -> its done units
        covered: set[str] = set()
        for name in self.store.list(self.name("index")):
            if not name.endswith(".parquet"):
                continue
            t = self._read_one(name)
            for u, shard, st in zip(
                t.column("unit").to_pylist(), t.column("shard").to_pylist(), t.column("status").to_pylist()
            ):
                if shard in shards:  # a shard that still exists (committed, not compacted away)
                    covered.add(shard)
                    if st in DONE_STATUSES:
                        units.setdefault(shard, set()).add(u)
        for shard, names in shards.items():
            if shard not in covered:
                for name in names:
                    t = self._read_one(name, columns=["unit", "status"])
                    units.setdefault(shard, set()).update(
                        u
                        for u, st in zip(t.column("unit").to_pylist(), t.column("status").to_pylist())
                        if st in DONE_STATUSES
                    )
        counted = {shard: shards[shard] for shard, us in units.items() if us}
        listed: dict[str, dict[str, int]] = {}
        missing = self._check_shards(counted, listed)
        done = set().union(*(us for shard, us in units.items() if shard not in missing))
        root = self.name("")
        self.prior = {}
        for shard, names in counted.items():
            if shard in missing or len(names) != 1:  # a commit is one file; anything else is left as it is
                continue
            own = names[0][len(root) :]
            parts = listed.get(shard, {})
            self.prior[shard] = Committed(
                shard,
                tuple((u, "ok") for u in sorted(units[shard])),
                max([len(units[shard]), *parts.values()]),
                (*parts, own),
            )
        # a shard missing a file whose units are all done elsewhere (computed again already) is history
        self.incomplete = {shard: fs for shard, fs in missing.items() if not units[shard] <= done}
        return done

    def _check_shards(
        self, shards: dict[str, list[str]], listed: dict[str, dict[str, int]] | None = None
    ) -> dict[str, list[str]]:
        """{shard: its listed files that are gone} of `shards` ({shard: its commit file names}), reading
        each file whole with its page checksums, and into `listed` each shard's files and their rows as its
        commit lists them; raises DamagedRunError naming every unreadable, overwritten or short file."""
        present = {n for table in self.shard_tables[:-1] for ns in self._shard_names(table).values() for n in ns}

        def verified(name: str) -> pq.FileMetaData | str:
            try:
                return read_verified(self.store, name, self._uri(name))
            except NotFoundError:  # removed since the listing (a compaction): its listing is stale
                return f"{self._uri(name)} (gone while it was read)"
            except DamagedRunError as exc:
                return getattr(exc, "short", str(exc))

        with ThreadPoolExecutor(max_workers=16) as ex:
            commits = dict(
                zip(
                    [n for ns in shards.values() for n in ns],
                    ex.map(verified, [n for ns in shards.values() for n in ns]),
                )
            )
            expected: dict[str, tuple[str, int]] = {}  # file name -> (shard, rows)
            missing: dict[str, list[str]] = {}
            for shard, names in shards.items():
                for name in names:
                    meta = commits[name]
                    for rel, rows in ((listed_files(meta) or {}) if not isinstance(meta, str) else {}).items():
                        if listed is not None:
                            listed.setdefault(shard, {})[rel] = rows
                        if self.name(rel) in present:
                            expected[self.name(rel)] = (shard, rows)
                        else:
                            missing.setdefault(shard, []).append(rel)
            damaged = [m for m in commits.values() if isinstance(m, str)]
            for name, meta in zip(expected, ex.map(verified, list(expected))):
                if isinstance(meta, str):
                    damaged.append(meta)
                elif meta.num_rows != expected[name][1]:
                    damaged.append(
                        f"{self._uri(name)} (holds {meta.num_rows} rows, its shard's commit "
                        f"records {expected[name][1]})"
                    )
        if damaged:
            raise DamagedRunError(
                f"{len(damaged)} file(s) of {self.uri} are damaged: {'; '.join(sorted(damaged)[:5])}"
                f"{' ...' if len(damaged) > 5 else ''}; restore them from a copy of the run, or delete them "
                "(a resume computes the units of a shard whose file is deleted again)"
            )
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


def _recorded_causes(manifests: list[Any]) -> list[str]:
    """The first errors the invocations' manifests recorded (`stats_json["first_errors"]`), newest last."""
    causes: list[str] = []
    for t in manifests:
        if "stats_json" not in t.column_names:
            continue
        try:
            stats = json.loads(t.column("stats_json")[0].as_py() or "{}")
        except ValueError:
            continue
        causes += [c for c in stats.get("first_errors", []) if c not in causes]
    return causes
