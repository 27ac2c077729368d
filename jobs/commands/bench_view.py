"""`memloop bench view`: server time of `memloop view`'s samples and unit pages on a large written run."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Optional

import typer


def bench_view(
    units: int = typer.Option(20000, "--units", min=1, help="Units in the written run."),
    output: Optional[Path] = typer.Option(
        None, "--output", help="Where to write the run (default: a temporary directory)."
    ),
    repeat: int = typer.Option(5, "--repeat", min=1, help="Renders per page (median and max reported)."),
) -> None:
    """Write a run of N units, load it as `memloop view` does, and time its pages (one JSON line)."""
    from memloop.jobs.results.view.bench import bench

    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(bench(output or Path(tmp), units, repeat)), flush=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("view")(bench_view)
