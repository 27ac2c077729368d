"""Errors of structured memories; all derive from memloop.eval.errors.MemoryError_."""

from __future__ import annotations

from memloop.eval.errors import MemoryError_


class SchemaError(MemoryError_):
    """A schema class or schema text uses a construct outside the typed-hierarchy language."""


class PathError(MemoryError_):
    """A JSONPath is malformed, uses an unsupported construct, or leaves the schema."""


class RevisionError(MemoryError_):
    """A revision cannot be applied (wrong op for the path, wrong type, missing path); memory is unchanged."""


class RevisionParseError(MemoryError_):
    """An LLM output holds no revision section / no decodable revision at all."""


class LiteralParseError(MemoryError_):
    """Text is not a JSON (or Python-literal) value."""


class BudgetError(MemoryError_):
    """A memory could not be brought under its token budget."""
