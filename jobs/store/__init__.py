"""Where a run's results live: storage backends (local directories, gs://) with create-only
commits, the Parquet tables' schemas and the one place their rows are built, a unit's identity
(`units`), the `runs` manifest and provenance, the run lock, and `memloop export`.

The bottom floor: it imports only `jobs.errors` from jobs (never run, results, sim or commands),
so any floor can read and write a run's tables.
"""
