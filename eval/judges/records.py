"""The result of one judge call: scores plus every raw judgment behind them.

A `Judgment` keeps what is needed to audit a score and recompute it without calling the judge
again: the rendered prompt, every raw answer (failed attempts included, with the reason), the
parsed label and the token usage. `JudgeResult` turns itself into plain-dict rows for the jobs
layer's `judgments` and `scores` Parquet tables (see the package docstring for the columns).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memloop.eval.llm import Usage, usage_sum


@dataclass
class Judgment:
    """One judged item (a sentence, a predicted pair, an extraction) and how the verdict was reached."""

    item: str  # what was judged, readable on its own (the sentence, "attr: value", "generated summary")
    label: Any = None  # the parsed verdict, JSON-serialisable; None when no valid answer was obtained
    valid: bool = True
    source: str = "llm"  # "llm" | "replay" (read from an annotation file) | "rule" (deterministic)
    prompt: str | None = None
    template_id: str | None = None
    template_sha256: str | None = None
    constrained: bool = False  # the answer was decoded under a JSON Schema
    raw: str | None = None  # the last raw answer
    failures: list[dict[str, str]] = field(default_factory=list)  # [{"raw": ..., "reason": ...}] per rejected attempt
    usage: Usage = field(default_factory=Usage)

    @property
    def retries(self) -> int:
        return len(self.failures) if self.valid else max(0, len(self.failures) - 1)

    def to_record(self) -> dict[str, Any]:
        return {
            "item": self.item,
            "label": self.label,
            "valid": self.valid,
            "source": self.source,
            "prompt": self.prompt,
            "template_id": self.template_id,
            "template_sha256": self.template_sha256,
            "constrained": self.constrained,
            "raw": self.raw,
            "failures": list(self.failures),
            "retries": self.retries,
            "usage": {
                "prompt_tokens": self.usage.prompt_tokens,
                "cached_tokens": self.usage.cached_tokens,
                "decoded_tokens": self.usage.decoded_tokens,
            },
        }

    @classmethod
    def from_record(cls, d: dict[str, Any]) -> "Judgment":
        return cls(
            item=d["item"],
            label=d.get("label"),
            valid=d.get("valid", True),
            source=d.get("source", "llm"),
            prompt=d.get("prompt"),
            template_id=d.get("template_id"),
            template_sha256=d.get("template_sha256"),
            constrained=d.get("constrained", False),
            raw=d.get("raw"),
            failures=list(d.get("failures") or []),
            usage=Usage(**(d.get("usage") or {})),
        )


@dataclass(frozen=True)
class Score:
    metric: str
    value: float
    turn: int | None = None  # per-turn metrics (SUMIE); None for whole-sample metrics


@dataclass
class JudgeResult:
    """What every judge returns for one output."""

    judge: str
    scores: list[Score]
    judgments: list[Judgment] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)  # judge-specific extras (e.g. extracted edges)

    def score(self, metric: str, turn: int | None = None) -> float:
        for s in self.scores:
            if s.metric == metric and s.turn == turn:
                return s.value
        raise KeyError(f"{self.judge} has no metric {metric!r} at turn {turn}")

    @property
    def usage(self) -> Usage:
        return usage_sum(j.usage for j in self.judgments)


def safe_div(num: float, den: float) -> float:
    """num / den, with 0/0 = 0 (an empty prediction has no precision to speak of)."""
    return num / den if den else 0.0


def f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if (p + r) > 0 else 0.0
