"""`memloop run --log-format inspect`: Inspect `.eval` logs written by the run itself, as it goes, into
OUTPUT/RUN_ID/inspect/, read back by inspect_ai without an export step. A real run on the scripted model."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

inspect_log = pytest.importorskip(
    "inspect_ai.log", reason="inspect_ai is not installed (pip install 'memloop[inspect]')"
)

from memloop.jobs.commands.cli import app  # noqa: E402
from memloop.jobs.results.inspect_log import LiveInspectLogs  # noqa: E402

from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint  # noqa: E402

pytestmark = pytest.mark.timeout(600)


def test_a_run_writes_its_inspect_logs_as_it_goes(ray_local, tmp_path) -> None:
    with scripted_endpoint(attribute_table_answer) as (url, _):
        model = {"kind": "openai", "endpoint": {"base_url": url, "model": "scripted", "max_concurrency": 4}}
        cfg = {
            "name": "live",
            "output": str(tmp_path / "runs"),
            "model": model,
            "retries": 0,
            "datasets": [{"task": "sumie", "synthetic": {"entities": 2, "seed": 0}, "options": {"max_chunks": 2}}],
            "methods": [{"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 200}}],
            "judges": [{"name": "sumie-exact"}],
        }
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(cfg))
        res = CliRunner().invoke(app, ["run", str(path), "--log-format", "inspect"])
        bad = CliRunner().invoke(app, ["run", str(path), "--log-format", "html"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])["output"]
    logs = sorted(Path(out, "inspect").glob("*.eval"))
    assert len(logs) == 1 and f"inspect logs: {out}/inspect (1 log(s))" in res.stderr
    log = inspect_log.read_eval_log(str(logs[0]))
    assert log.status == "success" and len(log.samples) == 2 and log.eval.model_generate_config.max_tokens == 200
    assert all(s.scores for s in log.samples)
    assert bad.exit_code != 0 and "--log-format 'html'" in str(bad.exception)

    # the ticks: a writer rewrites the logs every `every_s` seconds while it runs, before `stop`
    logs[0].unlink()
    writer = LiveInspectLogs(out, every_s=0.2).start()
    deadline = time.monotonic() + 60
    while writer.written is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert writer.written is not None and logs[0].exists()
    writer.stop()
