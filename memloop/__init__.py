"""memloop: long-input LLM methods with incremental memories, run on Ray over a JAX engine.

The Python API, for notebooks and scripts (the CLI runs the same functions):

    import memloop
    summary = memloop.run("jobs/configs/demo.yaml")          # or a dict, or a RunConfig
    # the command line's overrides as keywords (part of the run id):
    # memloop.run(cfg, model="openai/NAME", model_base_url="http://127.0.0.1:8000/v1", temperature=0.2,
    #             overrides={"methods.gu-json.options.max_tokens": 64})
    results = memloop.load(summary.output)                    # final tables as pandas DataFrames
    results.scores.groupby(["method", "judge", "metric"])["value"].mean()

`plan` validates a config and returns the run plan without starting anything (`memloop run
--dry-run`). Every error a user can fix is a `memloop.MemloopError` whose message says what to do.

The subpackages are `memloop.engine` (the JAX engine and its server), `memloop.eval` (methods, memories,
judges, datasets), `memloop.jobs` (runs, storage, results, the CLI) and `memloop.bench` (benchmarks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memloop.errors import MemloopError

# A source checkout keeps the subpackages in the folders beside this one (engine/, eval/, jobs/, bench/), which an
# install maps under `memloop` (pyproject's package-dir). Run from a checkout that is not installed -- the device
# command, a Ray job's uploaded working_dir -- `memloop.engine` is found there too. An installed wheel holds them
# inside this folder and the checkout's root does not exist beside it.
_CHECKOUT = Path(__file__).resolve().parent.parent
if (_CHECKOUT / "pyproject.toml").is_file() and (_CHECKOUT / "engine" / "__init__.py").is_file():
    __path__.append(str(_CHECKOUT))  # type: ignore[name-defined]  # noqa: F821 (a package's own __path__)

# The API is imported on first use, so `import memloop.eval...` never loads Ray, JAX or the run machinery.
_API = ("Results", "load", "plan", "run")
__all__ = ["MemloopError", *_API, "__version__"]


def __getattr__(name: str) -> Any:
    if name in _API:
        from memloop import api

        return getattr(api, name)
    if name == "__version__":
        from memloop.api import version

        return version()
    raise AttributeError(f"module 'memloop' has no attribute {name!r}")
