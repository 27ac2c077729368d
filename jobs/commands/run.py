"""`memloop run CONFIG` and `memloop report RUN_URI`.

Exit codes of `memloop run`: 0 every unit computed (units whose method produced nothing count as computed,
scored 0; the last stderr line names them and their share); 3 some units failed (more than
`--max-failed-frac` of those attempted), or with `--fail-on method` some units' method produced nothing; 4 the output's
storage failed (finished units written
before are kept; the summary says how many were not saved); 2 a config or usage error (nothing
started); 130 interrupted.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Callable, Optional

import typer

EXIT_FAILED_UNITS = 3


def use_ray_address(address: str | None) -> None:
    """`--address`: the Ray cluster this process joins (`memloop.jobs.run.actors.ensure_ray` reads RAY_ADDRESS)."""
    if address:
        os.environ["RAY_ADDRESS"] = address


def announce(id_label: str, as_json: bool, prefix: str = "") -> Callable[[str, str], None]:
    """The `on_ready` callback of a run or a re-judging: its id and output URI on stdout as soon as they
    are known (nothing under --json, whose one line comes at the end)."""

    def ready(ident: str, uri: str) -> None:
        if not as_json:
            print(f"{prefix}{id_label}: {ident}\noutput: {uri}", flush=True)

    return ready


def run_cmd(
    config: Path = typer.Argument(..., help="YAML run config (see jobs/configs/)."),
    report: bool = typer.Option(False, "--report", help="Write and print the report when the run ends."),
    output: Optional[str] = typer.Option(
        None, "--output", help="Override the config's `output` (a directory or gs://bucket/prefix)."
    ),
    tag: Optional[str] = typer.Option(
        None, "--tag", help="A tag hashed into the run id (e.g. the date): a run that must compute afresh."
    ),
    limit: Optional[int] = typer.Option(
        None, "--limit", help="At most this many samples of every dataset (part of the run id)."
    ),
    max_chunks: Optional[int] = typer.Option(
        None, "--max-chunks", help="At most the first N chunks of every sample (part of the run id)."
    ),
    repeats: Optional[int] = typer.Option(
        None, "--repeats", help="Override the config's repeats (part of the run id)."
    ),
    model: Optional[str] = typer.Option(
        None,
        "--model",
        help="The model under test, as Inspect names it: openai/NAME, "
        "vllm/NAME or sglang/NAME (an OpenAI-compatible server: --model-base-url or "
        "OPENAI_BASE_URL / VLLM_BASE_URL / SGLANG_BASE_URL; key from OPENAI_API_KEY ...), "
        "memloop/NAME or hf/OWNER/NAME (memloop's engine), or the engine's weights: a model "
        "name (smollm2-135m, qwen2.5-coder-0.5b, ...) or a GGUF / Hugging Face path "
        "(part of the run id).",
    ),
    model_base_url: Optional[str] = typer.Option(
        None, "--model-base-url", help="The server of an endpoint --model (e.g. http://127.0.0.1:8000/v1)."
    ),
    judge_model: Optional[str] = typer.Option(
        None,
        "--judge-model",
        help="The model LLM judges call, named like --model "
        "(openai/NAME, memloop/NAME, a model name or path: a judge engine of its "
        "own); `self` for the model under test (part of the run id).",
    ),
    judge_model_base_url: Optional[str] = typer.Option(
        None, "--judge-model-base-url", help="The server of an endpoint --judge-model."
    ),
    setting: list[str] = typer.Option(
        [],
        "-S",
        "--set",
        help="A config setting dotted.path=value, validated like the "
        "file (repeatable): -S sampling.temperature=0.2, "
        "-S methods.gu-json.options.max_tokens=64, -S judges.sumie.options.temperature=0 "
        "(part of the run id when it changes results).",
    ),
    temperature: Optional[float] = typer.Option(
        None, "--temperature", help="= -S sampling.temperature=T, for every method."
    ),
    max_tokens: Optional[int] = typer.Option(
        None, "--max-tokens", help="= -S sampling.max_tokens=N, for every method."
    ),
    seed: Optional[int] = typer.Option(None, "--seed", help="= -S seed=N: the base seed of the repeats."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Validate everything and print the plan; start nothing."),
    max_failed_frac: float = typer.Option(
        0.0,
        "--max-failed-frac",
        min=0.0,
        max=1.0,
        help="Exit 0 when at most this fraction of the attempted units failed.",
    ),
    fail_on: Optional[str] = typer.Option(
        None,
        "--fail-on",
        help="`method`: exit 3 also when units failed for "
        "their method (produced nothing; counted 0 in the means and exit 0 "
        "otherwise), for nightly jobs that want them to fail.",
    ),
    log_format: str = typer.Option(
        "parquet",
        "--log-format",
        help="`inspect`: also write Inspect AI `.eval` logs "
        "into OUTPUT/RUN_ID/inspect/ as the run goes (every 30 s and at the end), so "
        "`inspect view --log-dir` shows the run without `memloop export`.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print only one JSON object on stdout (progress stays on stderr)."
    ),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        help="The Ray cluster to join (host:port or ray://host:port; "
        "default RAY_ADDRESS, else a private local instance).",
    ),
) -> None:
    """Run (or resume) a config: prints the run id and output URI, then one JSON line of counts."""
    from memloop.jobs.run.config import load_config, model_configs, with_overrides

    use_ray_address(address)
    if fail_on not in (None, "method"):
        from memloop.jobs.errors import ConfigError

        raise ConfigError(f"--fail-on {fail_on!r}: the one value is `method` (units whose method produced nothing)")
    fail_on_method = fail_on == "method"
    if log_format not in ("parquet", "inspect"):
        from memloop.jobs.errors import ConfigError

        raise ConfigError(
            f"--log-format {log_format!r}: `parquet` (the run's tables, always written) or `inspect` "
            "(Inspect AI .eval logs as well)"
        )

    cfg = with_overrides(
        load_config(config),
        str(config),
        output=output,
        tag=tag,
        limit=limit,
        max_chunks=max_chunks,
        repeats=repeats,
        model=model,
        judge_model=judge_model,
        model_base_url=model_base_url,
        judge_model_base_url=judge_model_base_url,
        settings=setting,
        temperature=temperature,
        max_tokens=max_tokens,
        seed=seed,
    )
    if cfg.models:
        if log_format == "inspect":
            from memloop.jobs.errors import ConfigError

            raise ConfigError(
                "--log-format inspect writes one run's logs; a `models:` config runs several: "
                "`memloop export RUN --format inspect` each run it prints"
            )
        _run_models(model_configs(cfg), report, dry_run, max_failed_frac, as_json, fail_on_method)
        return
    if dry_run:
        _dry_run(cfg, as_json)
        return
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan
    from memloop.jobs.run.signals import graceful_interrupts

    ready = announce("run id", as_json)
    known: dict[str, str] = {}
    live: list = []  # the Inspect log writer, once the run's output is known
    if log_format == "inspect":
        from memloop.jobs.results.inspect_log import LiveInspectLogs, _inspect
        from memloop.jobs.results.sample_data import SampleData
        from memloop.jobs.run.describe import waiting_units

        _inspect()  # inspect_ai missing: said before the run starts

    def on_ready(ident: str, uri: str) -> None:
        known.update(run_id=ident, output=uri)
        ready(ident, uri)
        if log_format == "inspect":
            # the logs' inputs and gold: the samples the plan loaded, not loaded again; where the run describes
            # RepoQA needles at its start, reloaded with their new descriptions (`memloop.jobs.run.describe`)
            samples = None if waiting_units(plan.units) else SampleData.of_units(plan.units)
            live.append(LiveInspectLogs(uri, samples=samples).start())

    with graceful_interrupts():
        try:
            plan = make_plan(cfg)  # the run's one plan: datasets loaded, files digested, engine config built
            try:
                summary = execute(plan, on_ready=on_ready)
            finally:
                for writer in live:  # the logs of what was committed, an interrupted run's too
                    done = writer.stop()
                    where = done.dest if done else f"{known.get('output')}/inspect"
                    print(
                        f"inspect logs: {where} ({len(done.logs) if done else 0} log(s)"
                        f"{'; ' + writer.error if writer.error else ''}); `inspect view --log-dir {where}`",
                        file=sys.stderr,
                        flush=True,
                    )
        except KeyboardInterrupt:
            _stop_ray()
            print("interrupted: finished units are saved; run the same config again to resume", file=sys.stderr)
            if as_json:  # --json promises one object on stdout, an interrupted run's too
                print(json.dumps({**known, "interrupted": True, "exit_code": 130}), flush=True)
            raise SystemExit(130) from None
    code = summary.exit_code(max_failed_frac, fail_on_method)
    if summary.storage_error:
        print(
            f"stopped: the storage failed ({summary.storage_error[:500]}); {summary.computed + summary.failed} "
            f"finished unit(s) are saved, {summary.unsaved} were not; run the same config again to resume",
            file=sys.stderr,
        )
    if summary.failed or summary.incomplete:
        print(
            f"failed: {summary.failed} of {summary.computed + summary.failed} units computed in this invocation; "
            f"incomplete (infrastructure or judge failures, never tolerated): {summary.incomplete}; "
            "first errors:",
            file=sys.stderr,
        )
        for err in summary.first_errors():
            print(f"  {err[:500]}", file=sys.stderr)
    if summary.method_failed:
        print(
            f"method failed: {summary.method_failed} unit(s) whose steps all produced nothing (recorded as failed "
            "with their step outcomes; `memloop report` shows the method-health table); first causes:",
            file=sys.stderr,
        )
        for err in summary.to_dict()["method_errors"][:3]:
            print(f"  {err[:500]}", file=sys.stderr)
    if report and not summary.storage_error:
        from memloop.jobs.results.report import write_report

        _, rep = write_report(summary.output)
        if rep.not_written:
            print(f"note: {rep.not_written}", file=sys.stderr, flush=True)
        if not as_json:
            print(rep.markdown, flush=True)
    print(summary.final_line(), file=sys.stderr, flush=True)
    print(json.dumps(dict(summary.to_dict(), exit_code=code)), flush=True)
    if code:
        raise SystemExit(code)


def _run_models(
    cfgs: list, report: bool, dry_run: bool, max_failed_frac: float, as_json: bool, fail_on_method: bool = False
) -> None:
    """A config with `models:`: one run per model, one after the other in this invocation. Every
    model's plan is checked before the first run starts; each run resumes on its own (its run id), so
    running the config again resumes the set. Exit code: the worst of the runs'."""
    from memloop.jobs.run.plan import make_plan

    if dry_run:  # every model's plan; with --json one object, {"runs": [plan, ...]}
        plans = [_plan_summary(c) for c in cfgs]
        if as_json:
            print(json.dumps({"runs": plans}, default=str))
            return
        for c, out in zip(cfgs, plans):
            _print_plan(out, c.output)
        return
    from memloop.jobs.run.preflight import check_endpoints

    plans = []  # each model's plan, made once: checked here and run below
    for (
        c
    ) in cfgs:  # a bad model (missing weights, unset key, an endpoint that refuses) fails here, before any run computes
        plans.append(make_plan(c))
        check_endpoints(c, lambda m: print(m, file=sys.stderr))
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.signals import graceful_interrupts

    summaries = []
    with graceful_interrupts():
        for i, c in enumerate(cfgs):
            name = c.model.endpoint.model if c.model.endpoint else c.model.weights or "default"
            try:
                summaries.append(
                    execute(plans[i], on_ready=announce("run id", as_json, f"model {i + 1} of {len(cfgs)} ({name}): "))
                )
            except KeyboardInterrupt:
                _stop_ray()
                print(
                    f"interrupted during run {i + 1} of {len(cfgs)}: finished units are saved; run the same config "
                    "again to resume the set",
                    file=sys.stderr,
                )
                raise SystemExit(130) from None
    codes = [s.exit_code(max_failed_frac, fail_on_method) for s in summaries]
    for s in summaries:
        for err in s.first_errors():
            print(f"  {s.run_id}: {err[:500]}", file=sys.stderr)
        print(s.final_line(), file=sys.stderr)
    if report:
        from memloop.jobs.results.report import write_report
        from memloop.jobs.results.side_by_side import write_side_by_side

        for s in summaries:
            write_report(s.output)
        where, md = write_side_by_side([s.output for s in summaries])
        if not as_json:
            print(md, flush=True)
        print(f"models side by side: {where}", file=sys.stderr)
    worst = max(codes)
    print(
        json.dumps({"runs": [dict(s.to_dict(), exit_code=c) for s, c in zip(summaries, codes)], "exit_code": worst}),
        flush=True,
    )
    if worst:
        raise SystemExit(worst)


