"""Run configs: validation names the field, the run id follows results and ignores transport."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import load_config, parse_config
from memloop.jobs.run.plan import check_config, run_id

ROOT = Path(__file__).resolve().parents[2]


def _cfg(tmp_path: Path, **over) -> dict:
    book = tmp_path / "book.txt"
    if not book.exists():
        book.write_text("It was a dark night.\n\nThe end came soon.\n")
    base = {
        "name": "t",
        "output": str(tmp_path / "runs"),
        "datasets": [{"task": "book", "path": str(book), "options": {"chunk_tokens": 64}}],
        "methods": [{"name": "inc-update"}],
    }
    base.update(over)
    return base


def test_every_shipped_config_parses() -> None:
    configs = sorted((ROOT / "jobs" / "configs").glob("*.yaml"))
    assert {"demo.yaml", "sumie.yaml", "books.yaml", "code.yaml", "tables.yaml"} <= {p.name for p in configs}
    for p in configs:
        cfg = load_config(p)
        assert cfg.methods and cfg.datasets, p


def test_run_id_ignores_transport_and_follows_results(tmp_path) -> None:
    a = parse_config(_cfg(tmp_path))
    same = parse_config(
        _cfg(
            tmp_path,
            output=str(tmp_path / "elsewhere"),
            engine={"actors": 4, "max_in_flight": 32, "max_restarts": 9},
            retries=5,
        )
    )
    assert run_id(a) == run_id(same)
    assert run_id(a).startswith("t-")
    assert run_id(a) != run_id(parse_config(_cfg(tmp_path, sampling={"max_tokens": 99})))
    assert run_id(a) != run_id(parse_config(_cfg(tmp_path, repeats=2)))
    assert run_id(a) != run_id(parse_config(_cfg(tmp_path, model={"options": {"kv_dtype": "int8"}})))
    before = run_id(a)
    (tmp_path / "book.txt").write_text("Different content.\n")  # the dataset's content, not its path
    assert before != run_id(parse_config(_cfg(tmp_path)))


@pytest.mark.parametrize(
    "over, field",
    [
        ({"methods": [{"name": "no-such-method"}]}, "methods.0.name"),
        ({"datasets": [{"task": "book", "path": "/nonexistent/book.txt"}]}, "datasets.0.path"),
        ({"datasets": [{"task": "nosuchtask", "path": "x"}]}, "datasets.0.task"),
        ({"datasets": [{"task": "book", "path": "x", "synthetic": {}}]}, "datasets.0"),
        ({"methods": [{"name": "go-json"}, {"name": "go-json"}]}, "methods"),
        ({"judges": [{"name": "sumie-exact"}, {"name": "sumie-exact"}]}, "judges"),
        (
            {
                "judges": [
                    {"name": "booookscore-batched"},
                    {"name": "booookscore-batched", "options": {"batch_size": 4}},
                ]
            },
            "judges",
        ),
        ({"judges": [{"name": "booookscore"}, {"name": "booookscore-batched"}]}, "judges"),
        ({"judges": [{"name": "mab"}, {"name": "rouge"}, {"name": "mab"}]}, "judges"),
        ({"engine": {"actors": 0}}, "engine.actors"),
        ({"sampling": {"temperature": -1}}, "sampling.temperature"),
        ({"judge_model": {"kind": "openai"}}, "judge_model"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_bad_config_names_the_field(tmp_path, over, field) -> None:
    with pytest.raises(ConfigError, match=f"`{field}"):
        check_config(parse_config(_cfg(tmp_path, **over)))


def test_judges_writing_the_same_rows_are_refused_naming_both(tmp_path) -> None:
    """Two booookscore-batched entries once wrote two identical sets of judge=booookscore rows blended into one
    figure; sumie-exact twice doubled every score row."""
    with pytest.raises(ConfigError) as info:
        check_config(parse_config(_cfg(tmp_path, judges=[{"name": "booookscore"}, {"name": "booookscore-batched"}])))
    msg = str(info.value)
    assert "'booookscore' and 'booookscore-batched' both write `judge=booookscore` rows" in msg, msg
    assert "memloop rescore" in msg
    check_config(parse_config(_cfg(tmp_path, judges=[{"name": "sumie-exact"}, {"name": "rouge"}])))  # apart: fine


def test_every_judge_writes_the_rows_it_is_registered_for() -> None:
    """The registry's `row_name` is what keeps a run's judges apart: it must be what each judge writes."""
    from memloop.eval.judges import JUDGES
    from memloop.eval.judges.booookscore import NAME as BOOOOKSCORE
    from memloop.eval.judges.sumie import NAME_EXACT, NAME_LLM

    rows = {name: JUDGES.get(name).row_name for name in JUDGES.names()}
    assert rows["booookscore"] == rows["booookscore-batched"] == BOOOOKSCORE
    assert (rows["mab"], rows["mab-llm"]) == ("mab", "mab-llm")  # apart: both may judge one run
    assert (rows["sumie"], rows["sumie-exact"]) == (NAME_LLM, NAME_EXACT)


def test_cli_fails_before_work_with_named_field(tmp_path) -> None:
    """Unwritable output: `memloop run` exits 2 naming `output`, and nothing is written anywhere."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_cfg(tmp_path, output=str(blocker / "runs"))))
    out = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "run", str(cfg)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert "StorageError" in out.stderr and "`output`" in out.stderr
    cfg.write_text(yaml.safe_dump(_cfg(tmp_path, methods=[{"name": "nope"}])))
    out = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "run", str(cfg)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert out.returncode == 2 and "`methods.0.name`" in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


