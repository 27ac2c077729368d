"""`memloop run CONFIG` and `memloop report RUN_URI`.

Exit codes of `memloop run`: 0 every unit computed; 3 some units failed (more than
`--max-failed-frac` of those attempted); 2 a config or usage error (nothing started); 130 interrupted.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

EXIT_FAILED_UNITS = 3


def run_cmd(
    config: Path = typer.Argument(..., help="YAML run config (see jobs/configs/)."),
    report: bool = typer.Option(False, "--report", help="Write and print the report when the run ends."),
    output: Optional[str] = typer.Option(None, "--output", help="Override the config's `output` (a directory or gs://bucket/prefix)."),
    tag: Optional[str] = typer.Option(None, "--tag", help="A tag hashed into the run id (e.g. the date): a run that must compute afresh."),
    limit: Optional[int] = typer.Option(None, "--limit", help="At most this many samples of every dataset (part of the run id)."),
    max_chunks: Optional[int] = typer.Option(None, "--max-chunks", help="At most the first N chunks of every sample (part of the run id)."),
    repeats: Optional[int] = typer.Option(None, "--repeats", help="Override the config's repeats (part of the run id)."),
    model: Optional[str] = typer.Option(None, "--model", help="The engine's weights: a model name (smollm2-135m, qwen2.5-coder-0.5b, ...) "
                                        "or a GGUF / Hugging Face path (part of the run id)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate everything and print the plan; start nothing."),
    max_failed_frac: float = typer.Option(0.0, "--max-failed-frac", min=0.0, max=1.0,
                                          help="Exit 0 when at most this fraction of the attempted units failed."),
    as_json: bool = typer.Option(False, "--json", help="Print only one JSON object on stdout (progress stays on stderr)."),
) -> None:
    """Run (or resume) a config: prints the run id and output URI, then one JSON line of counts."""
    from jobs.run.config import load_config, with_overrides

    cfg = with_overrides(load_config(config), str(config), output=output, tag=tag, limit=limit,
                         max_chunks=max_chunks, repeats=repeats, model=model)
    if dry_run:
        _dry_run(cfg, as_json)
        return
    from jobs.run.driver import execute

    def ready(rid: str, uri: str) -> None:
        if not as_json:
            print(f"run id: {rid}", flush=True)
            print(f"output: {uri}", flush=True)

    from jobs.run.signals import graceful_interrupts

    with graceful_interrupts():
        try:
            summary = execute(cfg, on_ready=ready)
        except KeyboardInterrupt:
            _stop_ray()
            print("interrupted: finished units are saved; run the same config again to resume", file=sys.stderr)
            raise SystemExit(130) from None
    code = summary.exit_code(max_failed_frac)
    if summary.failed:
        print(f"failed: {summary.failed} of {summary.computed + summary.failed} units computed in this invocation; "
              "first errors:", file=sys.stderr)
        for err in summary.first_errors():
            print(f"  {err[:500]}", file=sys.stderr)
    if summary.method_failed:
        print(f"method failed: {summary.method_failed} unit(s) whose steps all produced nothing (recorded as failed "
              "with their step outcomes; `memloop report` shows the method-health table); first causes:",
              file=sys.stderr)
        for err in summary.to_dict()["method_errors"][:3]:
            print(f"  {err[:500]}", file=sys.stderr)
    if report:
        from jobs.results.report import write_report

        _, rep = write_report(summary.output)
        if not as_json:
            print(rep.markdown, flush=True)
    print(json.dumps(dict(summary.to_dict(), exit_code=code)), flush=True)
    if code:
        raise SystemExit(code)


def _stop_ray() -> None:
    """Shut down the local Ray this process started (its raylet and agents), under the signal guard."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _dry_run(cfg, as_json: bool) -> None:
    """The plan of a run: its id, where it writes, and how many units it has (and has done)."""
    from collections import Counter

    from jobs.run.plan import make_plan
    from jobs.store.storage import RunStore

    plan = make_plan(cfg, dry_run=True)
    try:
        done = RunStore.open(cfg.output, plan.run_id).done_units()
    except Exception:  # an output not created yet, or unreachable: the real run will say which
        done = set()
    todo = [u for u in plan.units if u.key not in done]
    per = Counter((u.dataset.key, u.method.key) for u in plan.units)
    out = {"run_id": plan.run_id, "output": cfg.output, "units": len(plan.units), "done": len(plan.units) - len(todo),
           "to_compute": len(todo), "engine": plan.engine_config,
           "per_dataset_method": [{"dataset": d, "method": m, "units": n} for (d, m), n in sorted(per.items())],
           "unavailable": list(plan.unavailable)}
    if as_json:
        print(json.dumps(out, default=str))
        return
    print(f"run id: {plan.run_id}\noutput: {cfg.output}\nunits: {len(plan.units)} "
          f"({out['done']} already done, {len(todo)} to compute)")
    for row in out["per_dataset_method"]:
        print(f"  {row['dataset']:32s} {row['method']:24s} {row['units']:5d}")
    for msg in plan.unavailable:
        print(f"not counted, data not reachable here (the run needs it): {msg}")
    print("dry run: nothing started")


def report_cmd(
    run_uri: str = typer.Argument(..., help="The run's URI as printed by `memloop run` (OUTPUT/RUN_ID)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report's numbers as one JSON object instead."),
) -> None:
    """Write report.md and PNG plots next to the run's tables and print the Markdown (compare two runs
    with `memloop compare A B`)."""
    from jobs.results.report import headline, report_of

    _, data, rep = report_of(run_uri)
    if as_json:
        print(json.dumps(headline(data), default=float), flush=True)
        return
    print(rep.markdown, flush=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("report")(report_cmd)
