"""Named dataset errors. All derive from `memloop.eval.errors.DatasetError`, so callers may catch the root."""

from __future__ import annotations

from memloop.eval.errors import DatasetError


class DatasetNotFoundError(DatasetError):
    """A dataset path does not exist."""


class EmptyDatasetError(DatasetError):
    """A dataset file (or directory) holds nothing to load."""


class BinaryFileError(DatasetError):
    """A file that should be text is binary or not decodable."""


class UnknownFormatError(DatasetError):
    """The file's format (suffix or record shape) is not one this loader reads."""


class MissingFieldError(DatasetError):
    """A record lacks a field the format requires, or the field has the wrong type."""


class UnknownTaskError(DatasetError):
    """`load_dataset` was asked for a task no loader is registered for."""


class InconsistentGoldError(DatasetError):
    """A record's gold answer contradicts its own inputs (e.g. a value absent from its cited sentence)."""


class NotARegularFileError(DatasetError):
    """A data path is a FIFO, a device, a socket or a symlink loop: reading it could block or never end."""


class RecordTooLargeError(DatasetError):
    """A file or one record in it is larger than a loader reads (`memloop.eval.datasets.textfile` bounds)."""
