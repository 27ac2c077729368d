"""The paged KV cache: a pool of fixed-size pages, per-page reference counts, and the memory budget.

Every layer's keys and values live in two device arrays shaped
`[layers, kv_heads, num_pages, page_size, head_dim]` (or a list of per-layer arrays on CPU); a sequence owns an ordered
list of page ids
(its block table). Pages are shared between sequences and the prefix cache by reference counting:
a page goes back to the free list only when its last holder lets go, so a page is never reused while
anyone still reads it. Page 0 is reserved as the scratch page that padded token slots write into.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from memloop.engine.errors import EngineError, RequestError

SCRATCH_PAGE = 0


class CacheBudgetError(EngineError):
    """The KV-cache budget is invalid or too small to hold a single request."""


@dataclass(frozen=True)
class KVLayout:
    """Shape of one page across all layers (what a page costs in memory)."""

    layers: int
    kv_heads: int
    head_dim: int
    page_size: int
    dtype_bytes: int
    scale_bytes: int = 0  # per cached token and KV head (an int8 cache's f32 scale)

    @property
    def page_bytes(self) -> int:
        # keys and values
        return 2 * self.layers * self.page_size * self.kv_heads * (self.head_dim * self.dtype_bytes + self.scale_bytes)


def device_memory_bytes() -> int | None:
    """Memory of the first accelerator, or None where JAX does not report it (CPU)."""
    import jax

    dev = jax.devices()[0]
    try:
        stats = dev.memory_stats()
    except Exception:  # CPU backends raise or return None
        return None
    if not stats:
        return None
    return int(stats.get("bytes_limit") or 0) or None


def pages_for_budget(layout: KVLayout, budget: float | int) -> int:
    """Number of pages a budget buys.

    `budget` is either a fraction of device memory (0 < budget <= 1; on CPU, of 8 GiB, since the host
    is shared with everything else) or a byte count (> 1).
    """
    if budget <= 0:
        raise CacheBudgetError(
            f"KV-cache budget must be positive, got {budget}; pass bytes or a fraction of device memory"
        )
    if budget <= 1:
        total = device_memory_bytes() or 8 * 1024**3
        nbytes = int(total * budget)
    else:
        nbytes = int(budget)
    pages = nbytes // layout.page_bytes
    if pages < 2:
        raise CacheBudgetError(
            f"a KV-cache budget of {nbytes} bytes holds {pages} pages of {layout.page_bytes} bytes; "
            "raise the budget (one page plus the scratch page is the minimum)"
        )
    return int(pages)


class OutOfPagesError(EngineError):
    """Raised by the pool when asked for more pages than are free; the scheduler prevents this."""


class PagePool:
    """Free list plus reference counts over `num_pages` page ids (page 0 is the reserved scratch page)."""

    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages < 2:
            raise CacheBudgetError("the page pool needs at least two pages (one is the scratch page)")
        if page_size < 1:
            raise CacheBudgetError(f"page size must be >= 1, got {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self.refcount = np.zeros(num_pages, dtype=np.int64)
        self.refcount[SCRATCH_PAGE] = 1  # never handed out
        # pop from the end: low page ids first, which keeps gathers local
        self._free = list(range(num_pages - 1, 0, -1))

    @property
    def capacity(self) -> int:
        """Pages that can ever be handed out (all but the scratch page)."""
        return self.num_pages - 1

    @property
    def num_free(self) -> int:
        return len(self._free)

    def alloc(self, n: int) -> list[int]:
        """`n` fresh pages, each with reference count 1."""
        if n > len(self._free):
            raise OutOfPagesError(f"asked for {n} pages, {len(self._free)} free")
        pages = [self._free.pop() for _ in range(n)]
        self.refcount[pages] = 1
        return pages

    def incref(self, pages: list[int]) -> None:
        for p in pages:
            if self.refcount[p] <= 0:
                raise AssertionError(f"incref of free page {p}")
            self.refcount[p] += 1

    def decref(self, pages: list[int]) -> int:
        """Drop one reference from each page; returns how many pages became free."""
        freed = 0
        for p in pages:
            if p == SCRATCH_PAGE or self.refcount[p] <= 0:
                raise AssertionError(f"decref of page {p} with refcount {self.refcount[p]}")
            self.refcount[p] -= 1
            if self.refcount[p] == 0:
                self._free.append(p)
                freed += 1
        return freed


def pages_needed(tokens: int, page_size: int) -> int:
    return -(-tokens // page_size)


def check_fits(prompt_tokens: int, max_tokens: int, pool: PagePool, max_context: int) -> None:
    """Reject a request that could never be served (instead of truncating it)."""
    total = prompt_tokens + max_tokens
    if prompt_tokens == 0:
        raise RequestError("the prompt is empty; send at least one token of text")
    if total > max_context:
        raise RequestError(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) = {total} exceeds the model context "
            f"of {max_context} tokens; shorten the prompt or lower max_tokens"
        )
    if pages_needed(total, pool.page_size) > pool.capacity:
        raise RequestError(
            f"prompt ({prompt_tokens} tokens) + max_tokens ({max_tokens}) needs more KV-cache pages than the "
            f"whole pool holds ({pool.capacity} pages of {pool.page_size} tokens); raise the engine's page budget"
        )
