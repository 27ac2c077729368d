"""One registry pattern for datasets, methods and judges: names -> entries, the single source of names.

An entry is the object itself, a lazy "module:attribute" string, or (`index`) the module whose
decorator (`entry`, beside the code: `@method("gu-json")`) registers the name when it is imported.
Either lazy form is imported on first `get`, so that one entry's heavy dependencies (e.g. the KG
embedder) never load for another, and `names()` knows every name before anything is imported.
Aliases map extra spellings to a registered name; `names()` lists registered names only, in
registration order. An unknown name raises the owner's error type with every registered name, so a
config typo says what to write instead.
"""

from __future__ import annotations

import importlib
from typing import Callable, Generic, Iterator, TypeVar

from memloop.eval.errors import EvalError

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, error: type[EvalError], aliases: dict[str, str] | None = None) -> None:
        self.kind = kind  # "method", "judge", "dataset task": how an error names an entry
        self.error = error
        self._entries: dict[str, T | str] = {}
        self._aliases: dict[str, str] = dict(aliases or {})

    def register(self, name: str, entry: T | str) -> None:
        """Add (or replace) `name`: the entry itself, or a "module:attribute" string imported on first use."""
        if not name or not isinstance(name, str):
            raise self.error(f"a {self.kind} needs a non-empty name (got {name!r})")
        self._entries[name] = entry

    def index(self, name: str, module: str) -> None:
        """Name `name` as registered by `module` (an importable module path, no ":"), whose decorator
        (`entry`) registers the implementation when `get` first imports it."""
        if ":" in module:
            raise self.error(
                f"{self.kind} {name!r}: index a module, not {module!r} (use `register` for module:attribute)"
            )
        self.register(name, module)

    def entry(self, name: str) -> Callable[[T], T]:
        """A decorator registering what it decorates as `name`, beside its code (the module must be indexed).
        An entry a user registered before the module was imported (`register`, eager or "module:attribute") is kept."""

        def register(obj: T) -> T:
            current = self._entries.get(name)
            if current is None or (isinstance(current, str) and ":" not in current):  # absent, or the index's
                self.register(name, obj)
            return obj

        return register

    def unregister(self, name: str) -> None:
        self._entries.pop(self.canonical(name))

    def canonical(self, name: str) -> str:
        """The registered name `name` stands for (itself, or what an alias points to); unknown names raise."""
        key = self._aliases.get(name, name)
        if key not in self._entries:
            raise self.error(f"unknown {self.kind} {name!r}: choose one of {', '.join(sorted(self._entries))}")
        return key

    def get(self, name: str) -> T:
        key = self.canonical(name)
        entry = self._entries[key]
        if isinstance(entry, str) and ":" in entry:
            module, _, attr = entry.partition(":")
            entry = getattr(importlib.import_module(module), attr)
            self._entries[key] = entry
        elif isinstance(entry, str):  # an indexed module: importing it runs its decorators
            importlib.import_module(entry)
            entry = self._entries[key]
            if isinstance(entry, str):
                raise self.error(
                    f"{self.kind} {key!r} is indexed to module {entry} but that module registers no "
                    f"{self.kind} of that name: decorate its implementation with the {self.kind}'s "
                    "decorator, or correct the index"
                )
        return entry  # type: ignore[return-value]

    def names(self) -> list[str]:
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._aliases.get(name, name) in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._entries)
