"""The one sampling type, from a method's settings to the engine's step: `SamplingParams` and its bounds.

Every layer hands the same frozen `SamplingParams` on: a method builds it from its settings
(`memloop.eval.methods.base.MethodSettings.sampling`), a request carries it (`memloop.eval.llm.LLMRequest`),
Ray pickles it to the engine actor, and the engine packs it into its step's arrays. Its bounds and their
messages live only here (`check`), as SGLang's `SamplingParams.verify` keeps them: the config's fields, a
method's options, a judge's temperature and an HTTP request's body are all checked by these functions, so a
bad value reads the same wherever it was given. The layers above name where it was given (a config path, a
method, a request field) before the message.

Run-wide overrides (`memloop.jobs.run.config.SamplingSpec`) default to None and are laid over a method's own
settings field by field (`SamplingParams.merge`, as Inspect's `GenerateConfig.merge` does): a field the
config leaves out keeps the method's value.

This module sits on the lowest floor beside `memloop.errors` (pyproject's import contracts): the evaluation
layer may not import the engine, and both build requests of this one type.
"""

from __future__ import annotations

import dataclasses
import math
from numbers import Integral, Real
from typing import Any, Callable, Mapping

from memloop.errors import MemloopError

# The one default of a request that does not set max_tokens (a method's own default may differ).
DEFAULT_MAX_TOKENS = 512
# Tokens to generate: far above any served model's context (where the engine's own fit check says what fits
# per request) and far below the step's int32 counters, so a typo's extra zeros fail at once.
MAX_TOKENS = 2**20
# top_k and token ids are int32 on the device.
INT32_MAX = 2**31 - 1
# One rule for seeds everywhere: a signed 64-bit integer (what `jax.random.key` takes, and OpenAI's and vLLM's
# APIs accept). A run's own seed is bounded further by its repeats (memloop.jobs.run.config.MAX_SEED).
SEED_MIN, SEED_MAX = -(2**63), 2**63 - 1
# Above this, sampling is uniform over the candidates to float32 precision anyway; a bound keeps masked (-inf)
# logits from meeting an infinite temperature (inf/inf = nan).
MAX_TEMPERATURE = 100.0
# Stop strings are searched in the decoded text after every token: bound that work per request.
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1000
MAX_STOP_TOKEN_IDS = 256
# Most alternatives a request may ask log-probabilities of per token (OpenAI's and vLLM's top_logprobs bound).
MAX_LOGPROBS = 20


class SamplingError(MemloopError, ValueError):
    """A sampling setting outside what can be generated with.

    The message names the setting, its bounds and the value given. A ValueError too, so pydantic reports it
    at the field it checks (`check`).
    """


def _short(value: Any, limit: int = 60) -> str:
    """A value for an error message, cut short (inputs can be megabytes; huge ints cannot be printed)."""
    try:
        text = repr(value)
    except ValueError:
        return "an integer of thousands of digits"
    return text if len(text) <= limit else text[:limit] + "..."


def _integer(v: Any) -> bool:
    return isinstance(v, Integral) and not isinstance(v, bool)


def _number(v: Any) -> bool:
    # an int is finite however large (math.isfinite would overflow converting 10**400 to a float)
    return isinstance(v, Real) and not isinstance(v, bool) and (isinstance(v, Integral) or math.isfinite(v))


def _int_in(lo: int, hi: int) -> Callable[[Any], bool]:
    return lambda v: _integer(v) and lo <= v <= hi


def _stop_strings(v: Any) -> bool:
    return (
        isinstance(v, (tuple, list))
        and len(v) <= MAX_STOP_STRINGS
        and all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in v)
    )


def _stop_ids(v: Any) -> bool:
    return v is None or (
        isinstance(v, (tuple, list))
        and len(v) <= MAX_STOP_TOKEN_IDS
        and all(_integer(t) and 0 <= t <= INT32_MAX for t in v)
    )


