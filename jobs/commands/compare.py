"""`memloop compare A B [C ...] [--json] [--out DIR] [--fail-if EXPR]`: deltas of run B against run A;
with three runs or more, the runs side by side (`memloop.jobs.results.side_by_side`), each against A.

Exit codes: 0 compared (no --fail-if rule held), 4 a --fail-if rule held (a regression), 2 the runs
cannot be compared or a rule is malformed or names no metric (a usage error, as for every command).
"""

from __future__ import annotations

import json
import sys
from typing import List, Optional

import typer


def compare_cmd(
    runs: List[str] = typer.Argument(
        ..., help="The baseline run's URI (OUTPUT/RUN_ID), then the runs to compare with it."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as one JSON object instead of Markdown."),
    out: Optional[str] = typer.Option(
        None,
        "--out",
        help="Where to write compare.md, compare.json and plots "
        "(default: B/compare-A_RUN_ID/; three runs or more: "
        "A/side-by-side-HASH/).",
    ),
    fail_if: List[str] = typer.Option(
        [],
        "--fail-if",
        help="Exit 4 when this holds for any row it names, e.g. "
        "'f1.delta < -0.02' or 'booookscore.delta_hi < 0' (repeatable).",
    ),
) -> None:
    """Per-metric deltas B − A on the shared units with paired bootstrap 95% intervals, and the config diff;
    three runs or more (e.g. the runs of a config's `models:`) side by side, each run's delta against A."""
    from memloop.jobs.results.compare import (
        EXIT_REGRESSION,
        CompareError,
        compare_runs,
        failing,
        load,
        parse_rule,
        to_markdown,
        write_comparison,
    )

    rules = [parse_rule(r) for r in fail_if]  # malformed rules fail before any reading
    if len(runs) < 2:
        raise CompareError("give at least two run URIs: the baseline A, then the runs to compare with it")
    if len(runs) > 2:
        from memloop.jobs.results import side_by_side as sbs

        s = sbs.side_by_side([load(u) for u in runs])
        failed = [f"{label}: {t}" for label, rows in zip(s.labels[1:], s.pairs) for t in failing(rules, rows)]
        where = sbs.write(s, out)
        print(
            json.dumps(dict(s.to_dict(), failed_rules=failed), default=str) if as_json else sbs.to_markdown(s),
            flush=True,
        )
    else:
        ra, rb = load(runs[0]), load(runs[1])
        c = compare_runs(ra, rb)
        c.failed_rules = failed = failing(rules, c.rows)
        where = write_comparison(ra, rb, c, out)
        print(json.dumps(c.to_dict(), default=str) if as_json else to_markdown(c), flush=True)
    print(f"written to {where}", file=sys.stderr)
    if failed:
        for t in failed:
            print(f"regression: {t}", file=sys.stderr)
        raise SystemExit(EXIT_REGRESSION)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("compare")(compare_cmd)
