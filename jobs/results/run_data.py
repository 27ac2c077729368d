"""A run's tables loaded once for what is made of them (`memloop report`, compare, the viewer, the exports):
`RunData` (its samples, steps, scores and runs tables, its re-judgings and the judgments that failed) and the
config of its latest invocation (`run_config`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import pandas as pd
from memloop.jobs.store.run_store import RunStore

NOT_APPLICABLE = "n/a"  # a unit's status where its method does not apply to the sample
UNIT_KEY = ["repeat", "sample_id"]  # a unit within one (method, dataset)


@dataclass
class RunData:
    uri: str
    run_id: str
    samples: pd.DataFrame
    steps: pd.DataFrame
    scores: pd.DataFrame
    runs: pd.DataFrame
    judgings: list["Judging"] = field(default_factory=list)  # re-judgings of the run (`memloop rescore`)
    # the `judgments` rows of a judge that failed on a unit (unit columns, `judge`, `error`): a judge
    # that failed on every unit of a dataset keeps its columns, as incomplete
    judge_failures: pd.DataFrame = field(default_factory=pd.DataFrame)
    # figures derived once per load and read by several tables (the paper's prefix hit tokenises
    # every recorded prompt: the Markdown, the plots and `headline` share one pass)
    derived: dict = field(default_factory=dict, repr=False, compare=False)
    # the lock holder of a run being computed now (its tables, and so every figure, are partial), else None
    computing: dict[str, Any] | None = None
    # a re-judging's judge model (`judged_by`): who judged these scores, in place of the run's own judge model
    judge_model: dict[str, Any] | None = None

    @classmethod
    def load(cls, rs: RunStore) -> "RunData":
        computing = rs.computing()  # read first: a run that finishes while loading was partial when read
        return cls(
            rs.uri,
            rs.run_id,
            rs.table("samples").to_pandas(),
            rs.table("steps").to_pandas(),
            rs.table("scores").to_pandas(),
            rs.table("runs").to_pandas(),
            [Judging.load(rs, jid) for jid in rs.judging_ids()],
            judge_failures_of(rs.table("judgments")),
            computing=computing,
        )

    def judged_by(self, j: "Judging") -> "RunData":
        """The run with a re-judging's scores in place of its own: every table of scores then reads
        them with the same code and the same denominators (the run's units)."""
        return replace(
            self,
            scores=j.scores,
            judgings=[],
            judge_failures=j.failures,
            derived={},
            judge_model=j.settings.get("judge_model") or self.judge_model,
        )

    @property
    def ok(self) -> pd.DataFrame:
        return self.samples[self.samples["status"] == "ok"]

    @property
    def applicable(self) -> pd.DataFrame:
        """Units a method applies to: all but the "n/a" ones (e.g. the long-context ceiling on an input
        longer than the model's context), which are counted apart and never as failures."""
        return self.samples[self.samples["status"] != NOT_APPLICABLE]


FAILURE_COLUMNS = ["unit", "dataset", "sample_id", "method", "repeat", "judge", "error"]


def judge_failures_of(judgments: Any) -> pd.DataFrame:
    """The rows of a `judgments` table (pyarrow) whose judge failed on the unit (`error` set)."""
    import pyarrow.compute as pc

    if judgments.num_rows == 0:
        return pd.DataFrame(columns=FAILURE_COLUMNS)
    return judgments.filter(pc.is_valid(judgments.column("error"))).select(FAILURE_COLUMNS).to_pandas()


@dataclass
class Judging:
    """A re-judging of the run (`memloop rescore`): its settings, its units' outcomes and its scores."""

    judging_id: str
    settings: dict  # {"judge": {name, options, tasks}, "judge_model": {...}, "tag": ...}
    judged: pd.DataFrame  # one row per unit judged again: status ok / failed
    scores: pd.DataFrame
    failures: pd.DataFrame = field(default_factory=pd.DataFrame)  # as `RunData.judge_failures`

    @classmethod
    def load(cls, rs: RunStore, judging_id: str) -> "Judging":
        js = rs.judging(judging_id)
        runs = js.table("runs").to_pandas()
        settings = json.loads(runs.sort_values("finished_at").iloc[-1]["config_json"] or "{}") if not runs.empty else {}
        return cls(
            judging_id,
            settings,
            js.samples().to_pandas(),
            js.table("scores").to_pandas(),
            judge_failures_of(js.table("judgments")),
        )

    @property
    def label(self) -> str:
        judge = self.settings.get("judge") or {}
        opts = ", ".join(f"{k}={v}" for k, v in sorted((judge.get("options") or {}).items()))
        jm = self.settings.get("judge_model") or {}
        model = (
            f"endpoint {jm['endpoint']['model']!r} at {jm['endpoint']['base_url']}"
            if jm.get("kind") == "openai"
            else "the run's model"
        )
        return f"judge {judge.get('name', '?')}{f' ({opts})' if opts else ''}, judged by {model}"

    def summary(self) -> dict:
        st = self.judged["status"] if not self.judged.empty else pd.Series(dtype=str)
        return {
            "judging_id": self.judging_id,
            "judge": (self.settings.get("judge") or {}).get("name"),
            "options": (self.settings.get("judge") or {}).get("options") or {},
            "judge_model": self.settings.get("judge_model"),
            "label": self.label,
            "ok": int((st == "ok").sum()),
            "failed": int((st == "failed").sum()),
        }


def run_config(d: RunData) -> dict:
    """The config of the run's latest invocation (as recorded in its runs table)."""
    if d.runs.empty or "config_json" not in d.runs:
        return {}
    runs = d.runs.sort_values("finished_at") if "finished_at" in d.runs else d.runs
    return json.loads(runs.iloc[-1]["config_json"] or "{}")