def _stop_ray() -> None:
    """Shut down the local Ray this process started (its raylet and agents), under the signal guard."""
    import ray

    if ray.is_initialized():
        ray.shutdown()


def _dry_run(cfg, as_json: bool) -> None:
    """The plan of a run: its id, where it writes, and how many units it has (and has done)."""
    out = _plan_summary(cfg)
    if as_json:
        print(json.dumps(out, default=str))
        return
    _print_plan(out, cfg.output)


def _plan_summary(cfg) -> dict:
    """A run's plan as data: its id, output, units (done / to compute) per dataset and method."""
    from collections import Counter

    from memloop.jobs.run.describe import waiting_units
    from memloop.jobs.run.plan import make_plan
    from memloop.jobs.run.preflight import check_endpoints
    from memloop.jobs.store.run_store import RunStore

    plan = make_plan(cfg, dry_run=True)
    rs = RunStore.open(cfg.output, plan.run_id)  # an unsupported scheme or a gs:// without bucket fails here
    rs.check_reachable()  # a bucket that does not exist or refuses writes, a folder that is a file
    done = rs.done_units()
    todo = [u for u in plan.units if u.key not in done]
    if todo:  # what the run would check first: a key the endpoint refuses fails the dry run as it would the run
        check_endpoints(cfg, lambda m: print(m, file=sys.stderr))
    per = Counter((u.dataset.key, u.method.key) for u in plan.units)
    out = {
        "run_id": plan.run_id,
        "output": cfg.output,
        "units": len(plan.units),
        "done": len(plan.units) - len(todo),
        "to_compute": len(todo),
        "engine": plan.engine_config.to_dict() if plan.engine_config else None,
        "per_dataset_method": [{"dataset": d, "method": m, "units": n} for (d, m), n in sorted(per.items())],
        "unavailable": list(plan.unavailable),
        "procedure_cards": procedure_cards(cfg),
        "to_describe": waiting_units(todo),
    }
    return out


