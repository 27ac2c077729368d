"""A finished unit's rows become a shard in the process that ran its loop (the driver's thread, or
the method worker beside its engine): its steps are encoded and written there, then either its
samples file commits the shard at once (no judges, or a unit the method does not apply to), or its
judge tasks write their parts and a commit task writes the samples file after them
(`memloop.jobs.run.judge_fanout`). What goes back to the driver is the shard's `Committed` record, or the
commit task's reference to one; never the rows. `judged` is the one rule for which of the two a unit
takes; both placements of the method loop (`memloop.jobs.run.loops`, the driver) read it here.
"""

from __future__ import annotations

from typing import Any

from memloop.jobs.run.judge_fanout import Judging, start_judges
from memloop.jobs.run.workload import Unit
from memloop.jobs.store.run_files import Committed, new_shard_name
from memloop.jobs.store.run_store import RunStore

Rows = dict[str, list[dict[str, Any]]]  # a unit's rows by table: its `samples` row and its `steps`


def method_failure(rows: Rows) -> str | None:
    """The cause when the unit failed because none of its steps produced anything (`MethodOutput.failure`)."""
    sample = rows["samples"][0]
    return sample["error"] if sample["status"] == "failed" else None


def judged(u: Unit, out: Any, rows: Rows) -> bool:
    """Whether the unit's judges run: it has judges, its method applies, and its method produced something."""
    return bool(u.judges) and not out.not_applicable and method_failure(rows) is None


class ShardWriter:
    def __init__(self, output_uri: str, run_id: str, role: str, judging: Judging) -> None:
        self.rs = RunStore.open(output_uri, run_id, role)
        self.output_uri, self.run_id, self.judging = output_uri, run_id, judging

    def write(self, u: Unit, rows: Rows, out: Any, llm: Any) -> "Committed | Any":
        """Write `u`'s rows as a shard of its own; returns its `Committed` record, or the reference
        of the commit task that will write it once the unit's judges are done."""
        shard = new_shard_name()
        steps = rows.get("steps", [])
        files = [(f, len(steps))] if (f := self.rs.write_part(shard, "steps", steps)) is not None else []
        if judged(u, out, rows):
            return start_judges(self.judging, self.output_uri, self.run_id, shard, u, out, llm, rows["samples"], files)
        return self.rs.commit(shard, rows["samples"], files, keep=False)
