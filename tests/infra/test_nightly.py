"""`memloop nightly`: every config runs even when some fail, and each run is compared with the
previous night's run of the same config."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
from memloop.jobs.commands.cli import app
from memloop.jobs.results.nightly import EXIT_FAILED, compare_with_previous, exit_status, previous_run, run_nightly
from memloop.jobs.store.run_store import RunStore
from typer.testing import CliRunner

from tests.jobs.unit_rows import manifest_row, samples_row, unit_columns

TINY = """
name: {name}
output: {output}
datasets:
  - task: sumie
    synthetic: {{entities: 1, seed: 0}}
    options: {{max_chunks: 1}}
methods:
  - name: {method}
sampling: {{max_tokens: 8, temperature: 0.0}}
engine: {{actors: 1, cpus_per_actor: 1}}
"""


def _write(tmp_path: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)


def _configs(tmp_path: Path) -> list[Path]:
    """Configs that fail validation, each in its own way (one of them is not even there)."""
    _write(
        tmp_path,
        {
            "no-datasets.yaml": "name: a\nmethods: [{name: go-json}]\n",
            "broken.yaml": "name: b\ndatasets: [\n",
            "bad-repeats.yaml": "name: c\nrepeats: 0\n",
        },
    )
    return [
        tmp_path / "no-datasets.yaml",
        tmp_path / "missing.yaml",
        tmp_path / "broken.yaml",
        tmp_path / "bad-repeats.yaml",
    ]


def test_every_config_is_attempted_and_the_night_fails_at_the_end(tmp_path) -> None:
    lines: list[str] = []
    outcomes = run_nightly(_configs(tmp_path), ["f1.delta_hi < 0"], log=lines.append)
    assert [Path(o.config).name for o in outcomes] == [
        "no-datasets.yaml",
        "missing.yaml",
        "broken.yaml",
        "bad-repeats.yaml",
    ]
    assert [o.status for o in outcomes] == ["invalid"] * 4
    assert "`datasets`" in outcomes[0].error and "does not exist" in outcomes[1].error
    assert "not valid YAML" in outcomes[2].error and "`repeats`" in outcomes[3].error
    assert exit_status(outcomes) == EXIT_FAILED
    assert sum("is invalid, skipped" in line for line in lines) == 4


def test_a_failing_run_does_not_stop_the_next_config(tmp_path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the output directory should be")
    _write(
        tmp_path,
        {
            "unknown-method.yaml": TINY.format(name="a", output=tmp_path / "runs", method="no-such-method"),
            "unwritable.yaml": TINY.format(name="c", output=blocker / "runs", method="go-json"),
        },
    )
    outcomes = run_nightly([tmp_path / "unwritable.yaml", tmp_path / "unknown-method.yaml"], [], log=lambda _: None)
    # the first passed validation and really ran `memloop run`, which refused the output
    assert outcomes[0].status == "failed" and outcomes[0].rc not in (0, None) and outcomes[0].run is None
    assert outcomes[1].status == "invalid" and "no-such-method" in outcomes[1].error
    assert exit_status(outcomes) == EXIT_FAILED


def test_cli_exits_non_zero_and_prints_every_outcome(tmp_path) -> None:
    cfgs = _configs(tmp_path)[:3]
    res = CliRunner().invoke(app, ["nightly", *map(str, cfgs)])
    assert res.exit_code == EXIT_FAILED, res.output
    doc = json.loads(res.stdout.strip().splitlines()[-1])
    assert [c["status"] for c in doc["configs"]] == ["invalid"] * 3


def _night(out: str, run_id: str, name: str, day: int, f1: float) -> str:
    rs = RunStore.open(out, run_id)
    t = dt.datetime(2026, 1, day, 2, tzinfo=dt.timezone.utc)
    rows: dict[str, list] = {"samples": [], "scores": []}
    for i, v in enumerate(np.linspace(f1 - 0.1, f1 + 0.1, 12)):
        base = unit_columns("sumie:synthetic", f"e{i}", "go-json", 0)
        rows["samples"].append(
            samples_row(base, at=t, output_json="{}", prompt_tokens=100, cached_tokens=40, decoded_tokens=5)
        )
        rows["scores"].append(dict(base, judge="sumie-exact", metric="f1", turn=0, value=float(v + 0.01 * (i % 2))))
    rs.write_shard(rows)
    rs.write_manifest(
        manifest_row(
            out,
            f"inv-{day}",
            samples=12,
            computed=12,
            config_json=json.dumps({"name": name}),
            code_version=f"git:{day}",
            started_at=t,
            finished_at=t + dt.timedelta(hours=1),
            wall_s=3600.0,
        )
    )
    return rs.uri


def test_each_run_is_compared_with_the_previous_night(tmp_path) -> None:
    out = str(tmp_path / "nightly")
    _night(out, "sumie-d1", "nightly-sumie", 1, 0.6)
    d2 = _night(out, "sumie-d2", "nightly-sumie", 2, 0.6)
    _night(out, "books-d2", "nightly-books", 2, 0.9)  # another config: never its baseline
    d3 = _night(out, "sumie-d3", "nightly-sumie", 3, 0.5)
    assert previous_run(d3, "nightly-sumie") == d2
    assert previous_run(d2, "nightly-sumie").endswith("sumie-d1")
    assert previous_run(str(Path(out) / "sumie-d1"), "nightly-sumie") is None
    prev, held = compare_with_previous(d3, "nightly-sumie", ["f1.delta_hi < 0", "booookscore.delta < 0"])
    assert prev == d2
    assert len(held) == 1 and held[0].startswith("f1.delta_hi < 0")  # booookscore: not in this config, skipped
    assert (Path(out) / "sumie-d3" / "compare-sumie-d2" / "compare.md").is_file()
    assert compare_with_previous(d2, "nightly-sumie", ["f1.delta_hi < 0"])[1] == []  # no change from d1
