"""`memloop run` makes its plan once: every dataset is loaded once per run, counted at the loader registry
the run itself uses, also with the live Inspect logs and the report (which read the plan's samples and the
run's tables instead of loading the data again). A real run on the scripted endpoint."""

from __future__ import annotations

import functools
import json
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from typer.testing import CliRunner

inspect_log = pytest.importorskip(
    "inspect_ai.log", reason="inspect_ai is not installed (pip install 'memloop[inspect]')"
)

from memloop.eval.datasets.registry import get_loader, register_loader  # noqa: E402
from memloop.jobs.commands.cli import app  # noqa: E402

from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint  # noqa: E402

pytestmark = pytest.mark.timeout(600)

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"


def _counted(task: str, real: Callable[..., Any], loads: Counter) -> Callable[..., Any]:
    """The task's real loader, counting its calls (its signature kept: the run reads options off it)."""

    @functools.wraps(real)
    def load(*args: Any, **kwargs: Any) -> Any:
        loads[task] += 1
        return real(*args, **kwargs)

    return load


def test_one_memloop_run_loads_each_dataset_once(ray_local, tmp_path) -> None:
    loads: Counter = Counter()
    real = {task: get_loader(task) for task in ("sumie", "book")}
    for task, loader in real.items():
        register_loader(task, _counted(task, loader, loads))
    try:
        with scripted_endpoint(attribute_table_answer) as (url, _):
            model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
            cfg = {
                "name": "once",
                "output": str(tmp_path / "runs"),
                "model": model,
                "retries": 0,
                "judge_cpus": 0.25,
                "datasets": [
                    {"task": "sumie", "synthetic": {"entities": 2, "seed": 0}, "options": {"max_chunks": 2}},
                    {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 64, "max_chunks": 2}},
                ],
                "methods": [
                    {"name": "gu-json", "tasks": ["sumie"], "options": {"max_attempts": 1, "max_tokens": 200}},
                    {"name": "inc-update", "options": {"word_limit": 50, "max_attempts": 1}},
                ],
                "judges": [{"name": "sumie-exact"}],
            }
            path = tmp_path / "cfg.yaml"
            path.write_text(yaml.safe_dump(cfg))
            res = CliRunner().invoke(app, ["run", str(path), "--log-format", "inspect", "--report"])
    finally:
        for task, loader in real.items():
            register_loader(task, loader)
    assert res.exit_code == 0, res.output
    # once each: the plan's load (the live Inspect logs used to load both again for every write)
    assert loads == {"sumie": 1, "book": 1}
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["computed"] == 3 and out["failed"] == 0  # gu-json on 2 SUMIE samples, inc-update on the book
    logs = sorted(Path(out["output"], "inspect").glob("*.eval"))
    assert len(logs) == 2
    for f in logs:  # the logs' inputs and gold are the plan's samples
        log = inspect_log.read_eval_log(str(f))
        assert log.samples and all(isinstance(s.input, str) and len(s.input) > 100 for s in log.samples)
        if "sumie" in f.name:
            assert all(s.target for s in log.samples)