BOOK = Path(__file__).resolve().parents[2] / "jobs/configs/data/lighthouse-keeper.txt"


@pytest.mark.parametrize(
    "over, expected",
    [
        ({"datasets": [{"task": "sumie", "synthetic": {"entities": 1}, "options": {"max_chunks": 0}}]}, "max_chunks"),
        (
            {"datasets": [{"task": "sumie", "synthetic": {"entities": 1}, "options": {"max_chunks": "two"}}]},
            "max_chunks",
        ),
        ({"datasets": [{"task": "book", "path": str(BOOK), "options": {"chunk_tokens": "abc"}}]}, "`chunk_tokens`"),
        ({"datasets": [{"task": "book", "path": str(BOOK), "options": {"chunk_tokenz": 5}}]}, "chunk_tokenz"),
        (
            {"methods": [{"name": "cok", "options": {"max_tokens": "abc"}}]},
            "`max_tokens`: Input should be a valid integer",
        ),
        (
            {"methods": [{"name": "cok", "options": {"max_tokens": -3}}]},
            "`max_tokens`: max_tokens must be an integer from 1",
        ),
        ({"methods": [{"name": "cok", "options": {"temperature": float("nan")}}]}, "`temperature`"),
        ({"sampling": {"top_k": 3000000000}}, "sampling.top_k"),
        ({"sampling": {"max_tokens": True}}, "sampling.max_tokens"),  # YAML's `true` was read as 1
        ({"sampling": {"max_tokens": 10**12}}, "sampling.max_tokens"),  # passed the dry run
        (
            {"methods": [{"name": "cok", "options": {"max_tokens": True}}]},
            "`max_tokens`: Input should be a valid integer",
        ),
        ({"methods": [{"name": "inc-update", "options": {"max_tokens": 10**12}}]}, "`max_tokens`: max_tokens must be"),
        ({"engine": {"page_budget": -1}}, "engine.page_budget"),
        ({"engine": {"options": {"kv_dtype": "int8"}}}, "`engine.options.kv_dtype` changes the model's outputs"),
        ({"model": {"options": {"kv_dtype": "int4"}}}, "`kv_dtype` must be one of"),
        ({"judges": [{"name": "booookscore-batched", "options": {"batch_size": "x"}}]}, "`judges.0.options`"),
        ({"judges": [{"name": "sumie-exact", "options": {"strict": True}}]}, "does not take option(s) strict"),
    ],
)
def test_option_values_are_checked_before_any_work(tmp_path, over, expected) -> None:
    import memloop

    cfg = {
        "output": str(tmp_path),
        "datasets": [{"task": "sumie", "synthetic": {"entities": 1}}],
        "methods": [{"name": "cok"}],
        **over,
    }
    with pytest.raises(memloop.MemloopError) as info:
        memloop.plan(cfg)
    assert expected in str(info.value), str(info.value)
    assert "\n" not in str(info.value)


def test_one_seed_rule_a_signed_64_bit_integer_everywhere(tmp_path) -> None:
    """A run's seed, a method's seed option and a request's seed follow one rule (docs/architecture.md): a
    negative seed is a seed; beyond 64 bits is the same refusal wherever it is given."""
    import memloop
    from memloop.sampling import SamplingParams

    plan = memloop.plan(_cfg(tmp_path, seed=-3, methods=[{"name": "inc-update", "options": {"seed": -(2**63)}}]))
    assert plan.units and SamplingParams(seed=-(2**63)).seed == -(2**63)
    with pytest.raises(
        memloop.MemloopError,
        match=r"`seed`: seed must be None \(fresh randomness\) or an integer "
        r"from -2\*\*63 to 2\*\*63 - 1; got -9223372036854775809",
    ):
        memloop.plan(_cfg(tmp_path, methods=[{"name": "inc-update", "options": {"seed": -(2**63) - 1}}]))


def test_a_judge_writing_rows_other_than_registered_fails_naming_the_fix() -> None:
    """rouge registered under another name without `rows_as`: its rows would escape the duplicate check."""
    from dataclasses import replace

    from memloop.eval.errors import JudgeError
    from memloop.eval.judges import JUDGES, run_judge

    JUDGES.register("rouge-again", replace(JUDGES.get("rouge"), name="rouge-again"))
    try:
        with pytest.raises(JudgeError, match="wrote rows as 'rouge' but is registered to write 'rouge-again'"):
            run_judge("rouge-again", "The keeper lit the lamp.", {"reference": "The keeper lit the lamp."})
    finally:
        JUDGES.unregister("rouge-again")
