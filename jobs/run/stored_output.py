"""A finished unit's `MethodOutput` read back from its stored rows (`samples.output_json` and its
`steps` rows), so a judge can score it again without running the method (`memloop rescore`).

Everything a judge's `prediction` reads is stored: the final answer and memory (`output_json`), and
per step its memory after the step, its chunk and whether it parsed (`memory_json`, `extra_json`).
The layout read here is the one `memloop.jobs.store.tables.sample_row` and `step_row` write.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Mapping

from memloop.eval.llm import Usage
from memloop.eval.methods.base import MethodOutput
from memloop.eval.methods.step import Step


def _loads(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def stored_step(row: Mapping[str, Any]) -> Step:
    extra = _loads(row.get("extra_json")) or {}
    return Step(
        index=int(row["step"]),
        kind=row.get("kind") or "",
        template_id=row.get("template_id") or "",
        template_sha256=row.get("template_hash") or "",
        prompt=row.get("prompt") or "",
        output=row.get("output") or "",
        parsed=_loads(row.get("parsed_json")),
        memory=_loads(row.get("memory_json")),
        usage=Usage(
            int(row.get("prompt_tokens") or 0), int(row.get("cached_tokens") or 0), int(row.get("decoded_tokens") or 0)
        ),
        attempts=int(extra.get("attempts", 1)),
        failures=list(extra.get("failures", ())),
        chunk_index=extra.get("chunk_index"),
        ok=bool(extra.get("ok", True)),
    )


def stored_output(sample: Mapping[str, Any], steps: Iterable[Mapping[str, Any]]) -> MethodOutput:
    """The unit's method output as its judges saw it: `sample` is its `samples` row, `steps` its `steps` rows."""
    out = _loads(sample.get("output_json")) or {}
    return MethodOutput(
        method=sample["method"],
        sample_id=sample["sample_id"],
        answer=out.get("answer"),
        steps=sorted((stored_step(r) for r in steps), key=lambda s: s.index),
        memory=out.get("memory"),
        settings=out.get("settings") or {},
        templates=out.get("templates") or {},
    )
