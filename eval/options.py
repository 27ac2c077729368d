"""Typed options: what a method, dataset loader or judge accepts, checked before any work starts.

A method's options are its `Settings` dataclass; a loader's or judge's options are the keyword
parameters of its function. Both are validated by pydantic against their type hints (with the
constraints of `Annotated[..., Field(...)]` where a type alone says too little; a sampling setting's
bounds are `memloop.sampling.check`'s), so `max_tokens: abc`, `max_tokens: -3` or `chunk_tokens: "two"` fail
in the config check with the option named, and an unknown option is an error that lists the valid ones.
"""

from __future__ import annotations

import inspect
import typing
from typing import Annotated, Any, Callable, TypeVar

from memloop.eval.errors import EvalError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Strict, TypeAdapter, ValidationError, create_model

from memloop.sampling import checker, raised_by_check

T = TypeVar("T")

PositiveInt = Annotated[int, Field(ge=1)]
NonNegativeInt = Annotated[int, Field(ge=0)]
# The sampling settings a method or judge takes: their bounds and messages are `memloop.sampling.check`'s, the
# ones a request and the engine report. max_tokens is strict, so YAML's `true` is not read as 1.
MaxTokens = Annotated[int, Strict(), AfterValidator(checker("max_tokens"))]
Temperature = Annotated[float, AfterValidator(checker("temperature"))]
TopK = Annotated[int, AfterValidator(checker("top_k"))]
TopP = Annotated[float, AfterValidator(checker("top_p"))]
Seed = Annotated[int, AfterValidator(checker("seed"))]


def _messages(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(options)"
        bound = raised_by_check(err)
        if err["type"] == "extra_forbidden":
            parts.append(f"`{loc}` is not an option")
        elif bound is not None:  # the sampling bound's own message, which shows the value given
            parts.append(f"`{loc}`: {bound}")
        else:
            parts.append(f"`{loc}`: {err['msg']} (got {err.get('input')!r})")
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


def check_options(
    fn: Callable[..., Any], options: dict[str, Any], what: str, error: type[EvalError], skip: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`options` validated against `fn`'s keyword parameters; returns them coerced (e.g. "12" -> 12)."""
    model = options_model(fn, skip)
    unknown = sorted(set(options) - set(model.model_fields))
    if unknown:
        raise error(
            f"{what} does not take option(s) {', '.join(unknown)}; accepted are "
            f"{', '.join(model.model_fields) or 'none'}"
        )
    try:
        checked = model.model_validate(options)
    except ValidationError as exc:
        raise error(f"{what}: {_messages(exc)}") from None
    return {k: getattr(checked, k) for k in options}
