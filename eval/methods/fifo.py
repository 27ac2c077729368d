"""FIFO truncation: keep the last tokens of a long input that fit the model, drop the oldest.

MemoryAgentBench's long-context agents (its `agent.py`, `_truncate_context_if_needed`) keep the context's
last `input_length_limit` tokens (the model's window less the output and a prompt buffer) when the
context is longer: what was read first is forgotten first. memloop asks the model's own fit check rather
than a fixed buffer: the longest tail of the input, in whole cl100k_base tokens (the benchmark cuts in
tiktoken tokens too), whose prompt the model still serves. The tail is found by bisection over the
number of kept tokens, starting from the model's window, so only prompts about the window's size are
counted.
"""

from __future__ import annotations

from typing import Any, Callable

from memloop.eval.tokens import cl100k_base

COUNTER = "cl100k_base"


def keep_last_fitting(
    text: str, fits: Callable[[str], bool], window: int | None = None
) -> tuple[str | None, dict[str, Any]]:
    """(the longest tail of `text` for which `fits` holds, what was kept); the text itself when it fits,
    None when not even an empty input fits. `window` (the model's tokens) is where the search starts."""
    if fits(text):
        return text, {"fifo_truncated": False}
    enc = cl100k_base()
    ids = enc.encode_ordinary(text)
    n = len(ids)

    def tail(k: int) -> str:
        return enc.decode(ids[n - k :]) if k > 0 else ""

    if not fits(""):
        return None, {"fifo_truncated": False, "input_tokens": n, "kept_tokens": 0, "counted_in": COUNTER}
    lo, hi = 0, n  # fits(tail(lo)) holds, fits(tail(hi)) does not
    if window is not None and 0 < window < n:
        lo, hi = (window, hi) if fits(tail(window)) else (lo, window)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(tail(mid)) else (lo, mid)
    return tail(lo), {
        "fifo_truncated": True,
        "input_tokens": n,
        "kept_tokens": lo,
        "dropped_tokens": n - lo,
        "counted_in": COUNTER,
    }
