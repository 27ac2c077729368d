"""The one base class of every error a user can cause or fix: `except memloop.MemloopError`.

Each layer derives its own base from it (`memloop.engine.errors.EngineError`, `memloop.eval.errors.EvalError`,
`memloop.jobs.errors.JobsError`); this module imports nothing, so every floor may import it.
"""


class MemloopError(Exception):
    """An error whose message says what the user should do next (a bad config, a missing model, ...)."""
