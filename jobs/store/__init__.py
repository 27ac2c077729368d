"""Where a run's results live: object stores (`objects`, the contract; `local`, `gcs`; `outputs`
opens one) with create-only commits, a run's files (`run_files`) and its tables shard by shard
(`run_store`, with `compaction`), the Parquet tables' schemas and the one place their rows are built
(`tables`), a unit's identity (`units`), the `runs` manifest and provenance, the run lock (`lock`,
held by `run_lock`), and `memloop export`.

The bottom floor: it imports only `memloop.jobs.errors` from jobs (never run, results, sim or commands),
so any floor can read and write a run's tables.
"""
