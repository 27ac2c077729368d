"""A judge that fails is its judgment's failure, not the method's unit's: through a real run, the
method on the scripted endpoint (127.0.0.1) and KGScore's judge model on an endpoint that is down
(a closed port); the unit stays ok (in every method's comparison and cost row), the `judgments`
table records the judge's failure with its cause, the KGScore cells (kept although no unit was
scored: the judge's headline metrics) are incomplete and the run
exits non-zero, while ROUGE on the same unit is complete. (Before, the unit was marked failed and
its sample left every method's cost row.)"""

from __future__ import annotations

import json
import socket

from memloop.jobs.results.report import build_report, headline
from memloop.jobs.results.run_data import RunData
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.driver import execute
from memloop.jobs.run.plan import make_plan
from memloop.jobs.store.run_store import RunStore

from tests.jobs.scripted_endpoint import scripted_endpoint
from tests.jobs.test_paper_tables import arxiv_file


def test_a_failed_judge_leaves_the_unit_ok_and_the_cell_incomplete(ray_local, tmp_path) -> None:
    with scripted_endpoint() as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        with socket.socket() as sock:  # a port nothing listens on: the judge's endpoint is down
            sock.bind(("127.0.0.1", 0))
            down = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        judge_model = {
            "kind": "openai",
            "endpoint": {"base_url": down, "model": "judge", "max_retries": 0, "timeout_s": 5},
        }
        cfg = parse_config(
            {
                "name": "judge-fails",
                "output": str(tmp_path / "runs"),
                "datasets": [{"task": "arxiv", "path": str(arxiv_file(tmp_path)), "limit": 1}],
                "methods": [{"name": "no-kg"}],
                "judges": [{"name": "rouge"}, {"name": "kgscore", "options": {"max_attempts": 1}}],
                "model": model,
                "judge_model": judge_model,
                "judge_cpus": 0.25,
            }
        )
        summary = execute(make_plan(cfg), log=lambda m: None)
    assert (summary.computed, summary.failed, summary.incomplete) == (1, 0, 1), summary.errors
    assert summary.exit_code(max_failed_frac=1.0) == 3  # a judge failure is never tolerated as a method failure
    rs = RunStore.at(summary.output)
    samples = rs.table("samples").to_pandas()
    assert list(samples["status"]) == ["ok"] and samples["error"].isna().all()
    judgments = rs.table("judgments").to_pandas()
    failed = judgments[judgments["error"].notna()]
    assert list(failed["judge"]) == ["kgscore"] and failed.iloc[0]["index"] == -1
    assert json.loads(failed.iloc[0]["record_json"])["failed"] is True
    d = RunData.load(rs)
    h = headline(d)
    figs = {(f["judge"], f["metric"]): f for f in h["figures"]}
    assert figs[("rouge", "rouge1")]["judged"] == 1 and not figs[("rouge", "rouge1")]["incomplete"]
    # the judge failed on every unit of the dataset: its columns stay, incomplete, with no figure and no zero
    for metric in ("precision", "recall", "f1"):
        kg = figs[("kgscore", metric)]
        assert kg["mean"] is None and kg["incomplete"] and kg["incomplete_units"] == 1 and kg["judged"] == 0
    assert h["incomplete"]
    assert figs[("", "cost_index")]["samples"] == 1 and h["cost_excluded"] == []  # the sample stays compared
    md = build_report(d).markdown
    row = next(line for line in md.splitlines() if line.startswith("| no-kg | arxiv") and "incomplete" in line)
    assert "incomplete: 1 unknown" in row
