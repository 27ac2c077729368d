"""MemoryAgentBench end to end: the paper config reduced (2 contexts per competency, 2 chunks) runs through
the Ray driver on a scripted model in the default suite and on the bundled engine in the slow suite; the
report shows the per-competency table with counts and intervals, the n/a rows, and the cost of asking many."""
from __future__ import annotations

from pathlib import Path

import pyarrow.parquet  # noqa: F401 - the run writes Parquet
import pytest
import yaml

from jobs.run.config import parse_config, with_overrides
from jobs.run.driver import execute
from jobs.results.mab_table import mab_table
from jobs.results.report import report_of
from tests.datasets.test_memoryagentbench import write_repo
from tests.jobs.scripted_endpoint import scripted_endpoint

CONFIG = Path(__file__).resolve().parents[2] / "jobs/configs/papers/memoryagentbench.yaml"
# the scripted model's replies to the questions it is asked (keyed by a phrase of the question)
REPLIES = {"capital of Zarnia": "Orsk", "Mira Oskan": "a glassblower", "Doran Pell": "Brask",
           "observatory": "On Mount Kel.", "Senna trade": "fish", "gate": "Anna called it back.",
           "stolen": "3", "new pin": "label: 7", "key?": "B"}


def _reduced(tmp_path: Path, model: dict) -> dict:
    data = yaml.safe_load(CONFIG.read_text())
    data.update(output=str(tmp_path / "runs"), model=model, judge_cpus=0.25)
    [d] = data["datasets"]
    d["path"] = str(write_repo(tmp_path / "mab"))
    d["options"].update(chunk_tokens=32, contexts_per_source=2)
    d["options"]["sources"] = [*d["options"]["sources"], "longmemeval_*", "infbench_sum*"]  # none in the files: ok
    return data


def _answer(body: dict) -> str | None:
    prompt = " ".join(str(m.get("content", "")) for m in body.get("messages", []))
    if not prompt.rstrip().endswith("[ANSWER]") or "[QUESTION]" not in prompt:
        return None  # building steps: the endpoint's defaults
    question = prompt.rsplit("[QUESTION]", 1)[1]
    return next((r for k, r in REPLIES.items() if k in question), "I do not know.")


def test_the_reduced_config_runs_on_a_scripted_model_and_reports_each_competency(ray_local, tmp_path) -> None:
    with scripted_endpoint(_answer) as (url, seen):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 8}}
        cfg = with_overrides(parse_config(_reduced(tmp_path, model)), max_chunks=2, repeats=1)
        summary = execute(cfg, log=lambda m: None)
    assert summary.failed == 0 and summary.skipped == 0
    rs, d, rep = report_of(summary.output)
    units = d.samples.groupby("method")["status"].value_counts().unstack(fill_value=0)
    contexts = d.samples["sample_id"].nunique()
    # ruler_qa1 + eventqa, icl, detective_qa + infbench_sum, factconsolidation sh + mh: up to 2 per competency
    assert contexts == 7
    assert (units.loc[["gu-json", "cok"], "n/a"] == contexts).all()  # summarisers: n/a, counted
    assert (units.loc[["prism-inplace", "prism-amendments", "inc-update"], "ok"] == contexts).all()
    table = mab_table(d)
    row = {r["method"]: r for r in table["rows"]}
    assert table["columns"][:4] == ["AR", "TTL", "LRU", "CR"]
    assert set(table["columns"][4:]) == {"detective_qa", "eventqa_full", "factconsolidation_mh_6k", "infbench_sum_eng_shots2",
                                         "factconsolidation_sh_6k", "icl_banking77_5900shot_balance", "ruler_qa1_197K"}
    p = row["prism-inplace"]["cells"]
    # the scripted replies: CR 1 of 2 right (sh) and 1 of 1 (mh) -> sources 50 and 100, competency 75
    assert p["factconsolidation_sh_6k"].value == pytest.approx(50.0) and p["CR"].value == pytest.approx(75.0)
    assert p["CR"].questions == 3 and p["CR"].contexts == 2
    # TTL: exact match on the parsed reply, "label: 7" is wrong as in the benchmark
    assert p["TTL"].value == pytest.approx(50.0)
    assert p["AR"].value == pytest.approx((50.0 + 100.0) / 2) and p["LRU"].value == pytest.approx(100.0)
    # ∞Bench-Sum is LLM-judged in the benchmark: its question is counted as not scored, never as a zero
    assert p["LRU"].unscored == 1 and p["LRU"].sources == ["detective_qa"]
    assert row["gu-json"]["cells"]["AR"] is None and row["gu-json"]["units"] == {"n/a": contexts}
    # asking many: every question one answer step, prompts sharing the memory prefix
    cost = row["prism-inplace"]["cost"]
    assert cost["questions"] == pytest.approx(10 / 7)
    # 3 of the 10 questions follow another of their context's: each reuses nearly all of the one before
    # (the memory and the instruction), the first of a context nothing
    assert 0.8 * 100 * 3 / 10 < cost["prefix_share"] < 100 * 3 / 10
    assert "## MemoryAgentBench: per competency and source" in rep.markdown
    assert "75.0 [" in rep.markdown and "answer-prompt prefix share" in rep.markdown
    long = row["long-context"]
    assert long["units"].get("ok", 0) + long["units"].get("n/a", 0) == contexts


@pytest.mark.slow
def test_the_reduced_config_runs_on_the_bundled_engine(ray_local, tmp_path) -> None:
    data = _reduced(tmp_path, model={})
    data.pop("model")  # no model named: the bundled SmolLM2
    data.update(engine={"actors": 1, "cpus_per_actor": 1, "max_in_flight": 16},
                sampling={"max_tokens": 48, "temperature": 0.0})
    for m in data["methods"]:
        m.setdefault("options", {})["max_attempts"] = 1
    cfg = with_overrides(parse_config(data), max_chunks=2, repeats=1)
    summary = execute(cfg, log=lambda m: None)
    assert summary.computed + summary.failed > 0 and summary.skipped == 0
    _, d, rep = report_of(summary.output)
    table = mab_table(d)
    assert {r["method"] for r in table["rows"]} == {"long-context", "prism-inplace", "prism-amendments",
                                                   "inc-update", "gu-json", "cok"}
    assert "## MemoryAgentBench: per competency and source" in rep.markdown
    ok = d.steps[(d.steps["kind"] == "answer") & (d.steps["method"] == "prism-inplace")]
    assert not ok.empty and (ok["cached_tokens"] > 0).any()  # the engine served questions from the memory prefix
