"""Method names (as a run config spells them) -> implementations; the single source of method names."""

from __future__ import annotations

from typing import Any, Callable, TypeVar

from memloop.eval.errors import MethodError
from memloop.eval.methods.base import Method
from memloop.eval.registry import Registry

# The index: each name and the module whose `@method(name)` registers it, in the order `list_methods` gives.
# Modules import on first use, so that e.g. the KG embedder loads only when a run asks for kg-retrieval.
METHODS: Registry[type[Method]] = Registry("method", MethodError)
for _module, _names in (
    ("summaries", ("go-text", "go-json", "gu-text", "gu-json", "gm-text", "gm-json")),
    ("cok", ("cok",)),
    ("prism", ("prism-inplace", "prism-amendments")),
    ("booookscore", ("hier-merge", "inc-update")),
    ("kg_retrieval", ("kg-retrieval", "no-kg")),
    ("fart", ("fart-base", "fart-compressed", "fart-rolling")),
    ("long_context", ("long-context",)),
):
    for _name in _names:
        METHODS.index(_name, f"memloop.eval.methods.{_module}")

M = TypeVar("M", bound=type[Method])


def method(name: str) -> Callable[[M], M]:
    """Register the decorated Method class as `name`, the name a run config spells (also its `name`).

    The class's module must be in the index above, so the name is known before the module is imported.
    """
    register = METHODS.entry(name)

    def named(cls: M) -> M:
        cls.name = name
        return register(cls)

    return named


def method_class(name: str) -> type[Method]:
    """The Method class registered as `name` (a named error listing the known ones if there is none)."""
    return METHODS.get(name)


def get_method(name: str, **settings: Any) -> Method:
    """An instance of method `name` with its settings (unknown settings raise MethodError)."""
    return method_class(name)(**settings)


def list_methods() -> list[str]:
    """Every registered method's name."""
    return METHODS.names()


def template_manifest() -> dict[str, dict[str, str]]:
    """{method: {template_id: sha256}} for every registered method."""
    return {name: method_class(name).template_hashes() for name in METHODS}
