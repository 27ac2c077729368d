"""Errors of the orchestration layer (configs, storage, runs)."""


class JobsError(Exception):
    """Base class: every message says what the user should do next."""


class ConfigError(JobsError):
    """A run config is invalid; the message names the offending field."""


class StorageError(JobsError):
    """An output location is unreachable, unwritable, or holds inconsistent data."""


class RunError(JobsError):
    """A run could not be carried out."""
