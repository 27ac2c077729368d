"""Output caps and window fit in the model's own tokens, for budgets that a paper counts in another tokenizer.

A method's budgets (seed 000's K, BooookScore's summary limits and merge packing) count in
`settings.count_tokens` (cl100k under the papers' configs), while `max_tokens` and the model's
window count the model's tokens. `model_tokens` converts a budget with the ratio of the two counts
measured on the text at hand, so an output cap leaves the room the budget means; `window_room` and
`fits_window` say what a request may use of the model's window, with its chat template.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from memloop.eval.asking import build_request

if TYPE_CHECKING:
    from memloop.eval.methods.base import Trace

# Tokens a chat template adds around one user message (SmolLM2's and Qwen's system turn and markers are
# about 30), kept free where the LLM cannot tell whether a request fits (`misfit`) itself.
CHAT_MARGIN = 64


def model_ratio(trace: "Trace", text: str) -> float:
    """Model tokens per budget token on `text` (1.0 when the budgets count the model's own tokens)."""
    if trace.settings.count_tokens == "model" or not text.strip():
        return 1.0
    return trace.llm.count_tokens(text) / max(1, trace.count_tokens(text))


def model_tokens(trace: "Trace", budget_tokens: int, text: str) -> int:
    """`budget_tokens` (counted as the method's budgets count) in the model's tokens, at `text`'s ratio."""
    return math.ceil(budget_tokens * model_ratio(trace, text))


def model_window(trace: "Trace", default: int) -> int:
    """The model's window per request (prompt + output) as the LLM reports it, else `default`."""
    reported = getattr(trace.llm, "context_tokens", None)
    return reported if isinstance(reported, int) and reported > 0 else default


def window_room(trace: "Trace", prompt: str, default_window: int) -> int:
    """Output tokens the model's window leaves after `prompt` (with a chat template's margin)."""
    return model_window(trace, default_window) - trace.llm.count_tokens(prompt) - CHAT_MARGIN


def fits_window(trace: "Trace", prompt: str, max_tokens: int, default_window: int) -> bool:
    """Whether `prompt` with `max_tokens` of output fits the model's window, in the model's tokens: the
    LLM's own check where it has one (the engine's, chat template included), else the count and a margin."""
    check = getattr(trace.llm, "misfit", None)
    if callable(check):
        return check(build_request(prompt, trace.settings.sampling(max_tokens))) is None
    return max_tokens <= window_room(trace, prompt, default_window)
