"""`memloop export RUN_URI [--to DIR|gs://…]`: the run's final tables in a hive layout for SQL engines."""
from __future__ import annotations

import json
from typing import Optional

import typer


def export_cmd(
    run_uri: str = typer.Argument(..., help="The run's URI as printed by `memloop run` (OUTPUT/RUN_ID)."),
    to: Optional[str] = typer.Option(None, "--to", help="Destination directory or gs://bucket/prefix "
                                                       "(default: OUTPUT/export, shared by the output's runs)."),
    force: bool = typer.Option(False, "--force", help="Replace the run's partition even when it holds more rows "
                                                      "than the run now has (otherwise refused: a damaged copy)."),
) -> None:
    """Write {table}/run_id=RUN/part-0.parquet with one row per unit (retries resolved); prints one JSON line."""
    from jobs.store.export import export_run

    res = export_run(run_uri, to, force=force)
    print(json.dumps({"run_id": res.run_id, "dest": res.dest, "rows": res.rows}), flush=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("export")(export_cmd)