def procedure_cards(cfg) -> list[dict]:
    """The procedure card of each paper table the config names (`memloop.jobs.results.procedure_cards`), with
    each step's fit in the model's window where its weights are here."""
    from memloop.jobs.results.procedure_cards import card, card_markdown

    out = []
    for tid in cfg.paper_tables or ():
        c = card(tid, cfg, window=True)
        out.append({"table": tid, "card": card_markdown(c), "unjustified": [f.text() for f in c.unjustified]})
    return out


def _print_plan(out: dict, output: str) -> None:
    print(
        f"run id: {out['run_id']}\noutput: {output}\nunits: {out['units']} "
        f"({out['done']} already done, {out['to_compute']} to compute)"
    )
    for row in out["per_dataset_method"]:
        print(f"  {row['dataset']:32s} {row['method']:24s} {row['units']:5d}")
    for msg in out["unavailable"]:
        print(f"not counted, data not reachable here (the run needs it): {msg}")
    for model, n in (out.get("to_describe") or {}).items():
        print(
            f"{n} RepoQA needle(s) have no cached description by {model}: the run's judge engine writes them "
            "at its start where it is that model (cached as they come), else they keep the labelled fallback"
        )
    for c in out.get("procedure_cards") or ():
        print("\n" + c["card"] + "\n")
    print("dry run: nothing started")


def report_cmd(
    run_uri: str = typer.Argument(..., help="The run's URI as printed by `memloop run` (OUTPUT/RUN_ID)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report's numbers as one JSON object instead."),
) -> None:
    """Write report.md and PNG plots next to the run's tables and print the Markdown (compare two runs
    with `memloop compare A B`)."""
    from memloop.jobs.results.report import headline, report_of

    _, data, rep = report_of(run_uri)
    if rep.not_written:
        print(f"note: {rep.not_written}", file=sys.stderr, flush=True)
    if as_json:
        print(json.dumps(headline(data), default=float), flush=True)
        return
    print(rep.markdown, flush=True)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("report")(report_cmd)
