"""The target beside the answer on a unit page: what the unit is judged against, shaped by task.

SUMIE: the gold facts of every turn the unit read, each marked matched (some predicted fact was
judged to be it: `supported_by` of sumie-exact and sumie, or the recall check of sumie) or missed,
or unjudged when no SUMIE judge ran. A reference summary as text; RepoQA: the needle (its name,
file, line and the description the question gives); Spider: the gold rows and the gold SQL. The
samples come from `memloop.jobs.results.sample_data` (reloaded through the run's config); when they cannot
be, the view carries the reason instead.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memloop.jobs.results.view.runs import ViewRun

_REFERENCE_ITEM = re.compile(r"turn (\d+): reference (\d+):")


def _matched(run: "ViewRun", unit: str) -> tuple[dict[int, set[int]], bool]:
    """Per turn, the 0-based gold facts a SUMIE judge found; and whether any SUMIE judge judged the unit."""
    js = run.judgments_of(unit)
    js = js[js["judge"].astype(str).str.startswith("sumie")]
    found: dict[int, set[int]] = {}
    for rec in (json.loads(r) for r in js["record_json"]):
        label = rec.get("label")
        if isinstance(label, dict) and "supported_by" in label and label.get("turn") is not None:
            found.setdefault(int(label["turn"]), set()).update(int(i) for i in label["supported_by"] or [])
        m = _REFERENCE_ITEM.match(str(rec.get("item") or ""))
        if m and label:  # sumie's recall check: this gold fact is stated by some predicted fact
            found.setdefault(int(m[1]), set()).add(int(m[2]) - 1)
    return found, len(js) > 0


def gold_view(run: "ViewRun", row: dict[str, Any]) -> dict[str, Any]:
    """{"kind": facts | reference | needle | rows | json | none, ...} for the unit in `row`."""
    data = run.sample_data()
    sample = data.get(row["dataset"], row["sample_id"])
    if sample is None:
        return {"kind": "none", "note": data.note or "the run's data no longer holds this sample"}
    gold = sample.gold
    if sample.task == "sumie":
        from memloop.eval.judges.sumie import gold_turns

        found, judged = _matched(run, row["unit"])
        turns = []
        for t, pairs in enumerate(gold_turns(gold)):
            facts = [
                {"text": f"{a}: {v}", "matched": (i in found.get(t, set())) if judged else None}
                for i, (a, v) in enumerate(pairs)
            ]
            turns.append(
                {
                    "turn": t,
                    "facts": facts,
                    "matched": sum(bool(f["matched"]) for f in facts),
                    "missed": sum(f["matched"] is False for f in facts),
                }
            )
        return {"kind": "facts", "turns": turns, "judged": judged}
    if isinstance(gold, dict) and isinstance(gold.get("reference"), str):
        return {"kind": "reference", "text": gold["reference"]}
    if sample.task == "repoqa":
        md = sample.metadata
        return {
            "kind": "needle",
            "name": gold,
            "file": md.get("file"),
            "lineno": md.get("lineno"),
            "qualname": md.get("qualname"),
            "question": sample.query,
            "chunk": md.get("needle_chunk"),
        }
    if sample.task == "spider":
        return {"kind": "rows", "rows": gold, "sql": sample.metadata.get("sql"), "question": sample.query}
    if gold is None:
        return {"kind": "none", "note": f"{sample.task} samples carry no gold (their judges need none)"}
    return {"kind": "json", "text": json.dumps(gold, indent=1, sort_keys=True, default=str)}
