"""Loader registry: a run config names a task and keyword options; this returns its Samples.

The registry (`memloop.eval.registry.Registry`) is the single source of task names (`list_tasks()`). A
task's loader module may also define `truncate_gold(gold, n_chunks)`, which `truncate` uses to cut
the gold answer together with the chunks (SUMIE keeps one reference per paragraph), or
`truncate_sample(sample, n_chunks)`, which decides the kept chunks itself (BookSum keeps its target chapter).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable

from memloop.eval.datasets.errors import DatasetError, UnknownTaskError
from memloop.eval.datasets.sample import Sample
from memloop.eval.registry import Registry

Loader = Callable[..., list[Sample]]
GoldTruncator = Callable[[Any, int], Any]

# task -> "module:function"; modules import lazily so that one task's heavy deps never load for another.
LOADERS: Registry[Loader] = Registry(
    "dataset task",
    UnknownTaskError,
    aliases={"books": "book", "booookscore": "book", "loft-spider": "spider", "loft_spider": "spider"},
)
LOADERS.register("arxiv", "memloop.eval.datasets.arxiv:load_arxiv")
LOADERS.register("book", "memloop.eval.datasets.books:load_books")
LOADERS.register("booksum", "memloop.eval.datasets.booksum:load_booksum")
LOADERS.register("memoryagentbench", "memloop.eval.datasets.memoryagentbench:load_memoryagentbench")
LOADERS.register("repoqa", "memloop.eval.datasets.repoqa.loader:load_repoqa")
LOADERS.register("spider", "memloop.eval.datasets.spider.loader:load_spider")
LOADERS.register("sumie", "memloop.eval.datasets.sumie.loader:load_sumie_dataset")


def register_loader(task: str, loader: Loader | str) -> None:
    """Add (or replace) the loader of `task`: a callable or a "module:function" string."""
    LOADERS.register(task, loader)


def list_tasks() -> list[str]:
    """Task names `load_dataset` accepts (aliases such as "books" not included)."""
    return LOADERS.names()


tasks = list_tasks  # the name the CLI has used


def get_loader(task: str) -> Loader:
    return LOADERS.get(task)


def load_dataset(task: str, **options: Any) -> list[Sample]:
    """Samples of `task` ("sumie", "book", "repoqa", "spider", "arxiv"); options go to the task's loader.

    Options are checked against the loader's typed keyword parameters first (`memloop.eval.options`):
    an unknown name or a value of the wrong type (`chunk_tokens: abc`) raises a DatasetError that
    names it, so config mistakes fail before any work.
    """
    from memloop.eval.options import check_options

    loader = get_loader(task)
    samples = loader(**check_options(loader, options, f"dataset {task!r}", DatasetError))
    if not samples:
        raise DatasetError(f"dataset {task!r} with options {options} produced no samples: check the source and limits")
    return samples


def gold_truncator(task: str) -> GoldTruncator | None:
    """The `truncate_gold` of `task`'s loader module, or None (gold stays whole; unregistered tasks too)."""
    if task not in LOADERS:
        return None
    module = sys.modules.get(getattr(get_loader(task), "__module__", ""), None)
    return getattr(module, "truncate_gold", None)


def truncate(sample: Sample, n_chunks: int) -> Sample:
    """`sample` reduced to its first `n_chunks` chunks, gold cut to match where the task defines how.

    metadata gains `max_chunks` and `total_chunks` when chunks are dropped; a sample that already
    fits is returned as it is.
    """
    if isinstance(n_chunks, bool) or not isinstance(n_chunks, int) or n_chunks < 1:
        raise DatasetError(f"max_chunks must be a positive integer (got {n_chunks!r})")
    if len(sample.chunks) <= n_chunks:
        return sample
    module = (
        sys.modules.get(getattr(get_loader(sample.task), "__module__", ""), None) if sample.task in LOADERS else None
    )
    own = getattr(module, "truncate_sample", None)
    if own is not None:  # the task decides which chunks a reduced sample keeps (BookSum: its target chapter)
        return own(sample, n_chunks)
    gold = sample.gold
    cut = gold_truncator(sample.task)
    if cut is not None and gold is not None:
        gold = cut(gold, n_chunks)
    # a loader that stopped chunking early recorded the total as unknown (None)
    meta = dict(
        sample.metadata, max_chunks=n_chunks, total_chunks=sample.metadata.get("total_chunks", len(sample.chunks))
    )
    return dataclasses.replace(sample, chunks=sample.chunks[:n_chunks], gold=gold, metadata=meta)
