"""The viewer's errors (a JobsError: the CLI prints them on one line and exits 2)."""

from __future__ import annotations

from memloop.jobs.errors import JobsError


class ViewError(JobsError):
    """The viewer cannot start or answer as asked (an unsafe bind, a missing key file, a bad query)."""


class ViewNotFound(ViewError):
    """A page names a run, unit or plot the viewer does not hold (HTTP 404; other ViewErrors are 400s)."""
