"""RepoQA needles in a paper-config run: where no description by the config's `describer_model` is cached,
the run's judge engine (that model) describes them at the start, caching each answer as it comes (a stopped
run resumes from the cache); the samples table records who described each query and the report shows the
share per cell."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from memloop.eval.llm import ScriptedLLM
from memloop.jobs.results.paper_report import describer_shares
from memloop.jobs.run.config import parse_config
from memloop.jobs.run.describe import describe_waiting, waiting_units
from memloop.jobs.run.workload import build_units
from memloop.jobs.store.tables import now, sample_row

REPLY = json.dumps(
    {
        "purpose": "Turns a value into quoted text for a data interchange format",
        "input": "one value",
        "output": "the quoted text",
        "procedure": "walks the value once and escapes what needs escaping",
    }
)


def _config(cache, judge: str = "judge-model"):
    return parse_config(
        {
            "datasets": [
                {
                    "task": "repoqa",
                    "options": {
                        "packages": ["json"],
                        "needles": 2,
                        "chunk_tokens": 4096,
                        "describer_model": "judge-model",
                        "description_cache": str(cache),
                    },
                }
            ],
            "methods": [{"name": "inc-update"}],
            "repeats": 2,
            "judge_model": {"kind": "engine", "weights": judge},
        }
    )


def test_the_judge_engine_describes_waiting_needles_once_each_and_a_later_load_reads_the_cache(tmp_path) -> None:
    cfg = _config(tmp_path / "cache")
    units = build_units(cfg)
    assert waiting_units(units) == {"judge-model": 2}  # two needles, each in two repeats' units
    asked: list[ScriptedLLM] = []

    def judge(model: str) -> ScriptedLLM:
        asked.append(ScriptedLLM([REPLY] * 2, name=model))
        return asked[-1]

    described = describe_waiting(cfg, units, judge)
    assert sum(len(llm.requests) for llm in asked) == 2  # one call per needle, not per unit
    assert all(
        u.sample.metadata["describer"] == "llm" and "data interchange format" in u.sample.query for u in described
    )
    assert len(list((tmp_path / "cache").glob("*.json"))) == 2
    again = build_units(cfg)  # a resumed run: the answers come from the cache, no call
    assert waiting_units(again) == {} and all(u.sample.metadata["describer"] == "llm" for u in again)
    rows = pd.DataFrame([sample_row(u, "ok", None, 1, None, now(), "engine-0") for u in described])
    [cell] = describer_shares(rows)
    assert (cell["model"], cell["fallback"], cell["samples"]) == (2, 0, 2)


def test_needles_keep_the_labelled_fallback_when_the_judge_is_not_the_describer_and_the_share_says_so(tmp_path) -> None:
    cfg = _config(tmp_path / "cache", judge="another-model")
    logged: list[str] = []
    units = describe_waiting(cfg, build_units(cfg), lambda model: ScriptedLLM([], name=model), logged.append)
    assert all(u.sample.metadata["describer"].startswith("code fallback (no description by judge-model") for u in units)
    assert "repoqa-describe --model judge-model" in logged[-1]
    rows = pd.DataFrame([sample_row(u, "ok", None, 1, None, now(), "engine-0") for u in units])
    [cell] = describer_shares(rows)
    assert (cell["model"], cell["fallback"]) == (0, 2)


@pytest.mark.slow
def test_a_run_whose_judge_engine_is_the_describer_describes_the_needles_at_its_start(ray_local, tmp_path) -> None:
    """The driver's wiring, on the bundled model as the judge engine: no description cached, the run writes
    one per needle with its judge engine before the units compute, and the samples table records it."""
    import pyarrow.dataset as pads
    from memloop.engine.assets import default_model_path
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan

    from tests.jobs.scripted_endpoint import scripted_endpoint

    judge = str(default_model_path())
    with scripted_endpoint() as (url, _):
        cfg = parse_config(
            {
                "output": str(tmp_path / "runs"),
                "judge_cpus": 0.25,
                "datasets": [
                    {
                        "task": "repoqa",
                        "limit": 1,
                        "options": {
                            "packages": ["json"],
                            "needles": 1,
                            "chunk_tokens": 2048,
                            "max_chunks": 1,
                            "describer_model": judge,
                            "description_cache": str(tmp_path / "cache"),
                        },
                    }
                ],
                "methods": [{"name": "long-context", "options": {"context_tokens": 100000}}],
                "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted"}},
                "judge_model": {"kind": "engine", "weights": judge},
                "judges": [{"name": "repoqa-exact"}],
            }
        )
        summary = execute(make_plan(cfg), log=lambda m: None)
    samples = pads.dataset(str(Path(summary.output) / "samples"), format="parquet").to_table().to_pandas()
    [who] = samples["describer"]
    assert not who.startswith("code fallback (no description by"), who  # the judge engine answered
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1
