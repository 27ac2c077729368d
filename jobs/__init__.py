"""memloop jobs: runs of memory-loop methods at scale, their stored results, and what is made of them.

Five floors, each a sub-package whose docstring says what it owns and what it may import (enforced
by the import contracts in pyproject.toml): `store` (bottom: storage, table schemas, manifest, lock,
export) < `run` (executing a run) < `results` and `sim` (reading results; simulating scale) <
`commands` (the thin CLI). `memloop.jobs.errors` is the error root every floor shares.
"""
