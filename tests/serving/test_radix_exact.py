"""The radix prefix cache on trees built by hand (model-free): exactly which pages a lookup reuses,
how many pages an insert adopts, which leaves an eviction drops and how many pages it reports
evictable. test_radix.py's state machine checks the invariants on random traffic; these pin the
numbers (scripts/mutation.py's `radix` target runs them first)."""

from __future__ import annotations

import pytest
from memloop.engine.cache.kv_cache import PagePool
from memloop.engine.cache.radix import RadixCache

# microseconds of work each: a lookup or insert that stops advancing (and so never ends) fails by name
pytestmark = pytest.mark.timeout(20)

PS = 2
A = [1, 2, 3, 4, 5, 6, 7, 8]  # four pages
B = [1, 2, 3, 4, 9, 9, 9, 9]  # shares A's first two pages
C = [1, 2, 3, 4, 9, 9, 7, 7]  # shares B's first three pages


def _tree(num_pages: int = 32) -> tuple[PagePool, RadixCache]:
    pool = PagePool(num_pages, PS)
    return pool, RadixCache(pool)


def test_a_lookup_reuses_every_whole_page_of_one_long_edge_and_never_a_partial_one() -> None:
    pool, tree = _tree()
    pa = pool.alloc(4)
    assert tree.insert(A, pa) == 4
    assert tree.match(A) == pa  # the last page ends exactly where the tokens end
    assert tree.match(A + [0]) == pa
    assert tree.match(A[:7]) == pa[:3]
    assert tree.match(A[:6] + [0, 0]) == pa[:3]  # a mismatch inside the edge's last page
    assert tree.match([1, 2, 0, 4, 5, 6, 7, 8]) == pa[:1]
    assert tree.match([0] + A[1:]) == [] and tree.match([]) == []


def test_a_lookup_walks_three_levels_of_split_edges() -> None:
    pool, tree = _tree()
    pa = pool.alloc(4)
    tree.insert(A, pa)
    pb = pa[:2] + pool.alloc(2)
    assert tree.insert(B, pb) == 2  # the shared two pages stay the tree's own
    pc = pb[:3] + pool.alloc(1)
    assert tree.insert(C, pc) == 1
    assert tree.match(A) == pa and tree.match(B) == pb and tree.match(C) == pc
    assert tree.match(C[:6] + [8, 8]) == pc[:3]
    assert tree.match([1, 2, 3, 4, 9, 9]) == pb[:3]


def test_an_insert_adopts_only_the_pages_the_tree_lacks_and_only_whole_ones() -> None:
    pool, tree = _tree()
    pa = pool.alloc(5)
    assert tree.insert(A + [5], pa) == 4  # the fifth page is partial: not cached
    assert tree.num_pages == 4 and pool.refcount[pa].tolist() == [2, 2, 2, 2, 1]
    assert tree.insert(A, pa) == 0  # all cached already: nothing adopted, no reference taken
    assert pool.refcount[pa].tolist() == [2, 2, 2, 2, 1]
    assert tree.insert(A[:4], pa[:1]) == 0  # fewer pages than tokens: the pages decide
    longer = A + [6, 6, 5, 5]
    pl = pa[:4] + pool.alloc(2)
    assert tree.insert(longer, pl) == 2
    longest, last = longer + [4, 4], pool.alloc(1)
    assert tree.insert(longest, pl + last) == 1
    assert tree.insert(longer, pl) == 0
    assert tree.match(longest) == pl + last and tree.match(longer + [4]) == pl
    assert tree.num_pages == len(tree.cached_pages()) == 7


def _two_leaves() -> tuple[PagePool, RadixCache, list[int], list[int]]:
    """Two 2-page entries nobody else references; `old` touched last, so `new` is least recently used."""
    pool, tree = _tree(9)
    old, new = pool.alloc(2), pool.alloc(2)
    tree.insert([1, 1, 1, 1], old)
    tree.insert([2, 2, 2, 2], new)
    pool.decref(old + new)
    tree.match([1, 1, 1, 1])
    return pool, tree, old, new


