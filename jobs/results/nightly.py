"""`memloop nightly CONFIG...`: run every config, then compare each run with the previous night's.

One failing config never stops the others: each config is validated here first (a config that is
invalid is recorded and skipped), then run as its own `memloop run` process (a crash or an
out-of-memory kill ends only that run) with its output passed through. Each run that produced
results is compared with the latest earlier run of the same config `name` under the same output
(`memloop compare PREVIOUS THIS`, written to THIS/compare-PREVIOUS/), and the `--fail-if` rules are
checked on that comparison; a rule naming a metric the config does not produce is skipped for it.

Exit status: 0 every config ran and no rule held; 1 a config was invalid or its run exited non-zero;
4 (`memloop.jobs.results.compare.EXIT_REGRESSION`) every config ran but a rule held. The last stdout line is one
JSON object with every config's outcome.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from memloop.jobs.errors import JobsError

EXIT_FAILED = 1
RUN_ARGV = [
    sys.executable,
    "-c",
    "import sys; sys.argv[0] = 'memloop'; from memloop.jobs.commands.cli import main; main()",
    "run",
]


@dataclass
class Outcome:
    config: str
    status: str  # "ok" | "invalid" | "failed" | "regressed"
    rc: int | None = None  # the `memloop run` exit status
    run: str | None = None  # the run's URI
    previous: str | None = None  # the run it was compared with
    error: str | None = None
    regressions: list[str] = field(default_factory=list)


def _validate(path: Path) -> str:
    """The config's `name`, or a JobsError saying what is wrong (before any process starts)."""
    from memloop.jobs.run.config import load_config
    from memloop.jobs.run.plan import check_config

    cfg = load_config(path)
    check_config(cfg)
    return cfg.name


def _run(path: Path, extra: list[str], log: Callable[[str], None]) -> tuple[int, str | None]:
    """Run one config as its own process; its stdout is passed through and scanned for the run URI."""
    uri = None
    with subprocess.Popen([*RUN_ARGV, str(path), *extra], stdout=subprocess.PIPE, text=True, bufsize=1) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            log(line.rstrip("\n"))
            if line.startswith("output: "):
                uri = line[len("output: ") :].strip()
    return proc.returncode, uri


def _manifest_rows(store, run_dir: str) -> list[dict]:
    from memloop.jobs.store.run_store import RunStore

    try:
        return RunStore(store, run_dir).table("runs").to_pylist()
    except (JobsError, OSError, ValueError):
        return []


def previous_run(run_uri: str, name: str) -> str | None:
    """The URI of the latest run of config `name` under the same output, other than `run_uri`, that
    finished before this run's first invocation started."""
    from memloop.jobs.store.outputs import join_uri, open_store

    base, _, rid = run_uri.rstrip("/").rpartition("/")
    store = open_store(base)
    mine = _manifest_rows(store, rid)
    started = min((r["started_at"] for r in mine), default=None)
    best = None
    for child in store.children(""):
        if child == rid:
            continue
        for r in _manifest_rows(store, child):
            if json.loads(r.get("config_json") or "{}").get("name") != name:
                continue
            if started is not None and r["finished_at"] is not None and r["finished_at"] >= started:
                continue
            if best is None or r["finished_at"] > best[0]:
                best = (r["finished_at"], child)
    return join_uri(base, best[1]) if best else None


def compare_with_previous(run_uri: str, name: str, rules: list[str]) -> tuple[str | None, list[str]]:
    """(the previous run's URI, the rules that hold on PREVIOUS -> THIS); writes the comparison."""
    from memloop.jobs.results.compare import compare_runs, failing, load, parse_rule, write_comparison

    parsed = [parse_rule(r) for r in rules]
    prev = previous_run(run_uri, name)
    if prev is None:
        return None, []
    a, b = load(prev), load(run_uri)
    c = compare_runs(a, b)
    c.failed_rules = failing(parsed, c.rows, strict=False)
    write_comparison(a, b, c)
    if c.incomplete:  # a figure the rule cannot tell (infrastructure or judge failure): never a silent pass
        c.failed_rules.append(
            f"incomplete: {c.incomplete} unit(s) of the comparison have no result "
            "(infrastructure or judge failures; see the runs' samples and judgments)"
        )
    return prev, c.failed_rules


def run_nightly(
    configs: list[Path], rules: list[str], log: Callable[[str], None] = print, tag: str | None = None
) -> list[Outcome]:
    """Every config in order; `tag` is passed to `memloop run --tag` (a fresh run per night)."""
    from memloop.jobs.results.compare import parse_rule

    for r in rules:  # a malformed rule is a usage error before anything runs
        parse_rule(r)
    outcomes = []
    for path in configs:
        o = Outcome(str(path), "ok")
        outcomes.append(o)
        try:
            name = _validate(path)
        except Exception as exc:  # whatever fails here fails this config only
            o.status, o.error = "invalid", f"{type(exc).__name__}: {exc}"
            log(f"nightly: {path} is invalid, skipped: {o.error}")
            continue
        log(f"nightly: running {path}")
        o.rc, o.run = _run(path, ["--tag", tag] if tag else [], log)
        if o.rc != 0:
            o.status, o.error = "failed", f"`memloop run {path}` exited with status {o.rc}"
            log(f"nightly: {o.error}")
        if o.run is None:
            continue
        try:
            o.previous, o.regressions = compare_with_previous(o.run, name, rules)
        except Exception as exc:  # e.g. an unreadable previous run: recorded, the night goes on
            o.error = (o.error + "; " if o.error else "") + f"compare: {type(exc).__name__}: {exc}"
            o.status = "failed"
            log(f"nightly: {path}: cannot compare with the previous run: {exc}")
            continue
        if o.regressions:
            o.status = "failed" if o.status == "failed" else "regressed"
            for t in o.regressions:
                log(f"nightly: {path}: regression against {o.previous}: {t}")
    return outcomes


def exit_status(outcomes: list[Outcome]) -> int:
    from memloop.jobs.results.compare import EXIT_REGRESSION

    if any(o.status in ("invalid", "failed") for o in outcomes):
        return EXIT_FAILED
    return EXIT_REGRESSION if any(o.status == "regressed" for o in outcomes) else 0


def summary_json(outcomes: list[Outcome]) -> str:
    return json.dumps({"configs": [asdict(o) for o in outcomes], "status": exit_status(outcomes)})
