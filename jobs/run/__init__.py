"""Executing a run: the run config and plan, the workload of units, the Ray driver, the worker pool
and the method loops, engine actors and the LLM adapters, judge dispatch, signals and progress.

It may import `memloop.jobs.store` (to write what it computes) and never `memloop.jobs.results`, `memloop.jobs.sim` or
`memloop.jobs.commands`: what sits above plugs in through the interfaces run exposes (engine handles, the
paper-table name registry in `run.config`), never by being known here.
"""
