"""Several models in one config (`models:`): one run per model under one `memloop run`, each with its
own run id, resumable as a set, exit code the worst of them; `memloop compare` and `memloop run
--report` put the models side by side."""

from __future__ import annotations

import contextlib
import json
import socket
from pathlib import Path

import pytest
import yaml
from memloop.jobs.commands.cli import app
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import model_configs, parse_config, with_overrides
from memloop.jobs.run.plan import make_plan
from memloop.jobs.store.run_store import RunStore
from typer.testing import CliRunner

from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint

ROOT = Path(__file__).resolve().parents[2]
BOOK = ROOT / "jobs/configs/data/lighthouse-keeper.txt"


def _endpoint(url: str, model: str) -> dict:
    return {"kind": "openai", "endpoint": {"base_url": url, "model": model, "max_concurrency": 4, "max_retries": 0}}


def _config(tmp_path: Path, models: list) -> Path:
    cfg = {
        "name": "models",
        "output": str(tmp_path / "runs"),
        "models": models,
        "judge_cpus": 0.25,
        "retries": 0,
        "datasets": [
            {"task": "sumie", "synthetic": {"entities": 2, "seed": 0}, "options": {"max_chunks": 2}},
            {"task": "book", "path": str(BOOK), "options": {"chunk_tokens": 64, "max_chunks": 2}},
        ],
        "methods": [
            {"name": "gu-json", "tasks": ["sumie"], "options": {"max_attempts": 1}},
            {"name": "inc-update", "options": {"word_limit": 50, "max_attempts": 1}},
        ],
        "judges": [{"name": "sumie-exact"}],
    }
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _last_json(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


def test_models_expand_to_one_config_per_model_each_with_its_own_run_id(tmp_path) -> None:
    base = {
        "name": "m",
        "output": str(tmp_path),
        "datasets": [{"task": "sumie", "synthetic": {"entities": 1}}],
        "methods": [{"name": "gu-json"}],
    }
    cfg = parse_config(
        dict(base, models=["smollm2-135m", "qwen2.5-coder-0.5b", _endpoint("http://127.0.0.1:9/v1", "gpt-x")])
    )
    runs = model_configs(cfg)
    assert [c.name for c in runs] == ["m-smollm2-135m", "m-qwen2.5-coder-0.5b", "m-gpt-x"]
    assert [c.model.weights for c in runs] == ["smollm2-135m", "qwen2.5-coder-0.5b", None]
    assert runs[2].model.kind == "openai" and all(c.models is None for c in runs)
    two = model_configs(
        parse_config(
            dict(base, models=[_endpoint("http://127.0.0.1:9/v1", "a"), _endpoint("http://127.0.0.1:9/v1", "b")])
        )
    )
    assert len({make_plan(c).run_id for c in two}) == 2
    with pytest.raises(ConfigError, match="names 2 models"):  # one plan never silently runs the default model
        make_plan(parse_config(dict(base, models=["smollm2-135m", "qwen2.5-coder-0.5b"])))
    with pytest.raises(ConfigError, match="not both"):
        parse_config(dict(base, model={"weights": "smollm2-135m"}, models=["qwen2.5-coder-0.5b"]))
    with pytest.raises(ConfigError, match="repeats"):
        model_configs(parse_config(dict(base, models=["smollm2-135m", "smollm2-135m"])))
    one = with_overrides(cfg, model="smollm2-135m")  # --model runs that one model instead of the list
    assert one.models is None and one.model.weights == "smollm2-135m"


def test_two_models_run_in_one_invocation_resume_as_a_set_and_compare_side_by_side(
    ray_local, tmp_path, monkeypatch
) -> None:
    from memloop.jobs.run import workload

    loads: list[str] = []
    real = workload.load_samples

    def counted(spec, *args, **kwargs):  # the real loader, counted: a plan loads every dataset of its config
        loads.append(spec.task)
        return real(spec, *args, **kwargs)

    monkeypatch.setattr(workload, "load_samples", counted)
    with contextlib.ExitStack() as stack:
        ends = [stack.enter_context(scripted_endpoint(attribute_table_answer)) for _ in range(3)]
        models = [_endpoint(url, f"scripted-{k}") for (url, _), k in zip(ends, "abc")]
        config = _config(tmp_path, models)
        dry = CliRunner().invoke(app, ["run", str(config), "--dry-run", "--json"])
        assert dry.exit_code == 0, dry.output
        plans = json.loads(dry.stdout)["runs"]  # one JSON object for the set
        assert [p["to_compute"] for p in plans] == [3, 3, 3] and len({p["run_id"] for p in plans}) == 3
        loads.clear()
        res = CliRunner().invoke(app, ["run", str(config), "--report"])
        assert res.exit_code == 0, res.output
        assert sorted(loads) == ["book"] * 3 + ["sumie"] * 3  # each model's plan made once (it was twice: checked, run)
        out = _last_json(res.stdout)
        assert out["exit_code"] == 0 and len(out["runs"]) == 3
        ids = [r["run_id"] for r in out["runs"]]
        assert len(set(ids)) == 3 and [i.rsplit("-", 1)[0] for i in ids] == [f"models-scripted-{k}" for k in "abc"]
        assert all(r["computed"] == 3 and r["failed"] == r["method_failed"] == 0 for r in out["runs"])
        assert all(seen for _, seen in ends)  # each model's run asked its own endpoint
        for r, (url, _) in zip(out["runs"], ends):
            cfg = json.loads(RunStore.at(r["output"]).table("runs").to_pandas().iloc[-1]["config_json"])
            assert cfg["model"]["endpoint"]["base_url"] == url and cfg["models"] is None
        # the report: each run's own, then the models side by side
        assert all((Path(r["output"]) / "report.md").exists() for r in out["runs"])
        assert "| scripted-a | scripted-b | scripted-c | Δ scripted-b − scripted-a |" in res.output
        assert "cost_index" in res.output and "sumie-exact: f1" in res.output

        asked = [len(seen) for _, seen in ends]
        again = CliRunner().invoke(app, ["run", str(config)])
        assert again.exit_code == 0, again.output
        assert [r["skipped"] for r in _last_json(again.stdout)["runs"]] == [3, 3, 3]
        assert [len(seen) for _, seen in ends] == asked  # resumed as a set: nothing computed twice
        import memloop

        api = memloop.run(str(config), log=lambda m: None)  # the API: one summary per model, in order
        assert [(s.run_id, s.skipped, s.computed) for s in api] == [(i, 3, 0) for i in ids]

    uris = [r["output"] for r in out["runs"]]
    two = CliRunner().invoke(app, ["compare", uris[0], uris[1]])
    assert two.exit_code == 0 and "(model scripted-a)" in two.output and "(model scripted-b)" in two.output
    three = CliRunner().invoke(app, ["compare", *uris, "--json"])
    assert three.exit_code == 0, three.output
    s = json.loads(three.stdout.strip().splitlines()[0])
    assert s["labels"] == ["scripted-a", "scripted-b", "scripted-c"] and s["shared_units"] == 3
    f1 = [r for r in s["rows"] if r["metric"].startswith("f1")]
    assert f1 and all(len(r["values"]) == 3 and len(r["deltas"]) == 2 for r in f1)
    held = CliRunner().invoke(app, ["compare", *uris, "--fail-if", "cost_index.n >= 1"])
    assert held.exit_code == 4


def test_the_exit_code_of_a_model_set_is_the_worst_of_its_runs(ray_local, tmp_path) -> None:
    with socket.socket() as s:  # a port nothing listens on: every request of that model fails at once
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    with scripted_endpoint(attribute_table_answer) as (url, _):
        res = CliRunner().invoke(app, ["run", str(_config(tmp_path, [_endpoint(url, "up"), _endpoint(dead, "down")]))])
    out = _last_json(res.stdout)
    assert [r["exit_code"] for r in out["runs"]] == [0, 3]
    assert out["exit_code"] == 3 and res.exit_code == 3
