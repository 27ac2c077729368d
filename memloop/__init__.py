"""memloop's Python API, for notebooks and scripts (the CLI runs the same functions).

    import memloop
    summary = memloop.run("jobs/configs/demo.yaml")          # or a dict, or a RunConfig
    # the command line's overrides as keywords (part of the run id):
    # memloop.run(cfg, model="openai/NAME", model_base_url="http://127.0.0.1:8000/v1", temperature=0.2,
    #             overrides={"methods.gu-json.options.max_tokens": 64})
    results = memloop.load(summary.output)                    # final tables as pandas DataFrames
    results.scores.groupby(["method", "judge", "metric"])["value"].mean()

`plan` validates a config and returns the run plan without starting anything (`memloop run
--dry-run`). Every error a user can fix is a `memloop.Error` subclass whose message says what to do.
"""
from __future__ import annotations

from memloop.api import Error, Results, load, plan, run, version

__version__ = version()
__all__ = ["Error", "Results", "load", "plan", "run", "__version__"]
