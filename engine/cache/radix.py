"""Radix prefix cache over token ids at page granularity (the design of SGLang's RadixCache).

Each edge holds a run of whole pages: its token ids (a multiple of the page size) and the ids of the
KV pages that store them. A lookup returns the longest cached prefix of *any* earlier request, so
the n samples of one prompt and every step of a memory loop share the pages of what they have in
common. The tree holds one pool reference per page it caches; a running sequence holds its own
references. Eviction removes least-recently-used leaves whose pages nobody else references (pool
refcount 1), so a page is never freed while a sequence reads it.
"""

from __future__ import annotations

import heapq
import itertools
from typing import Sequence

from memloop.engine.cache.kv_cache import PagePool

_clock = itertools.count(1)


class _Node:
    __slots__ = ("key", "pages", "children", "parent", "last_access")

    def __init__(self, key: tuple[int, ...], pages: list[int], parent: "_Node | None") -> None:
        self.key = key
        self.pages = pages
        self.children: dict[tuple[int, ...], _Node] = {}
        self.parent = parent
        self.last_access = next(_clock)


class RadixCache:
    """Longest-prefix match, insert, and LRU eviction over a `PagePool`."""

    def __init__(self, pool: PagePool) -> None:
        self.pool = pool
        self.ps = pool.page_size
        self.root = _Node((), [], None)
        self.num_pages = 0  # pages the tree references

    # -- helpers ---------------------------------------------------------------------------------
    def _page_key(self, tokens: Sequence[int], start: int) -> tuple[int, ...]:
        return tuple(tokens[start : start + self.ps])

    def _match_len(self, key: tuple[int, ...], tokens: Sequence[int], start: int) -> int:
        """Tokens of `key` matching `tokens[start:]`, counted in whole pages."""
        n = 0
        ps = self.ps
        while n < len(key) and start + n + ps <= len(tokens):
            if tuple(tokens[start + n : start + n + ps]) != key[n : n + ps]:
                break
            n += ps
        return n

    def _split(self, node: _Node, at: int) -> _Node:
        """Split `node`'s edge after `at` tokens (a page multiple); returns the new upper node."""
        upper = _Node(node.key[:at], node.pages[: at // self.ps], node.parent)
        upper.last_access = node.last_access
        assert node.parent is not None
        node.parent.children[node.key[: self.ps]] = upper
        node.key = node.key[at:]
        node.pages = node.pages[at // self.ps :]
        node.parent = upper
        upper.children[node.key[: self.ps]] = node
        return upper

    # -- public ----------------------------------------------------------------------------------
    def match(self, tokens: Sequence[int]) -> list[int]:
        """Pages of the longest cached whole-page prefix of `tokens` (marks the path recently used)."""
        node, pos, pages = self.root, 0, []
        now = next(_clock)
        while pos + self.ps <= len(tokens):
            child = node.children.get(self._page_key(tokens, pos))
            if child is None:
                break
            n = self._match_len(child.key, tokens, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            pages.extend(child.pages)
            pos += n
            node = child
        return pages

    def insert(self, tokens: Sequence[int], pages: Sequence[int]) -> int:
        """Cache `pages` as holding `tokens` (whole pages only); returns how many pages were adopted.

        Where the tree already caches a prefix, its own pages stay and the caller's copies are left
        to the caller; the remainder becomes a new leaf that takes one reference on each page.
        """
        n_full = min(len(tokens) // self.ps, len(pages))
        tokens = tokens[: n_full * self.ps]
        pages = pages[:n_full]
        node, pos = self.root, 0
        now = next(_clock)
        while pos < len(tokens):
            child = node.children.get(self._page_key(tokens, pos))
            if child is None:
                new_pages = list(pages[pos // self.ps :])
                leaf = _Node(tuple(tokens[pos:]), new_pages, node)
                leaf.last_access = now
                node.children[leaf.key[: self.ps]] = leaf
                self.pool.incref(new_pages)
                self.num_pages += len(new_pages)
                return len(new_pages)
            n = self._match_len(child.key, tokens, pos)
            if n < len(child.key):
                child = self._split(child, n)
            child.last_access = now
            pos += n
            node = child
        return 0

    def _evictable(self, node: _Node) -> bool:
        return node is not self.root and not node.children and all(self.pool.refcount[p] == 1 for p in node.pages)

    def evict(self, num_pages: int) -> int:
        """Free at least `num_pages` pages by dropping LRU unreferenced leaves; returns pages freed."""
        heap = [(n.last_access, id(n), n) for n in self._nodes() if self._evictable(n)]
        heapq.heapify(heap)
        freed = 0
        while freed < num_pages and heap:
            _, _, node = heapq.heappop(heap)
            if not self._evictable(node):  # a sequence took a reference since
                continue
            parent = node.parent
            assert parent is not None
            del parent.children[node.key[: self.ps]]
            freed += self.pool.decref(node.pages)
            self.num_pages -= len(node.pages)
            if self._evictable(parent):
                heapq.heappush(heap, (parent.last_access, id(parent), parent))
        return freed

    def evictable_pages(self) -> int:
        """Pages eviction could free now: whole subtrees nobody but the tree references."""

        def walk(node: _Node) -> tuple[int, bool]:
            total, all_free = 0, True
            for child in node.children.values():
                t, f = walk(child)
                total += t
                all_free &= f
            mine = all(self.pool.refcount[p] == 1 for p in node.pages)
            if node is not self.root and all_free and mine:
                return total + len(node.pages), True
            return total, False

        return walk(self.root)[0]

    def _nodes(self) -> list[_Node]:
        out, stack = [], [self.root]
        while stack:
            n = stack.pop()
            out.append(n)
            stack.extend(n.children.values())
        return out

    def cached_pages(self) -> list[int]:
        """Every page the tree references (for invariant checks)."""
        return [p for n in self._nodes() for p in n.pages]

    def clear(self) -> int:
        """Evict everything evictable."""
        return self.evict(self.num_pages)
