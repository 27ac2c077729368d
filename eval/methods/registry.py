"""Method names (as a run config spells them) -> implementations."""
from __future__ import annotations

import importlib
from typing import Any

from eval.errors import MethodError
from eval.methods.base import Method

# name -> "module:Class"; modules import lazily so that e.g. the KG embedder loads only when used.
METHODS: dict[str, str] = {
    "go-text": "eval.methods.summaries:GoText",
    "go-json": "eval.methods.summaries:GoJson",
    "gu-text": "eval.methods.summaries:GuText",
    "gu-json": "eval.methods.summaries:GuJson",
    "gm-text": "eval.methods.summaries:GmText",
    "gm-json": "eval.methods.summaries:GmJson",
    "cok": "eval.methods.cok:ChainOfKey",
    "prism-inplace": "eval.methods.prism:PrismInPlace",
    "prism-amendments": "eval.methods.prism:PrismAmendments",
    "hier-merge": "eval.methods.booookscore:HierarchicalMerging",
    "inc-update": "eval.methods.booookscore:IncrementalUpdating",
    "kg-retrieval": "eval.methods.kg_retrieval:KGRetrieval",
    "fart-base": "eval.methods.fart:FartBase",
    "fart-compressed": "eval.methods.fart:FartCompressed",
    "fart-rolling": "eval.methods.fart:FartRolling",
}


def method_class(name: str) -> type[Method]:
    if name not in METHODS:
        raise MethodError(f"unknown method {name!r}; choose one of: {', '.join(METHODS)}")
    module, cls = METHODS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def get_method(name: str, **settings: Any) -> Method:
    """An instance of method `name` with its settings (unknown settings raise MethodError)."""
    return method_class(name)(**settings)


def list_methods() -> list[str]:
    return list(METHODS)


def template_manifest() -> dict[str, dict[str, str]]:
    """{method: {template_id: sha256}} for every registered method."""
    return {name: method_class(name).template_hashes() for name in METHODS}