# Each setting: (whether a value is allowed, what is allowed, as the message says it).
_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "max_tokens": (_int_in(1, MAX_TOKENS), f"an integer from 1 to {MAX_TOKENS} (the most tokens to generate)"),
    "temperature": (
        lambda v: _number(v) and 0 <= v <= MAX_TEMPERATURE,
        f"a number from 0 (greedy) to {MAX_TEMPERATURE:g}",
    ),
    "top_k": (_int_in(0, INT32_MAX), f"an integer from 0 (off) to {INT32_MAX}"),
    "top_p": (lambda v: _number(v) and 0 < v <= 1, "a number above 0 and at most 1 (1 is off)"),
    "seed": (
        lambda v: v is None or _int_in(SEED_MIN, SEED_MAX)(v),
        "None (fresh randomness) or an integer from -2**63 to 2**63 - 1",
    ),
    "stop": (
        _stop_strings,
        f"a list of at most {MAX_STOP_STRINGS} non-empty strings of at most {MAX_STOP_CHARS} characters",
    ),
    "stop_token_ids": (
        _stop_ids,
        f"None (the tokenizer's end-of-turn tokens) or a list of at most "
        f"{MAX_STOP_TOKEN_IDS} token ids from 0 to {INT32_MAX}",
    ),
    "logprobs": (
        lambda v: v is None or _int_in(0, MAX_LOGPROBS)(v),
        f"None (no log-probabilities) or an integer from 0 to {MAX_LOGPROBS}",
    ),
}


def check(name: str, value: Any) -> Any:
    """`value` if it is allowed for sampling setting `name`, else the SamplingError every layer reports."""
    allowed, what = _RULES[name]
    if not allowed(value):
        raise SamplingError(f"{name} must be {what}; got {_short(value)}")
    return value


def checker(name: str) -> Callable[[Any], Any]:
    """`check` of one setting, as a pydantic `AfterValidator`.

    The field may hold the setting under any name (a method's `retry_temperature` is bounded as a temperature).
    """
    return lambda value: check(name, value)


def raised_by_check(error: Mapping[str, Any]) -> SamplingError | None:
    """The SamplingError behind one of pydantic's error dicts (`ValidationError.errors()`), if any.

    Where a field's `checker` raised it, a layer reports `check`'s message as it is (not pydantic's
    "Value error, ...").
    """
    cause = (error.get("ctx") or {}).get("error")
    return cause if isinstance(cause, SamplingError) else None


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """One request's sampling settings.

    Temperature 0 = greedy; top_k 0 and top_p 1 disable those filters; seed None = fresh randomness. `stop`
    strings end the output at their first occurrence (the string itself is not returned); `stop_token_ids` None
    uses the tokenizer's end-of-turn tokens. `logprobs` None returns none; N returns each output token's
    log-probability and the N most likely alternatives.

    Every instance is checked when it is made (`verify`), so one that exists can be generated with.
    """

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        self.verify()

    def verify(self) -> None:
        """Raise the SamplingError of the first setting out of its bounds (`check`)."""
        for name in _RULES:
            check(name, getattr(self, name))

    @property
    def greedy(self) -> bool:
        """Whether these settings decode greedily (temperature 0)."""
        return self.temperature == 0.0

    def merge(self, overrides: Mapping[str, Any]) -> "SamplingParams":
        """These settings with every field `overrides` sets (not None) laid over them, checked again."""
        unknown = sorted(str(k) for k in overrides if k not in FIELDS)
        if unknown:
            raise SamplingError(f"unknown sampling setting(s) {unknown}; known: {list(FIELDS)}")
        given = {k: v for k, v in overrides.items() if v is not None}
        for k in ("stop", "stop_token_ids"):
            if isinstance(given.get(k), list):
                given[k] = tuple(given[k])
        return dataclasses.replace(self, **given) if given else self

    @classmethod
    def from_request(cls, d: Any, vocab_size: int | None = None) -> "SamplingParams":
        """A request's `sampling` object as SamplingParams, or the SamplingError naming the setting.

        The object is a dict (None or missing fields take the defaults; `stop` may be one string); an instance
        is taken as it is. `vocab_size` bounds `stop_token_ids` when given.
        """
        if isinstance(d, SamplingParams):
            params = d
        elif d is None:
            params = cls()
        elif not isinstance(d, dict):
            raise SamplingError(f"`sampling` must be an object with keys among {list(FIELDS)}")
        else:
            params = cls().merge({**d, "stop": [d["stop"]]} if isinstance(d.get("stop"), str) else d)
        ids = params.stop_token_ids
        if ids is not None and vocab_size is not None and any(t >= vocab_size for t in ids):
            raise SamplingError(f"stop_token_ids must be < the vocabulary size {vocab_size}; got {_short(list(ids))}")
        return params

    def to_dict(self) -> dict[str, Any]:
        """The settings as JSON (lists for tuples).

        `stop_token_ids` and `logprobs` only where set, so a request's content hash
        (`memloop.eval.llm.request_key`) is the one it had before they existed.
        """
        d = dataclasses.asdict(self)
        d["stop"] = list(self.stop)
        for k in ("stop_token_ids", "logprobs"):
            if d[k] is None:
                del d[k]
            elif k == "stop_token_ids":
                d[k] = list(d[k])
        return d


FIELDS = tuple(f.name for f in dataclasses.fields(SamplingParams))
