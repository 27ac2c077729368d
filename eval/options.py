"""Typed options: what a method, dataset loader or judge accepts, checked before any work starts.

A method's options are its `Settings` dataclass; a loader's or judge's options are the keyword
parameters of its function. Both are validated by pydantic against their type hints (with the
constraints of `Annotated[..., Field(...)]` where a type alone says too little), so `max_tokens:
abc`, `max_tokens: -3` or `chunk_tokens: "two"` fail in the config check with the option named,
and an unknown option is an error that lists the valid ones.
"""
from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any, Callable, TypeVar

from pydantic import BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError, create_model

from memloop.eval.errors import EvalError

T = TypeVar("T")

PositiveInt = Annotated[int, Field(ge=1)]
# Tokens to generate: far above any model's context, so a typo's extra zeros fail before the run; strict, so
# YAML's `true` is not read as 1.
MAX_TOKENS = 2**20
MaxTokens = Annotated[int, Strict(), Field(ge=1, le=MAX_TOKENS)]
NonNegativeInt = Annotated[int, Field(ge=0)]
Temperature = Annotated[float, Field(ge=0.0, le=100.0, allow_inf_nan=False)]
TopK = Annotated[int, Field(ge=0, lt=2**31)]
TopP = Annotated[float, Field(gt=0.0, le=1.0, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=0, lt=2**63)]


def _messages(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(options)"
        parts.append(f"`{loc}`: {err['msg']} (got {err.get('input')!r})" if err["type"] != "extra_forbidden"
                     else f"`{loc}` is not an option")
    return "; ".join(parts)


def check_settings(cls: type[T], values: dict[str, Any], what: str, error: type[EvalError]) -> T:
    """An instance of the settings dataclass `cls` from `values`, or `error` naming every bad field."""
    valid = sorted(f for f in getattr(cls, "__dataclass_fields__", {}))
    unknown = sorted(set(values) - set(valid))
    if unknown:
        raise error(f"{what} has no settings {unknown}; known settings: {valid}")
    try:
        return TypeAdapter(cls).validate_python(values)
    except ValidationError as exc:
        raise error(f"{what}: {_messages(exc)}") from None


def _checkable(hint: Any) -> Any:
    """`hint`, or Any where pydantic cannot check it (protocols, callables of objects passed in code)."""
    try:
        TypeAdapter(hint, config=ConfigDict(arbitrary_types_allowed=True))
    except Exception:
        return Any
    return hint


def options_model(fn: Callable[..., Any], skip: tuple[str, ...] = ()) -> type[BaseModel]:
    """A pydantic model of `fn`'s keyword parameters (those not in `skip`), from its type hints."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # a hint that only resolves under TYPE_CHECKING: keep the parameter untyped
        hints = {}
    fields: dict[str, Any] = {}
    for name, p in inspect.signature(fn).parameters.items():
        if name in skip or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        default = ... if p.default is p.empty else p.default
        fields[name] = (_checkable(hints.get(name, Any)), default)
    config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    return create_model(f"{getattr(fn, '__name__', 'fn')}_options", __config__=config, **fields)


def check_options(fn: Callable[..., Any], options: dict[str, Any], what: str, error: type[EvalError],
                  skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """`options` validated against `fn`'s keyword parameters; returns them coerced (e.g. "12" -> 12)."""
    model = options_model(fn, skip)
    unknown = sorted(set(options) - set(model.model_fields))
    if unknown:
        raise error(f"{what} does not take option(s) {', '.join(unknown)}; accepted are "
                    f"{', '.join(model.model_fields) or 'none'}")
    try:
        checked = model.model_validate(options)
    except ValidationError as exc:
        raise error(f"{what}: {_messages(exc)}") from None
    return {k: getattr(checked, k) for k in options}
