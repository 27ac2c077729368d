"""The common sample type every dataset loader produces and every method consumes."""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Sample:
    """One unit of work: an entity (SUMIE), a book, a repository, a database, a document.

    `id` is stable across runs (derived from content or the source's own id), so a re-run can skip it.
    `gold` is JSON-serialisable and task-specific (documented by each loader).
    """

    id: str
    task: str  # "sumie" | "book" | "repoqa" | "spider" | "arxiv"
    chunks: tuple[str, ...]
    query: str | None = None
    gold: Any = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task": self.task,
            "chunks": list(self.chunks),
            "query": self.query,
            "gold_json": json.dumps(self.gold, sort_keys=True),
            "metadata_json": json.dumps(self.metadata, sort_keys=True),
        }


def slug(text: str, max_len: int = 60) -> str:
    """A lower-case ASCII identifier fragment for sample ids ("The Copper Fig" -> "the-copper-fig")."""
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[^a-z0-9]+", "-", ascii_text.lower()).strip("-")[:max_len] or "x"
