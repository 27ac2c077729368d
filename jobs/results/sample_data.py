"""What each unit read and what it is judged against: the run's samples (their chunks, query and gold),
reloaded through the run's recorded config, as `memloop rescore` reloads them.

The tables keep what a method produced, not the input text or the gold (a book would be stored once per
method and repeat); the export and the viewer show them beside the answer when the data is reachable
from here and unchanged (its content digest is the one the run recorded). Otherwise `SampleData.note`
says why the input and gold are absent, and nothing else is affected.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

from memloop.eval.datasets.sample import Sample
from memloop.jobs.errors import JobsError
from memloop.jobs.store.run_store import RunStore


@dataclass
class SampleData:
    samples: dict[tuple[str, str], Sample] = field(default_factory=dict)  # (dataset key, sample id) -> sample
    note: str | None = None  # why there are none (data not reachable here, or changed since the run)

    def get(self, dataset: str, sample_id: str) -> Sample | None:
        return self.samples.get((dataset, str(sample_id)))

    @classmethod
    def of_units(cls, units: Iterable[Any]) -> "SampleData":
        """The samples of a run's plan (`memloop.jobs.run.plan.RunPlan.units`): what the running run read, so
        nothing is loaded again."""
        return cls({(u.dataset.key, str(u.sample.id)): u.sample for u in units})


def load_sample_data(rs: RunStore) -> SampleData:
    """The run's samples, by dataset key and sample id; empty with a note when they cannot be reloaded."""
    from memloop.eval.errors import EvalError
    from memloop.jobs.run.chunk_fit import chunk_tokenizer
    from memloop.jobs.run.plan import content_digest, resolve_path
    from memloop.jobs.run.rescore import stored_config
    from memloop.jobs.run.workload import load_samples

    try:
        cfg, ident = stored_config(rs)
        recorded = {
            json.dumps({k: v for k, v in d.items() if k != "content"}, sort_keys=True): d.get("content")
            for d in ident.get("datasets") or []
        }
        tokenizer = chunk_tokenizer(cfg)
        out: dict[tuple[str, str], Sample] = {}
        for i, d in enumerate(cfg.datasets):
            if d.path is not None and resolve_path(d.path).exists():
                key = json.dumps(d.model_dump(exclude={"path"}), sort_keys=True)
                if recorded.get(key) not in (None, content_digest(resolve_path(d.path))):
                    return SampleData(note=f"{d.path} changed since the run read it: its input and gold are not shown")
            for s in load_samples(d, i, tokenizer):
                out[(d.key, str(s.id))] = s
        return SampleData(out)
    except (JobsError, EvalError, OSError) as exc:
        return SampleData(
            note=f"the run's data is not reachable here ({str(exc)[:300]}); run from the directory "
            "`memloop run` ran in to see the inputs and gold"
        )


def gold_facts(gold: Any, turn: int | None = None) -> list[str]:
    """SUMIE's gold after `turn` (0-based; default the last) as `attribute: value` lines, one per fact."""
    turns = (gold or {}).get("turns") if isinstance(gold, dict) else None
    if not turns:
        return []
    facts = turns[-1 if turn is None else min(turn, len(turns) - 1)] or {}
    return [
        f"{attr}: {v}" for attr, values in facts.items() for v in (values if isinstance(values, list) else [values])
    ]


def target_of(sample: Sample, chunks_read: int | None = None) -> str | list[str]:
    """The gold as Inspect's `target`: SUMIE's facts after the last chunk read, the reference summary,
    the RepoQA needle's name, the Spider gold rows as JSON; any other gold as JSON."""
    gold = sample.gold
    if sample.task == "sumie":
        return gold_facts(gold, None if chunks_read is None else chunks_read - 1)
    if isinstance(gold, str):
        return gold
    if isinstance(gold, dict) and isinstance(gold.get("reference"), str):
        return gold["reference"]
    if isinstance(gold, dict) and isinstance(gold.get("name"), str):
        return gold["name"]
    return json.dumps(gold, sort_keys=True, default=str) if gold is not None else ""
