"""`memloop nightly CONFIG... [--fail-if EXPR]`: every config run, each compared with its previous night."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer


def nightly_cmd(
    configs: List[Path] = typer.Argument(..., help="Run configs, run in this order; one failing never stops the rest."),
    fail_if: List[str] = typer.Option(
        [],
        "--fail-if",
        help="A regression rule of `memloop compare` checked against "
        "the previous night's run of each config (repeatable).",
    ),
    tag: Optional[str] = typer.Option(
        None,
        "--tag",
        help="Passed to `memloop run --tag` (e.g. the date): a fresh run per night instead of resuming the last one.",
    ),
) -> None:
    """Run every config (one failure never stops the rest) and compare each run with the previous night's.

    Exit 0 all ran and nothing regressed, 1 a config was invalid or its run failed, 4 a --fail-if rule held."""
    from memloop.jobs.results.nightly import exit_status, run_nightly, summary_json

    outcomes = run_nightly(list(configs), list(fail_if), tag=tag)
    print(summary_json(outcomes), flush=True)
    status = exit_status(outcomes)
    if status:
        raise SystemExit(status)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("nightly")(nightly_cmd)
