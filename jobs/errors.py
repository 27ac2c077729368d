"""Errors of the orchestration layer (configs, storage, runs), and how a failure is written down."""

from __future__ import annotations

import re

from memloop.errors import MemloopError


class JobsError(MemloopError):
    """Base class: every message says what the user should do next."""


class ConfigError(JobsError):
    """A run config is invalid; the message names the offending field."""


class DataUnavailableError(ConfigError):
    """A dataset hosted on the Hugging Face hub is neither reachable nor cached here; the message says how to
    get it. A dry run lists it and goes on (the machine that runs may have network); a run stops."""


class StorageError(JobsError):
    """An output location is unreachable, unwritable, or holds inconsistent data."""


class LockHeldError(StorageError):
    """Another process holds the run's lock; `holder` is what it wrote (owner, host, pid, times)."""

    def __init__(self, message: str, holder: dict | None = None) -> None:
        super().__init__(message)
        self.holder = holder or {}


class RunError(JobsError):
    """A run could not be carried out."""


class RescoreError(JobsError):
    """A finished run cannot be judged again as asked (`memloop rescore`)."""


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def root_cause(exc: BaseException) -> BaseException:
    """The exception that really failed: Ray wraps a task's or actor's error (`RayTaskError.cause`),
    and a re-raise may chain it (`__cause__`)."""
    seen: set[int] = set()
    while id(exc) not in seen:
        seen.add(id(exc))
        inner = getattr(exc, "cause", None)
        if isinstance(inner, BaseException):
            exc = inner
            continue
        break
    return exc


# The last line of a Python traceback: "package.module.SomeError: message".
_FINAL_LINE = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|Exit|Interrupt)): (.+)$", re.M)


def remote_error(exc: BaseException) -> tuple[str, str] | None:
    """(type name, message) of the error an actor's constructor raised, which Ray reports only as
    text (`ActorDiedError: ... creation task ...` followed by the remote traceback)."""
    text = _ANSI.sub("", str(exc))
    if "Traceback" not in text and 'File "' not in text:
        return None
    found = _FINAL_LINE.findall(text)
    return found[-1] if found else None


def error_text(exc: BaseException, limit: int = 2000) -> str:
    """`Type: message` of the root cause, without colour codes, cut to `limit` characters."""
    cause = root_cause(exc)
    remote = remote_error(cause) if type(cause).__module__.startswith("ray") else None
    text = f"{remote[0]}: {remote[1]}" if remote else f"{type(cause).__name__}: {cause}"
    return _ANSI.sub("", text).strip()[:limit]


# Failures that another attempt may cure: the infrastructure (Ray workers and actors, timeouts,
# connections), not the unit's own inputs. Anything else (a method or judge error, a request the
# engine rejects) fails the same way every time and is recorded at once instead of retried.
_TRANSIENT_NAMES = {
    "RayActorError",
    "ActorDiedError",
    "ActorUnavailableError",
    "GetTimeoutError",
    "ObjectLostError",
    "OwnerDiedError",
    "WorkerCrashedError",
    "NodeDiedError",
    "RaySystemError",
}


# samples.failure. A unit is the method's zero only for what the method produced (no step's output
# parsed, every one was empty or refused: `memloop.eval.methods.step.unit_failure`); any error raised
# while it ran (an endpoint's 401/403/404, the engine, Ray, an error memloop does not know) leaves
# it incomplete, never 0.
INFRASTRUCTURE = "infrastructure"  # samples.failure: an error was raised (engine, Ray, endpoint, unknown)
METHOD = "method"  # samples.failure: the method's own outputs produced nothing usable


def is_transient(exc: BaseException) -> bool:
    for e in (exc, root_cause(exc)):
        flagged = getattr(e, "transient", None)  # errors that know (e.g. an endpoint's 429 vs its 400)
        if isinstance(flagged, bool):
            return flagged
        if isinstance(e, (TimeoutError, ConnectionError)) or any(
            c.__name__ in _TRANSIENT_NAMES for c in type(e).__mro__
        ):
            return True
    return False


_TRANSIENT_TEXT = re.compile(
    r"^(?:[\w.]*\.)?("
    + "|".join(
        sorted(
            _TRANSIENT_NAMES
            | {"TimeoutError", "ConnectionError", "ConnectionRefusedError", "ConnectionResetError", "BrokenPipeError"}
        )
    )
    + r")\b"
)


def failure_kind(error: str | None, recorded: str | None = None) -> str:
    """Whether a failed unit failed for the infrastructure or for its method: the `failure` column the
    run recorded, or, for runs written before it existed, the error text's type name (the transient
    Ray and connection errors, and the "every engine actor died" note the pool writes)."""
    if recorded in (INFRASTRUCTURE, METHOD):
        return recorded
    text = (error or "").strip()
    if _TRANSIENT_TEXT.match(text) or text.startswith(ENGINES_LOST):
        return INFRASTRUCTURE
    return METHOD


ENGINES_LOST = "every engine actor died"
