"""`memloop export RUN_URI [--to DIR|gs://…] [--format parquet|inspect]`: the run's final tables in a
hive layout for SQL engines, or the run as Inspect AI eval logs for `inspect view`."""

from __future__ import annotations

import json
from typing import Optional

import typer
from memloop.jobs.errors import ConfigError

FORMATS = ("parquet", "inspect")


def export_cmd(
    run_uri: str = typer.Argument(..., help="The run's URI as printed by `memloop run` (OUTPUT/RUN_ID)."),
    to: Optional[str] = typer.Option(
        None,
        "--to",
        help="Destination directory or gs://bucket/prefix "
        "(default: OUTPUT/export, shared by the output's runs; "
        "inspect: RUN/inspect).",
    ),
    fmt: str = typer.Option(
        "parquet",
        "--format",
        help="parquet: {table}/run_id=RUN/part-0.parquet for SQL; "
        "inspect: one Inspect AI .eval log per (dataset, method).",
    ),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace the run's partition even when it holds more rows "
        "than the run now has (otherwise refused: a damaged copy).",
    ),
    allow_partial: bool = typer.Option(
        False,
        "--allow-partial",
        help="Export a run that is being computed now (otherwise refused: its tables are partial).",
    ),
) -> None:
    """Write the run's final tables (one row per unit, retries resolved) or its Inspect logs; prints one JSON line."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format {fmt!r}: use one of {', '.join(FORMATS)}")
    if fmt == "inspect":
        from memloop.jobs.results.inspect_log import export_inspect

        ins = export_inspect(run_uri, to, allow_partial=allow_partial)
        print(
            json.dumps(
                {
                    "run_id": ins.run_id,
                    "dest": ins.dest,
                    "logs": ins.logs,
                    "samples": ins.samples,
                    "partial": ins.partial,
                }
            ),
            flush=True,
        )
        return
    from memloop.jobs.store.export import export_run

    res = export_run(run_uri, to, force=force, allow_partial=allow_partial)
    print(json.dumps({"run_id": res.run_id, "dest": res.dest, "rows": res.rows, "partial": res.partial}), flush=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("export")(export_cmd)
