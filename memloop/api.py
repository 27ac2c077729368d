"""The functions behind `import memloop`: run, plan, load."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Union

import pandas as pd

from memloop.jobs.errors import JobsError
from memloop.jobs.results import paper_tables  # noqa: F401 (registers the table names a run config may ask for)

if TYPE_CHECKING:
    from memloop.jobs.run.config import RunConfig
    from memloop.jobs.run.driver import RunSummary
    from memloop.jobs.run.plan import RunPlan

ConfigLike = Union[str, "os.PathLike[str]", dict, "RunConfig"]


def version() -> str:
    """The installed memloop's version (a source checkout's from its git revision)."""
    from memloop.jobs.store.provenance import package_version

    return package_version()


def _config(config: ConfigLike, overrides: dict[str, Any]) -> "RunConfig":
    from memloop.jobs.run.config import RunConfig, load_config, parse_config, with_overrides

    if isinstance(config, RunConfig):
        cfg, source = config, "config"
    elif isinstance(config, dict):
        cfg, source = parse_config(config, "config"), "config"
    else:
        cfg, source = load_config(config), str(config)
    settings = overrides.pop("overrides", None) or {}
    if not isinstance(settings, dict):
        raise JobsError("`overrides` is a dict of dotted config paths to values, e.g. {'sampling.temperature': 0.2}")
    pairs = [f"{k}={json.dumps(v)}" for k, v in settings.items()]  # JSON is YAML: the value keeps its type
    return with_overrides(cfg, source, settings=pairs, **overrides)


def plan(
    config: ConfigLike, *, output: str | None = None, tag: str | None = None, limit: int | None = None, **overrides: Any
) -> "RunPlan":
    """Validate a config against the environment and work out its run id and units; start nothing.

    Takes the same overrides as `run`.
    """
    from memloop.jobs.run.plan import make_plan

    return make_plan(_config(config, dict(overrides, output=output, tag=tag, limit=limit)))


def run(
    config: ConfigLike,
    *,
    output: str | None = None,
    tag: str | None = None,
    limit: int | None = None,
    model: str | None = None,
    model_base_url: str | None = None,
    judge_model: str | None = None,
    judge_model_base_url: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
    overrides: dict[str, Any] | None = None,
    max_chunks: int | None = None,
    repeats: int | None = None,
    log: Callable[[str], None] | None = None,
) -> "RunSummary | list[RunSummary]":
    """Run (or resume) a config on Ray (a local instance unless RAY_ADDRESS is set).

    Returns the counts (a list of them, one per model, for a config with `models:`).

    The keywords are `memloop run`'s options: `model="openai/NAME"` (with `model_base_url` or
    OPENAI_BASE_URL), `judge_model`, `temperature`, `max_tokens`, `seed`, and `overrides` for any setting
    by its dotted path (`{"methods.gu-json.options.max_tokens": 64}`, like `-S`); all are part of the run id.

    Failed units do not raise: check `summary.failed` and `summary.first_errors()`.
    """
    from memloop.jobs.run.config import model_configs
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan

    kwargs: dict[str, Any] = {"log": log} if log is not None else {}
    cfg = _config(
        config,
        dict(
            output=output,
            tag=tag,
            limit=limit,
            model=model,
            model_base_url=model_base_url,
            judge_model=judge_model,
            judge_model_base_url=judge_model_base_url,
            temperature=temperature,
            max_tokens=max_tokens,
            seed=seed,
            overrides=overrides,
            max_chunks=max_chunks,
            repeats=repeats,
        ),
    )
    if cfg.models:  # one run per model: a list of summaries, in the config's order; every plan made before any runs
        return [execute(p, **kwargs) for p in [make_plan(c) for c in model_configs(cfg)]]
    return execute(make_plan(cfg), **kwargs)


@dataclass(frozen=True)
class Results:
    """A run's final tables.

    One row per unit in `samples` (the latest ok attempt, else the latest), and the steps, judgments and
    scores of exactly those attempts; `runs` has one row per invocation.
    """

    uri: str
    run_id: str
    samples: pd.DataFrame
    steps: pd.DataFrame
    judgments: pd.DataFrame
    scores: pd.DataFrame
    runs: pd.DataFrame

    def config(self) -> dict[str, Any]:
        """The run config of the latest invocation."""
        latest = self.runs.sort_values("started_at").iloc[-1]
        return json.loads(latest["config_json"])


def load(uri: str) -> Results:
    """A run's tables from its URI (`{output}/{run_id}`, local or gs://) as pandas DataFrames."""
    from memloop.jobs.store.run_store import RunStore

    rs = RunStore.at(uri)
    tables = {t: rs.table(t).to_pandas() for t in ("samples", "steps", "judgments", "scores", "runs")}
    return Results(uri=rs.uri, run_id=rs.run_id, **tables)