def test_an_eviction_stops_once_it_has_freed_what_was_asked() -> None:
    pool, tree, old, new = _two_leaves()
    free = pool.num_free
    assert tree.evict(2) == 2 and pool.num_free == free + 2
    assert tree.match([2, 2, 2, 2]) == [] and tree.match([1, 1, 1, 1]) == old
    assert tree.num_pages == 2 and tree.evict(0) == 0 and tree.match([1, 1, 1, 1]) == old


def _a_then_b(pool: PagePool, tree: RadixCache) -> tuple[list[int], list[int]]:
    """Sequence A runs and is cached, then B, which reuses A's first two pages (taking a reference
    on them as a running sequence does); both sequences still hold their pages."""
    pa = pool.alloc(4)
    tree.insert(A, pa)
    shared = tree.match(B)
    pool.incref(shared)
    pb = shared + pool.alloc(2)
    tree.insert(B, pb)
    return pa, pb


def test_an_eviction_frees_a_parent_after_its_children_and_counts_every_page() -> None:
    pool, tree = _tree()
    pa, pb = _a_then_b(pool, tree)
    pool.decref(pb)
    pool.decref(pa)
    assert tree.evictable_pages() == 6
    assert tree.evict(5) == 6 and tree.num_pages == 0 and pool.num_free == pool.capacity
    assert tree.match(A) == [] and tree.cached_pages() == []


def test_a_leaf_a_sequence_still_reads_is_never_evicted_nor_its_parent() -> None:
    pool, tree = _tree()
    pa, pb = _a_then_b(pool, tree)
    pool.decref(pa)  # B's sequence is still running
    assert tree.evictable_pages() == 2  # A's own two pages; the shared prefix is under B
    assert tree.clear() == 2
    assert tree.match(A) == pa[:2] and tree.match(B) == pb and tree.num_pages == 4


def test_evictable_pages_counts_whole_subtrees_nobody_else_references() -> None:
    """root -> [1,2] (1 page, free) -> {[3,3] referenced outside the tree, [4,4] free};
    root -> [5,5,5,5] (2 pages, free) -> {[6,6], [7,7]} (1 page each, free).
    Evictable: [4,4] (1) and the whole [5,5,5,5] subtree (4): 5 pages, exactly what eviction then
    frees; [1,2] is not (its child stays, so it is no leaf), though nothing outside references it."""
    pool, tree = _tree()
    held = pool.alloc(2)
    tree.insert([1, 2, 3, 3], held)  # the held branch first: the free sibling comes after it
    free1 = held[:1] + pool.alloc(1)
    tree.insert([1, 2, 4, 4], free1)
    p5 = pool.alloc(3)
    tree.insert([5, 5, 5, 5, 6, 6], p5)
    p7 = p5[:2] + pool.alloc(1)
    tree.insert([5, 5, 5, 5, 7, 7], p7)
    pool.decref(free1[1:] + p5 + p7[2:])
    pool.decref(held[:1])  # the shared [1,2] page: only the tree's reference left
    assert pool.refcount[held].tolist() == [1, 2]
    assert tree.evictable_pages() == 5
    assert tree.clear() == 5
    assert tree.match([1, 2, 3, 3]) == held and tree.match([1, 2, 4, 4]) == held[:1]
    assert tree.evictable_pages() == 0


def test_an_insert_through_a_cached_prefix_marks_it_recently_used() -> None:
    """A sequence that finishes writing what the tree already held (inserting it again) used it last:
    the other entry is the least recently used one and goes first."""
    pool, tree, old, new = _two_leaves()
    pool.incref(new)
    assert tree.insert([2, 2, 2, 2], new) == 0  # `new` again: now the most recent
    pool.decref(new)
    assert tree.evict(1) == 2
    assert tree.match([1, 1, 1, 1]) == [] and tree.match([2, 2, 2, 2]) == new
