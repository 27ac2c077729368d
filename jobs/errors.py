"""Errors of the orchestration layer (configs, storage, runs), and how a failure is written down."""
from __future__ import annotations

import re


class JobsError(Exception):
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
    if "Traceback" not in text and "File \"" not in text:
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
_TRANSIENT_NAMES = {"RayActorError", "ActorDiedError", "ActorUnavailableError", "GetTimeoutError", "ObjectLostError",
                    "OwnerDiedError", "WorkerCrashedError", "NodeDiedError", "RaySystemError"}


def is_transient(exc: BaseException) -> bool:
    for e in (exc, root_cause(exc)):
        flagged = getattr(e, "transient", None)  # errors that know (e.g. an endpoint's 429 vs its 400)
        if isinstance(flagged, bool):
            return flagged
        if isinstance(e, (TimeoutError, ConnectionError)) or any(
                c.__name__ in _TRANSIENT_NAMES for c in type(e).__mro__):
            return True
    return False
