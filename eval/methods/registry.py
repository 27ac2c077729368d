"""Method names (as a run config spells them) -> implementations; the single source of method names."""
from __future__ import annotations

from typing import Any

from memloop.eval.errors import MethodError
from memloop.eval.methods.base import Method
from memloop.eval.registry import Registry

# name -> "module:Class"; modules import lazily so that e.g. the KG embedder loads only when used.
METHODS: Registry[type[Method]] = Registry("method", MethodError)
for _name, _target in (
    ("go-text", "memloop.eval.methods.summaries:GoText"),
    ("go-json", "memloop.eval.methods.summaries:GoJson"),
    ("gu-text", "memloop.eval.methods.summaries:GuText"),
    ("gu-json", "memloop.eval.methods.summaries:GuJson"),
    ("gm-text", "memloop.eval.methods.summaries:GmText"),
    ("gm-json", "memloop.eval.methods.summaries:GmJson"),
    ("cok", "memloop.eval.methods.cok:ChainOfKey"),
    ("prism-inplace", "memloop.eval.methods.prism:PrismInPlace"),
    ("prism-amendments", "memloop.eval.methods.prism:PrismAmendments"),
    ("hier-merge", "memloop.eval.methods.booookscore:HierarchicalMerging"),
    ("inc-update", "memloop.eval.methods.booookscore:IncrementalUpdating"),
    ("kg-retrieval", "memloop.eval.methods.kg_retrieval:KGRetrieval"),
    ("no-kg", "memloop.eval.methods.kg_retrieval:NoKG"),
    ("fart-base", "memloop.eval.methods.fart:FartBase"),
    ("fart-compressed", "memloop.eval.methods.fart:FartCompressed"),
    ("fart-rolling", "memloop.eval.methods.fart:FartRolling"),
    ("long-context", "memloop.eval.methods.long_context:LongContext"),
):
    METHODS.register(_name, _target)


def method_class(name: str) -> type[Method]:
    return METHODS.get(name)


def get_method(name: str, **settings: Any) -> Method:
    """An instance of method `name` with its settings (unknown settings raise MethodError)."""
    return method_class(name)(**settings)


def list_methods() -> list[str]:
    return METHODS.names()


def template_manifest() -> dict[str, dict[str, str]]:
    """{method: {template_id: sha256}} for every registered method."""
    return {name: method_class(name).template_hashes() for name in METHODS}
