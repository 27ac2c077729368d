"""`memloop compare`: paired deltas with bootstrap intervals, the config diff, --fail-if, exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from memloop.jobs.commands.cli import app
from memloop.jobs.results.compare import CompareError, compare_runs, failing, load, parse_rule
from memloop.jobs.results.report import write_report
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import now
from typer.testing import CliRunner

from tests.jobs.unit_rows import manifest_row, samples_row, unit_columns

N = 40


def _write(rs: RunStore, f1: np.ndarray, cached: int, temperature: float, extra_sample: bool = False) -> None:
    t = now()
    rows: dict[str, list] = {"samples": [], "scores": []}
    ids = [f"e{i}" for i in range(len(f1))] + (["only-here"] if extra_sample else [])
    for i, sid in enumerate(ids):
        base = unit_columns("sumie:synthetic", sid, "go-json", 0)
        rows["samples"].append(
            samples_row(
                base, at=t, output_json="{}", prompt_tokens=1000, cached_tokens=cached + i % 3, decoded_tokens=50
            )
        )
        v = float(f1[i]) if i < len(f1) else 0.5
        rows["scores"] += [dict(base, judge="sumie-exact", metric="f1", turn=k, value=v) for k in range(2)]
        rows["scores"].append(dict(base, judge="rouge", metric="rougeL", turn=None, value=0.3))
    rs.write_shard(rows)
    config = {
        "name": "cmp",
        "sampling": {"temperature": temperature, "max_tokens": 64},
        "methods": [{"name": "go-json"}],
    }
    rs.write_manifest(
        manifest_row(
            rs.store.uri,
            "i1",
            samples=len(ids),
            computed=len(ids),
            config_json=json.dumps(config),
            code_version="git:abc",
            started_at=t,
            finished_at=t,
        )
    )


@pytest.fixture
def runs(tmp_path):
    rng = np.random.default_rng(7)
    base = rng.uniform(0.3, 0.7, N)
    noise = np.repeat(rng.uniform(0.01, 0.05, N // 2), 2) * np.tile([1, -1], N // 2)  # mean exactly 0
    out = str(tmp_path / "runs")
    a, same, worse = (RunStore.open(out, r) for r in ("a", "same", "worse"))
    _write(a, base, cached=400, temperature=0.0)
    _write(same, base + noise, cached=400, temperature=0.0, extra_sample=True)
    _write(worse, base + noise - 0.1, cached=600, temperature=0.7)
    return a.uri, same.uri, worse.uri


def _row(c, metric: str):
    (r,) = [
        r
        for r in c.rows
        if metric in r.names()
        and r.judge in ("", "sumie-exact", "rouge")
        and (r.metric == metric or r.metric == f"{metric}:avg")
    ]
    return r


def test_known_shift_is_reported_with_an_interval_excluding_zero(runs) -> None:
    a, _, worse = runs
    c = compare_runs(load(a), load(worse))
    f1 = _row(c, "f1")
    assert f1.n == N and f1.delta == pytest.approx(-0.1)
    assert f1.delta_lo < f1.delta < f1.delta_hi < 0
    rouge = _row(c, "rougeL")
    assert rouge.delta == 0 and rouge.delta_lo == 0 == rouge.delta_hi
    hit = _row(c, "radix_cache_hit")
    assert hit.delta == pytest.approx(20.0) and hit.delta_lo > 0
    assert _row(c, "cost_index").delta == pytest.approx(-0.0002)  # 200 fewer net tokens per unit
    assert {"key": "sampling.temperature", "a": 0.0, "b": 0.7} in c.config_diff
    assert failing([parse_rule("f1.delta_hi < 0")], c.rows) and failing(
        [parse_rule("sumie-exact:f1.delta < -0.02")], c.rows
    )
    assert not failing([parse_rule("go-json/rougeL.delta < 0")], c.rows)


def test_no_shift_gives_an_interval_including_zero(runs) -> None:
    a, same, _ = runs
    c = compare_runs(load(a), load(same))
    f1 = _row(c, "f1")
    assert f1.delta == pytest.approx(0, abs=1e-12)
    assert f1.delta_lo < 0 < f1.delta_hi
    assert (c.shared_units, c.only_a, c.only_b) == (N, 0, 1)  # the extra sample is not paired
    assert c.config_diff == []
    assert not failing([parse_rule("f1.delta_hi < 0")], c.rows)
    again = compare_runs(load(a), load(same))
    assert _row(again, "f1").delta_lo == f1.delta_lo  # fixed seed: the same interval every time


def test_rules_are_parsed_not_evaluated() -> None:
    r = parse_rule("booookscore.delta_hi < 0")
    assert (r.name, r.field, r.op, r.value) == ("booookscore", "delta_hi", "<", 0.0)
    assert parse_rule(" avg:f1.delta<=-2e-2").value == -0.02
    for bad in ("__import__('os').system('true')", "f1.delta < x", "f1 < 0", "f1.__class__ < 0", "f1.delta < 0 or 1"):
        with pytest.raises(CompareError):
            parse_rule(bad)


def test_cli_exit_codes_and_outputs(runs, tmp_path) -> None:
    a, same, worse = runs
    write_report(a)
    report_a = (tmp_path / "runs" / "a" / "report.md").read_text()
    cli = CliRunner()
    res = cli.invoke(app, ["compare", a, worse, "--fail-if", "f1.delta_hi < 0"])
    assert res.exit_code == 4, res.output
    out = tmp_path / "runs" / "worse" / "compare-a"
    assert {p.name for p in out.iterdir()} >= {"compare.md", "compare.json", "deltas.png", "f1_per_turn.png"}
    assert json.loads((out / "compare.json").read_text())["failed_rules"]
    assert (tmp_path / "runs" / "a" / "report.md").read_text() == report_a  # A's report untouched
    res = cli.invoke(
        app, ["compare", a, same, "--json", "--out", str(tmp_path / "cmp"), "--fail-if", "f1.delta_hi < 0"]
    )
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout.strip().splitlines()[0])
    assert doc["shared_units"] == N and (tmp_path / "cmp" / "compare.md").is_file()
    res = cli.invoke(app, ["compare", a, same, "--fail-if", "f2.delta < 0"])
    assert isinstance(res.exception, CompareError) and "no metric is called 'f2'" in str(res.exception)
