"""`memloop run CONFIG` and `memloop report RUN_URI`."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer


def run_cmd(
    config: Path = typer.Argument(..., help="YAML run config (see jobs/configs/)."),
    report: bool = typer.Option(False, "--report", help="Write and print the report when the run ends."),
    output: Optional[str] = typer.Option(None, "--output", help="Override the config's `output` (a directory or gs://bucket/prefix)."),
) -> None:
    """Run (or resume) a config: prints the run id and output URI, then one JSON line of counts."""
    from jobs.config import load_config, parse_config
    from jobs.driver import execute

    cfg = load_config(config)
    if output is not None:
        cfg = parse_config(dict(cfg.model_dump(), output=output), str(config))

    def ready(rid: str, uri: str) -> None:
        print(f"run id: {rid}", flush=True)
        print(f"output: {uri}", flush=True)

    try:
        summary = execute(cfg, on_ready=ready)
    except KeyboardInterrupt:
        print("interrupted: finished units are saved; run the same config again to resume", file=sys.stderr)
        raise SystemExit(130) from None
    if report:
        from jobs.report import write_report

        _, rep = write_report(summary.output)
        print(rep.markdown, flush=True)
    print(summary.to_json(), flush=True)


def report_cmd(
    run_uri: str = typer.Argument(..., help="The run's URI as printed by `memloop run` (OUTPUT/RUN_ID)."),
    compare: Optional[str] = typer.Option(None, "--compare", help="A second run's URI to show side by side."),
) -> None:
    """Write report.md and PNG plots next to the run's tables and print the Markdown."""
    from jobs.report import write_report

    uri, rep = write_report(run_uri, compare)
    print(rep.markdown, flush=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("report")(report_cmd)
