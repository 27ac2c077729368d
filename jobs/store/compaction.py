"""Compaction: at the end of an invocation its small shards are merged into shards of up to `shard_rows`
rows, so a finished run is read from a few files instead of one per flush.

This module decides which shards merge (`small_shard_groups`) and builds a group's merged tables
(`merged_table`); `RunStore.compact` writes them in the order that keeps every reader right: the
merged shard is committed first (its `samples` last), then the old shards are removed `samples`
first. A reader in between sees every unit twice with identical rows, which `final_outcomes`
resolves to one; a crash in between leaves only invisible files.
"""

from __future__ import annotations

from typing import Mapping

import pyarrow as pa
from memloop.jobs.store.run_files import Committed
from memloop.jobs.store.tables import SCHEMAS, conform


def small_shard_groups(committed: Mapping[str, Committed], target_rows: int) -> list[list[str]]:
    """Runs of consecutive shards (in name order) whose rows, of each one's largest table, add up to at
    most `target_rows`; only groups of two or more are worth merging, and a shard that large already
    stays as it is."""
    group: list[str] = []
    rows = 0
    groups: list[list[str]] = []
    for shard in sorted(committed):
        n = committed[shard].rows
        if n >= target_rows:
            continue
        if group and rows + n > target_rows:
            groups.append(group)
            group, rows = [], 0
        group.append(shard)
        rows += n
    groups.append(group)
    return [g for g in groups if len(g) >= 2]


def merged_table(table: str, parts: list[pa.Table], shard: str) -> pa.Table:
    """One table of a merged shard: the group's `parts` (each read as written, of any schema version)
    conformed to today's schema, concatenated, and labelled as the new `shard`."""
    conformed = [conform(table, t) for t in parts]
    t = pa.concat_tables(conformed) if conformed else SCHEMAS[table].empty_table()
    return t.set_column(t.schema.get_field_index("shard"), "shard", pa.array([shard] * t.num_rows, pa.string()))
