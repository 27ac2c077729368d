"""Property tests of the page pool and the radix prefix cache (model-free)."""

from __future__ import annotations

from collections import Counter

import hypothesis.strategies as st
import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from memloop.engine.cache.kv_cache import SCRATCH_PAGE, OutOfPagesError, PagePool
from memloop.engine.cache.radix import RadixCache

PS = 2
tokens_st = st.lists(st.integers(0, 2), min_size=0, max_size=12)


class RadixMachine(RuleBasedStateMachine):
    """Sequences come and go like requests: match, take pages, write, cache, release; the pool is small."""

    def __init__(self) -> None:
        super().__init__()
        self.pool = PagePool(num_pages=14, page_size=PS)
        self.tree = RadixCache(self.pool)
        self.content: dict[int, tuple[int, ...]] = {}  # what each page holds (stands in for K/V)
        self.held: list[tuple[tuple[int, ...], list[int]]] = []  # running sequences: tokens, block table

    def _admit(self, tokens: list[int]) -> list[int] | None:
        cached = self.tree.match(tokens)
        # whatever the tree returns must hold exactly these tokens
        for i, p in enumerate(cached):
            assert self.content[p] == tuple(tokens[i * PS : (i + 1) * PS])
        n_new = -(-len(tokens) // PS) - len(cached)
        self.pool.incref(cached)
        if n_new > self.pool.num_free:
            self.tree.evict(n_new - self.pool.num_free)
        if n_new > self.pool.num_free:
            self.pool.decref(cached)
            return None
        fresh = self.pool.alloc(n_new)
        for j, p in enumerate(fresh):
            i = len(cached) + j
            self.content[p] = tuple(tokens[i * PS : (i + 1) * PS])
        return cached + fresh

    @rule(tokens=tokens_st)
    def run_request(self, tokens: list[int]) -> None:
        pages = self._admit(tokens)
        if pages is None:
            return
        self.tree.insert(tokens, pages)
        self.held.append((tuple(tokens), pages))
        # the whole-page prefix is now cached
        again = self.tree.match(tokens)
        assert len(again) == len(tokens) // PS

    @precondition(lambda self: self.held)
    @rule(i=st.integers(0, 100))
    def release(self, i: int) -> None:
        _, pages = self.held.pop(i % len(self.held))
        self.pool.decref(pages)

    @rule(n=st.integers(0, 14))
    def evict(self, n: int) -> None:
        before = {p: self.content[p] for _, pages in self.held for p in pages}
        free_before = self.pool.num_free
        freed = self.tree.evict(n)
        assert self.pool.num_free == free_before + freed
        # no page a running sequence holds was freed or changed
        for _, pages in self.held:
            for p in pages:
                assert self.pool.refcount[p] >= 1 and self.content[p] == before[p]
        if freed < n:  # everything evictable is gone
            assert self.tree.evictable_pages() == 0

    @invariant()
    def refcounts_are_exact(self) -> None:
        refs = Counter(self.tree.cached_pages())
        for _, pages in self.held:
            refs.update(pages)
        free = set(self.pool._free)
        for p in range(1, self.pool.num_pages):
            assert self.pool.refcount[p] == refs.get(p, 0), p
            assert (p in free) == (refs.get(p, 0) == 0)
        assert self.pool.refcount[SCRATCH_PAGE] == 1 and SCRATCH_PAGE not in free
        assert self.tree.num_pages == len(self.tree.cached_pages())


TestRadixMachine = RadixMachine.TestCase
TestRadixMachine.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)


def test_longest_prefix_of_any_earlier_request() -> None:
    pool = PagePool(64, 4)
    tree = RadixCache(pool)
    a = list(range(16))
    b = list(range(8)) + [99] * 8
    pa = pool.alloc(4)
    tree.insert(a, pa)
    pb = tree.match(b)
    assert pb == pa[:2]  # shared first two pages, split at the page boundary
    pb = pb + pool.alloc(2)
    tree.insert(b, pb)
    # a third request sharing a's prefix gets a's pages back though b came later
    assert tree.match(a[:12] + [7, 7, 7, 7]) == pa[:3]
    # a partial page never matches
    assert tree.match(a[:3]) == []


def test_eviction_is_lru_and_spares_referenced_pages() -> None:
    pool = PagePool(9, 2)
    tree = RadixCache(pool)
    old, new = pool.alloc(2), pool.alloc(2)
    tree.insert([1, 1, 1, 1], old)
    tree.insert([2, 2, 2, 2], new)
    pool.decref(old + new)  # sequences finished: only the tree holds them
    tree.match([1, 1, 1, 1])  # touch `old`: `new` is now least recently used
    assert tree.evict(1) == 2
    assert tree.match([2, 2, 2, 2]) == [] and tree.match([1, 1, 1, 1]) == old
    pool.incref(old)  # a running sequence reads them
    assert tree.evict(10) == 0 and pool.refcount[old].tolist() == [2, 2]


def test_pool_refuses_overdraw() -> None:
    pool = PagePool(3, 2)
    pool.alloc(2)
    with pytest.raises(OutOfPagesError):
        pool.alloc(1)
