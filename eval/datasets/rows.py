"""Dataset rows read through pydantic models: a malformed row is a `MissingFieldError` naming the row, the field
and what to do, never pydantic's own `ValidationError` (which names neither the file nor the line)."""

from __future__ import annotations

from typing import Any, TypeVar

from memloop.eval.datasets.errors import MissingFieldError
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)


def field_path(loc: tuple[int | str, ...]) -> str:
    """pydantic's error location as a JSON path: ('paragraph_summaries', 0, 'summary') ->
    paragraph_summaries[0].summary."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def what_is_wrong(exc: ValidationError) -> str:
    """The first problem pydantic found, in words: "missing field 'x'", or "field 'x': must be ..., got T"."""
    first = exc.errors()[0]
    path = field_path(tuple(first["loc"]))
    if first["type"] == "missing":
        return f"missing field {path!r}"
    message = first["msg"].removeprefix("Value error, ")
    message = message[0].lower() + message[1:] if message else "is malformed"
    if first["type"] != "value_error":  # a type pydantic checks: say what came instead (our own checks say it)
        message += f", got {type(first.get('input')).__name__}"
    return f"field {path!r}: {message}" if path else message  # no path: the row as a whole


def parse_row(model: type[M], row: Any, where: str, fix: str) -> M:
    """`row` (one record of a dataset file, at `where`: "file:line") as `model`; a `MissingFieldError` saying
    where, which field and `fix` (what to do) when it does not fit."""
    try:
        return model.model_validate(row)
    except ValidationError as exc:
        raise MissingFieldError(f"{where}: {what_is_wrong(exc)}; {fix}") from None
