"""A unit's identity, below both the run (which makes units) and the tables (which record them).

A unit is one (dataset, sample, method, repeat). Its key is how storage records it exactly once and
how a resume finds it; `UnitLike` is what the row builders read of the run's `memloop.jobs.run.workload.Unit`.
"""

from __future__ import annotations

from typing import Any, Protocol


class _Keyed(Protocol):
    @property
    def key(self) -> str: ...


class _SampleLike(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def task(self) -> str: ...

    @property
    def metadata(self) -> dict[str, Any]: ...


class UnitLike(Protocol):
    @property
    def key(self) -> str: ...

    @property
    def dataset(self) -> _Keyed: ...

    @property
    def sample(self) -> _SampleLike: ...

    @property
    def method(self) -> _Keyed: ...

    @property
    def repeat(self) -> int: ...

    @property
    def seed(self) -> int: ...

    @property
    def chunk_tokens(self) -> int | None: ...

    @property
    def input_tokens(self) -> int | None: ...


def unit_key(dataset: str, sample_id: str, method: str, repeat: int) -> str:
    return f"{dataset}|{sample_id}|{method}|{repeat}"
