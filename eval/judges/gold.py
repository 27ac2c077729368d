"""What a judge needs in a sample's gold, decided by the gold itself rather than by a list of tasks.

A reference summary travels as `{"reference": text, ...}` (the book loader's references, arXiv's
abstract; KGScore also reads `"entities"` there), so any task whose samples carry one can be scored
by ROUGE and KGScore, and a sample without one is named before the run starts
(`memloop.jobs.run.workload`), not found mid-run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


def reference_of(gold: Any) -> str | None:
    """The reference summary in `gold` (`{"reference": text}`, or a bare text given directly to a
    judge), or None when it carries none."""
    ref = gold.get("reference") if isinstance(gold, dict) else gold
    return ref if isinstance(ref, str) and ref.strip() else None


def carries_reference(gold: Any) -> bool:
    """True when a sample's gold is a reference-summary record (`{"reference": non-empty text}`).
    A bare string is not taken for one: other tasks' gold is a string too (RepoQA's function name)."""
    return isinstance(gold, dict) and reference_of(gold) is not None


@dataclass(frozen=True)
class GoldNeed:
    """A judge's requirement on every sample it scores: what it is, the test, and how to supply it."""

    what: str
    present: Callable[[Any], bool]
    remedy: str


REFERENCE_SUMMARY = GoldNeed(
    "a reference summary",
    carries_reference,
    "give each sample its reference summary (books: a `summary` field in a JSON/JSONL book collection; "
    "arXiv: the abstract)",
)
