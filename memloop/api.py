"""The functions behind `import memloop`: run, plan, load."""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Union

import pandas as pd

from engine.errors import EngineError
from eval.errors import EvalError
from jobs.errors import JobsError
from jobs.results import paper_tables  # noqa: F401 (registers the table names a run config may ask for)

if TYPE_CHECKING:
    from jobs.run.config import RunConfig
    from jobs.run.driver import RunSummary
    from jobs.run.plan import RunPlan

Error = (JobsError, EvalError, EngineError)  # what `except memloop.Error` catches: user-fixable errors
ConfigLike = Union[str, "os.PathLike[str]", dict, "RunConfig"]


def version() -> str:
    from jobs.store.provenance import package_version

    return package_version()


def _config(config: ConfigLike, output: str | None, tag: str | None, limit: int | None) -> "RunConfig":
    from jobs.run.config import RunConfig, load_config, parse_config, with_overrides

    if isinstance(config, RunConfig):
        cfg, source = config, "config"
    elif isinstance(config, dict):
        cfg, source = parse_config(config, "config"), "config"
    else:
        cfg, source = load_config(config), str(config)
    return with_overrides(cfg, source, output=output, tag=tag, limit=limit)


def plan(config: ConfigLike, *, output: str | None = None, tag: str | None = None,
         limit: int | None = None) -> "RunPlan":
    """Validate a config against the environment and work out its run id and units; start nothing."""
    from jobs.run.plan import make_plan

    return make_plan(_config(config, output, tag, limit))


def run(config: ConfigLike, *, output: str | None = None, tag: str | None = None, limit: int | None = None,
        log: Callable[[str], None] | None = None) -> "RunSummary":
    """Run (or resume) a config on Ray (a local instance unless RAY_ADDRESS is set); returns the counts.

    Failed units do not raise: check `summary.failed` and `summary.first_errors()`."""
    from jobs.run.driver import execute

    kwargs: dict[str, Any] = {"log": log} if log is not None else {}
    return execute(_config(config, output, tag, limit), **kwargs)


@dataclass(frozen=True)
class Results:
    """A run's final tables: one row per unit in `samples` (the latest ok attempt, else the latest),
    and the steps, judgments and scores of exactly those attempts; `runs` has one row per invocation."""

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
    from jobs.store.storage import RunStore

    rs = RunStore.at(uri)
    tables = {t: rs.table(t).to_pandas() for t in ("samples", "steps", "judgments", "scores", "runs")}
    return Results(uri=rs.uri, run_id=rs.run_id, **tables)
