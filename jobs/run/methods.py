"""The run's methods as its config names them: each one's settings, the tasks it runs on, and the check
that builds every one before work starts.

Both the units (`memloop.jobs.run.workload`) and the fit check (`memloop.jobs.run.chunk_fit`) read these, so they live
apart from either.
"""

from __future__ import annotations

from typing import Any

from memloop.eval.errors import EvalError
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import MethodSpec, RunConfig


def method_settings(cfg: RunConfig, m: MethodSpec, seed: int) -> dict[str, Any]:
    """The method's settings: its own defaults, then the run's sampling overrides (only the fields
    the config sets), the repeat's seed and token counting (`count_tokens`, where not the default),
    then the method's own options."""
    counting = {"count_tokens": cfg.count_tokens} if cfg.count_tokens != "model" else {}
    return {**cfg.sampling.overrides(), "seed": seed, **counting, **m.options}


def method_tasks(m: MethodSpec) -> tuple[str, ...] | None:
    """The tasks the method runs on: the config's `methods[].tasks`, else the method's own (None: any)."""
    if m.tasks is not None:
        return tuple(m.tasks)
    from memloop.eval.methods import method_class  # the method registry loads every method: only when asked

    return method_class(m.name).tasks


def validate_methods(cfg: RunConfig) -> None:
    """Instantiate every method with its settings, so bad options fail before work starts."""
    from memloop.eval.methods import get_method

    for i, m in enumerate(cfg.methods):
        try:
            get_method(m.name, **method_settings(cfg, m, cfg.seed))
        except EvalError as exc:
            raise ConfigError(f"`methods.{i}.options`: {exc}") from None
