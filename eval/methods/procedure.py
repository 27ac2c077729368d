"""What one memory step of a method does, as the method's own code applies it: the procedure card's rows.

Every method declares `Method.procedure(task)`; the base reads the method's settings object (the values
`Trace.ask` applies: `max_tokens`, `max_attempts`, `temperature`, `retry_temperature`, `count_tokens`,
`decoding`) and the class's declared step kind, validity rule and last-failure handling. A method whose
memory step uses other values than its settings' (a cap of its own, a single try) declares them through
the same accessors its code calls (e.g. `BookSettings.cap_text` beside `out_tokens`), so the card cannot drift from
what runs. `memloop.jobs.results.procedure_cards` lays these out per paper table and flags the differences.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

# the card's rows, in order, with their labels; every one is compared across the methods of a table
CARD_FIELDS: tuple[tuple[str, str], ...] = (
    ("step", "memory step (kind)"),
    ("output_cap", "output cap per step"),
    ("attempts", "attempts per step"),
    ("validity", "validity rule (what makes a step not ok)"),
    ("cut_output", "an output cut at the cap"),
    ("on_last_failure", "on the last failure"),
    ("decoding", "decoding"),
    ("temperature", "temperature"),
    ("retry_temperature", "retry temperature"),
    ("other_temperatures", "other steps' temperatures"),
    ("counter", "token counter for limits"),
)


@dataclass(frozen=True)
class Procedure:
    """One method's memory step on one task, in words and numbers a reader can compare side by side."""

    step: str  # the step kind that writes the memory once per chunk ("none": a single call)
    output_cap: str  # max_tokens of that step, and the tokenizer the engine counts it in
    attempts: int  # calls of that step before its last failure stands
    validity: str  # what makes the step "not ok"
    cut_output: str  # what happens to an output that reached the cap
    on_last_failure: str  # what the method does with the memory when every attempt failed
    decoding: str  # "free text" or "constrained (JSON schema)"
    temperature: float
    retry_temperature: str  # what a retry samples at ("no retries" with one attempt)
    counter: str  # the tokenizer the method's budgets (K, summary limits) count in
    other_temperatures: str = "-"  # steps sampled at another temperature (e.g. compression)
    compared: bool = True  # False: a single-call ceiling, shown but not compared with the memory methods
    cap_tokens: int = 0  # the largest cap known before the run (model tokens): the window check's

    def values(self) -> dict[str, str]:
        return {f.name: _text(getattr(self, f.name)) for f in fields(self) if f.name not in ("compared", "cap_tokens")}


def _text(v: Any) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def retry_text(settings: Any, attempts: int) -> str:
    """What a retry samples at (`memloop.eval.asking.reseed`: max(temperature, retry_temperature), fresh seed)."""
    if attempts <= 1:
        return "no retries"
    t = settings.temperature
    r = settings.retry_temperature
    return f"{max(t, r):g} (fresh seed)" if r > 0 else f"{t:g} (fresh seed)"


def counter_text(settings: Any) -> str:
    return "cl100k_base" if getattr(settings, "count_tokens", "model") == "cl100k" else "the model's tokenizer"


def decoding_text(settings: Any) -> str:
    return "constrained (JSON schema)" if getattr(settings, "decoding", "text") == "constrained" else "free text"


UNDECLARED = "not declared (the method has no step_rule)"


@dataclass(frozen=True)
class StepRule:
    """A class's declared memory step: its kind, validity rule, what a cut output meets, last-failure handling.
    The defaults say that nothing is declared rather than guess: the numbers a card shows still come from
    the settings `Trace.ask` applies."""

    step: str = UNDECLARED
    validity: str = UNDECLARED
    cut_output: str = UNDECLARED
    on_last_failure: str = UNDECLARED


def from_settings(
    settings: Any,
    rule: StepRule,
    *,
    output_cap: int | str | None = None,
    attempts: int | None = None,
    other_temperatures: str = "-",
    compared: bool = True,
) -> Procedure:
    """A procedure from the settings object the method's code reads (`output_cap`, `attempts`: where the
    method's memory step applies its own, which it then reads from the same accessor; a text `output_cap`
    states a cap the step computes per call, e.g. seed 000's `memory_cap`)."""
    cap = settings.max_tokens if output_cap is None else output_cap
    tries = settings.max_attempts if attempts is None else attempts
    cap_text = cap if isinstance(cap, str) else f"{cap} model tokens"
    return Procedure(
        step=rule.step,
        output_cap=cap_text,
        cap_tokens=settings.max_tokens if isinstance(cap, str) else cap,
        attempts=tries,
        validity=rule.validity,
        cut_output=rule.cut_output,
        on_last_failure=rule.on_last_failure,
        decoding=decoding_text(settings),
        temperature=float(settings.temperature),
        retry_temperature=retry_text(settings, tries),
        counter=counter_text(settings),
        other_temperatures=other_temperatures,
        compared=compared,
    )
