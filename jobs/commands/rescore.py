"""`memloop rescore RUN_URI --judge NAME [--judge-model SPEC [--judge-model-base-url URL]] [-o key=value ...]`: judge a
finished
run's stored outputs again (`memloop.jobs.run.rescore`), into a re-judging beside the run's own judgments.

Exit codes as `memloop run`: 0 every unit judged; 3 some judgments failed; 2 a usage error; 130 interrupted.
"""

from __future__ import annotations

import json
import sys
from typing import Any, Optional

import typer
from memloop.jobs.errors import ConfigError


def parse_options(pairs: list[str]) -> dict[str, Any]:
    """`key=value` pairs; each value is read as YAML, so `3`, `0.5`, `true` and `[a, b]` keep their types."""
    import yaml

    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"-o {pair!r}: write a judge option as key=value (e.g. -o batch_size=4)")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise ConfigError(f"-o {pair!r}: the value is not a YAML scalar or list; quote it") from None
    return out


def parse_judge_model(text: str, base_url: str | None = None) -> Any:
    """`engine` (the run's own model), an Inspect-style name (`openai/NAME` with `base_url` or
    OPENAI_BASE_URL, `memloop/NAME`), or a `judge_model` section as YAML/JSON, e.g.
    `{kind: openai, endpoint: {base_url: http://host:8000/v1, model: m}}`."""
    import yaml
    from memloop.jobs.run.config import JudgeModelSpec
    from memloop.jobs.run.model_names import judge_section, provider_of
    from pydantic import ValidationError

    if provider_of(text.strip()) is not None:  # Inspect-style: openai/NAME (OPENAI_BASE_URL), memloop/NAME ...
        return JudgeModelSpec.model_validate(judge_section(text.strip(), base_url))
    if base_url is not None:
        raise ConfigError(
            f"--judge-model-base-url is for an endpoint judge: give --judge-model openai/NAME "
            f"(vllm/NAME, sglang/NAME), not {text!r}"
        )
    try:
        data = {"kind": "engine"} if text.strip() in ("engine", "self") else yaml.safe_load(text)
        return JudgeModelSpec.model_validate(data)
    except (yaml.YAMLError, ValidationError) as exc:
        first = str(exc).splitlines()[0] if isinstance(exc, yaml.YAMLError) else exc.errors()[0]["msg"]
        raise ConfigError(
            f"--judge-model {text!r}: {first}; give `engine` or a judge_model section such as "
            "'{kind: openai, endpoint: {base_url: http://127.0.0.1:8000/v1, model: NAME}}'"
        ) from None


def rescore_cmd(
    run_uri: str = typer.Argument(..., help="The run's URI as printed by `memloop run` (OUTPUT/RUN_ID)."),
    judge: str = typer.Option(
        ..., "--judge", help="The judge to run: `memloop judges` lists them with their options and what each needs."
    ),
    judge_model: Optional[str] = typer.Option(
        None,
        "--judge-model",
        help="`engine` (the run's model), openai/NAME (OPENAI_BASE_URL) "
        "or memloop/NAME, or a judge_model section as YAML; "
        "default: the run's own judge_model.",
    ),
    judge_model_base_url: Optional[str] = typer.Option(
        None,
        "--judge-model-base-url",
        help="The server of an endpoint --judge-model (e.g. http://127.0.0.1:8000/v1), as `memloop run` takes it.",
    ),
    option: list[str] = typer.Option(
        [], "-o", "--option", help="A judge option key=value (repeatable; `memloop judges` lists each judge's options)."
    ),
    tasks: list[str] = typer.Option(
        [], "--task", help="Judge only these tasks (repeatable; default: the judge's own)."
    ),
    tag: Optional[str] = typer.Option(None, "--tag", help="A tag hashed into the judging id: a re-judging afresh."),
    max_failed_frac: float = typer.Option(
        0.0, "--max-failed-frac", min=0.0, max=1.0, help="Exit 0 when at most this fraction of the judged units failed."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print only one JSON object on stdout."),
    address: Optional[str] = typer.Option(
        None,
        "--address",
        help="The Ray cluster to join for a judge engine (default RAY_ADDRESS, else a private local instance).",
    ),
) -> None:
    """Judge a finished run's outputs again, beside its own judgments (resumes the same re-judging);
    `memloop report RUN_URI` then shows both. `memloop judges` lists the judges, their options and what
    each needs."""
    from memloop.jobs.commands.run import announce, use_ray_address
    from memloop.jobs.run.config import JudgeSpec
    from memloop.jobs.run.rescore import rescore

    use_ray_address(address)
    from memloop.jobs.run.signals import graceful_interrupts

    try:
        spec = JudgeSpec(name=judge, options=parse_options(option), tasks=tasks or None)
    except ValueError as exc:
        raise ConfigError(f"--judge {judge!r}: {exc}") from None
    if judge_model_base_url is not None and judge_model is None:
        raise ConfigError("--judge-model-base-url names the server of --judge-model openai/NAME: give both")
    jm = parse_judge_model(judge_model, judge_model_base_url) if judge_model is not None else None

    with graceful_interrupts():
        try:
            summary = rescore(run_uri, spec, jm, tag=tag, on_ready=announce("judging id", as_json))
        except KeyboardInterrupt:
            print("interrupted: finished judgments are saved; run the same rescore again to resume", file=sys.stderr)
            raise SystemExit(130) from None
    code = summary.exit_code(max_failed_frac)
    for err in summary.first_errors():
        print(f"  {err[:500]}", file=sys.stderr)
    print(json.dumps(dict(summary.to_dict(), exit_code=code)), flush=True)
    if code:
        raise SystemExit(code)


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("rescore")(rescore_cmd)
