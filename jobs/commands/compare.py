"""`memloop compare A B [--json] [--out DIR] [--fail-if EXPR]`: deltas of run B against run A.

Exit codes: 0 compared (no --fail-if rule held), 4 a --fail-if rule held (a regression), 2 the runs
cannot be compared or a rule is malformed or names no metric (a usage error, as for every command).
"""
from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer


def compare_cmd(
    a: str = typer.Argument(..., help="The baseline run's URI (OUTPUT/RUN_ID)."),
    b: str = typer.Argument(..., help="The run to compare with it."),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object instead of Markdown."),
    out: Optional[str] = typer.Option(None, "--out", help="Where to write compare.md, compare.json and plots "
                                                         "(default: B/compare-A_RUN_ID/)."),
    fail_if: List[str] = typer.Option([], "--fail-if", help="Exit 4 when this holds for any row it names, e.g. "
                                                            "'f1.delta < -0.02' or 'booookscore.delta_hi < 0' (repeatable)."),
) -> None:
    """Per-metric deltas B − A on the shared units with paired bootstrap 95% intervals, and the config diff."""
    from jobs.results.compare import EXIT_REGRESSION, compare_runs, failing, load, parse_rule, to_markdown, write_comparison

    rules = [parse_rule(r) for r in fail_if]  # malformed rules fail before any reading
    ra, rb = load(a), load(b)
    c = compare_runs(ra, rb)
    c.failed_rules = failing(rules, c.rows)
    where = write_comparison(ra, rb, c, out)
    print(json.dumps(c.to_dict(), default=str) if as_json else to_markdown(c), flush=True)
    print(f"written to {where}", file=sys.stderr)
    if c.failed_rules:
        for t in c.failed_rules:
            print(f"regression: {t}", file=sys.stderr)
        raise SystemExit(EXIT_REGRESSION)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
