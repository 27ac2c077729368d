"""Loader registry: a run config names a task and keyword options; this returns its Samples."""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from eval.datasets.errors import DatasetError, UnknownTaskError
from eval.datasets.sample import Sample

Loader = Callable[..., list[Sample]]

# task -> "module:function"; modules import lazily so that one task's heavy deps never load for another.
_LOADERS: dict[str, str | Loader] = {
    "sumie": "eval.datasets.sumie.loader:load_sumie_dataset",
    "book": "eval.datasets.books:load_books",
    "repoqa": "eval.datasets.repoqa.loader:load_repoqa",
    "spider": "eval.datasets.spider.loader:load_spider",
    "arxiv": "eval.datasets.arxiv:load_arxiv",
}
_ALIASES = {"books": "book", "booookscore": "book", "loft-spider": "spider", "loft_spider": "spider"}


def register_loader(task: str, loader: Loader | str) -> None:
    """Add (or replace) the loader of `task`: a callable or a "module:function" string."""
    _LOADERS[task] = loader


def tasks() -> list[str]:
    """Names `load_dataset` accepts."""
    return sorted(_LOADERS)


def get_loader(task: str) -> Loader:
    name = _ALIASES.get(task, task)
    if name not in _LOADERS:
        raise UnknownTaskError(f"unknown dataset task {task!r}: choose one of {', '.join(tasks())}")
    target = _LOADERS[name]
    if callable(target):
        return target
    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)


def load_dataset(task: str, **options: Any) -> list[Sample]:
    """Samples of `task` ("sumie", "book", "repoqa", "spider", "arxiv"); options go to the task's loader.

    Unknown option names raise a DatasetError that lists the accepted ones, so config typos fail early.
    """
    loader = get_loader(task)
    params = inspect.signature(loader).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(options) - set(params))
        if unknown:
            raise DatasetError(f"dataset {task!r} does not take option(s) {', '.join(unknown)}: "
                               f"accepted are {', '.join(params)}")
    samples = loader(**options)
    if not samples:
        raise DatasetError(f"dataset {task!r} with options {options} produced no samples: check the source and limits")
    return samples
