"""Configs and inputs that would exhaust the machine: alias bombs anywhere in the YAML, nesting too
deep to parse, data paths that are FIFOs, devices or symlink loops, records over the loaders' bound.
Each is refused in one line before anything is built."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from memloop.eval.datasets.textfile import MAX_RECORD_BYTES
from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import MAX_CONFIG_NODES, load_config

LAUGHS = """
      a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
      b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
      c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
      d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
      e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
      f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
      g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
      h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
      i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]"""


def _write(tmp_path: Path, where: str) -> Path:
    """A config whose free-form option dict `where` holds the bomb (validation never looks inside)."""
    parts = {"synthetic": "", "engine": "", "model": ""}
    parts[where] = LAUGHS
    text = (
        f"name: x\noutput: {tmp_path / 'runs'}\n"
        f"datasets:\n  - task: sumie\n    synthetic:\n      entities: 1{parts['synthetic']}\n"
        "methods: [{name: gu-json}]\n"
        f"engine:\n  options:\n    {'bomb:' if where == 'engine' else 'tp: 1'}{parts['engine']}\n"
        f"model:\n  options:\n    {'bomb:' if where == 'model' else 'quiet: 1'}{parts['model']}\n"
    )
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("where", ["synthetic", "engine", "model"])
def test_an_alias_bomb_in_a_free_form_dict_is_refused(tmp_path, where) -> None:
    path = _write(tmp_path, where)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (
        f"{path}: expands to over {MAX_CONFIG_NODES} YAML nodes through aliases (*name) or "
        "a recursive alias; a run config is small: write the repeated parts out"
    )


def test_a_few_aliases_are_fine(tmp_path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        f"name: x\noutput: {tmp_path}\n"
        "datasets: [{task: sumie, synthetic: &s {entities: 1, seed: 3}}, {task: sumie, synthetic: *s}]\n"
        "methods: [{name: gu-json}]\n"
    )
    cfg = load_config(path)
    assert cfg.datasets[0].synthetic == cfg.datasets[1].synthetic == {"entities": 1, "seed": 3}


def test_a_recursive_alias_and_deep_nesting_are_refused(tmp_path) -> None:
    rec = tmp_path / "rec.yaml"
    rec.write_text(
        f"name: x\noutput: {tmp_path}\ndatasets: &d [{{task: sumie, synthetic: {{x: *d}}}}]\n"
        "methods: [{name: gu-json}]\n"
    )
    with pytest.raises(ConfigError, match="recursive alias"):
        load_config(rec)
    deep = tmp_path / "deep.yaml"
    deep.write_text(
        f"name: x\noutput: {tmp_path}\nengine: {{options: {{x: {'[' * 20000}{']' * 20000}}}}}\n"
        "datasets: [{task: sumie}]\nmethods: [{name: gu-json}]\n"
    )
    with pytest.raises(ConfigError, match="nests lists or mappings too deeply to read"):
        load_config(deep)


ROOT = Path(__file__).resolve().parents[2]


def _dry_run(tmp_path: Path, data_path: str, task: str = "book") -> subprocess.CompletedProcess:
    """`memloop run --dry-run` in a process of its own (a read that blocks cannot hang the suite)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"name: x\noutput: {tmp_path / 'runs'}\ndatasets: [{{task: {task}, path: {data_path}}}]\n"
        "methods: [{name: inc-update}]\n"
    )
    try:
        return subprocess.run(
            [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "run", str(cfg), "--dry-run"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"--dry-run on {data_path} did not finish in 120 s")


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "symlink-loop"])
def test_a_dataset_path_that_is_not_a_regular_file_is_one_line(tmp_path, kind) -> None:
    if kind == "fifo":
        path = tmp_path / "book.txt"
        os.mkfifo(path)
        expected = f"dataset path {path} is a FIFO (named pipe), not a regular file: reading it could block"
    elif kind == "dev-zero":
        path = Path("/dev/zero")
        expected = "dataset path /dev/zero is a character device, not a regular file"
    else:
        path = tmp_path / "a.txt"
        path.symlink_to(tmp_path / "b.txt")
        (tmp_path / "b.txt").symlink_to(path)
        expected = f"dataset path {path} is a symlink loop: point the path at a real file"
    out = _dry_run(tmp_path, str(path))
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr.startswith(f"error: ConfigError: `datasets.0.path`: {expected}") and out.stderr.count("\n") == 1


def test_a_book_over_the_record_bound_is_refused_without_reading_it_all(tmp_path) -> None:
    book = tmp_path / "big.txt"
    with book.open("w") as f:  # one line, as a book without line breaks
        f.write("word " * (MAX_RECORD_BYTES // 5 + 10))
    out = _dry_run(tmp_path, str(book))
    assert out.returncode == 2, out.stderr[-2000:]
    assert out.stderr == (
        f"error: ConfigError: `datasets.0`: book {book} is larger than 16 MiB, more than a loader "
        "reads for one record; split it into smaller files or pass a shorter text\n"
    )


def test_a_jsonl_record_over_the_bound_names_its_line(tmp_path) -> None:
    from memloop.eval.datasets.errors import RecordTooLargeError
    from memloop.eval.datasets.records import read_records

    path = tmp_path / "d.jsonl"
    path.write_text('{"a": 1}\n' + '{"a": "' + "x" * MAX_RECORD_BYTES + '"}\n')
    with pytest.raises(RecordTooLargeError, match=f"^{path}:2 is a record of over 16 MiB"):
        list(read_records(path))


@pytest.mark.parametrize(
    "over, expected",
    [
        (
            {"repeats": 1_000_000_000},
            "`repeats`: Value error, at most 100 repeats (got 1,000,000,000); lower it (the papers use 1 to 5)",
        ),
        (
            {"datasets": [{"task": "sumie", "synthetic": {"entities": 1}, "limit": 10**9}]},
            "`datasets.0.limit`: Value error, at most 1,000,000 samples per dataset (got 1,000,000,000); lower it, "
            "or leave it out to take every sample",
        ),
        (
            {"datasets": [{"task": "sumie", "synthetic": {"entities": 1}, "options": {"max_chunks": 10**9}}]},
            "`datasets.0.options`: Value error, `max_chunks` is at most 1,000,000 chunks (got 1,000,000,000); lower "
            "it, or leave it out to keep every chunk",
        ),
        (
            {"engine": {"max_in_flight": 10**7}},
            "`engine.max_in_flight`: Value error, at most 4,096 samples at once per actor (got 10,000,000); lower it",
        ),
        (
            {"engine": {"actors": 10**6}},
            "`engine.actors`: Value error, at most 1,024 engine actors (got 1,000,000); lower it",
        ),
        ({"retries": 10**6}, "`retries`: Value error, at most 20 retries of a sample (got 1,000,000); lower it"),
        (
            {"flush_units": 10**9},
            "`flush_units`: Value error, at most 100,000 units per shard (got 1,000,000,000); lower it",
        ),
    ],
)
def test_counts_are_bounded_with_a_message(tmp_path, over, expected) -> None:
    from memloop.jobs.run.config import parse_config

    cfg = {
        "name": "x",
        "output": str(tmp_path),
        "datasets": [{"task": "sumie", "synthetic": {"entities": 1}}],
        "methods": [{"name": "gu-json"}],
        **over,
    }
    with pytest.raises(ConfigError) as err:
        parse_config(cfg, "c.yaml")
    assert str(err.value) == f"c.yaml: {expected}"


def _cli(args: list[str]) -> tuple[int, str]:
    from memloop.jobs.commands.cli import app
    from typer.testing import CliRunner

    res = CliRunner().invoke(app, args)
    err = f"error: {type(res.exception).__name__}: {res.exception}" if res.exception and res.exit_code == 1 else ""
    return res.exit_code, err or res.output


def _sumie(tmp_path: Path, methods: str = "[{name: gu-json}]", judges: str = "[]", output: str = "") -> Path:
    cfg = tmp_path / "s.yaml"
    cfg.write_text(
        f"name: x\noutput: {output or tmp_path / 'runs'}\n"
        f"datasets: [{{task: sumie, synthetic: {{entities: 1, seed: 2}}}}]\nmethods: {methods}\njudges: {judges}\n"
    )
    return cfg


@pytest.mark.parametrize(
    "output, expected",
    [
        (
            "s3://bucket/runs",
            "error: StorageError: output 's3://bucket/runs': only local paths and gs://bucket/prefix are "
            "supported; write a local directory or gs://BUCKET/PREFIX",
        ),
        ("gs://", "error: StorageError: 'gs://' names no bucket; write gs://BUCKET/PREFIX"),
        (
            "file:///tmp/runs",
            "error: StorageError: output 'file:///tmp/runs': only local paths and gs://bucket/prefix are "
            "supported; for a local directory write the path without the scheme (/tmp/runs)",
        ),
        ("gs://no-such-bucket/runs", "error: StorageError: `output`: cannot write gs://no-such-bucket/runs/"),
        ("FILE/runs", "error: StorageError: `output`: {tmp}/FILE is not a directory; choose a writable `output`"),
    ],
)
def test_dry_run_checks_the_output(tmp_path, gcs_emulator, output, expected) -> None:
    (tmp_path / "FILE").write_text("a file")
    if output.startswith("FILE"):
        output = str(tmp_path / output)
    code, text = _cli(["run", str(_sumie(tmp_path)), "--dry-run", "--output", output])
    assert code == 1 and text.startswith(expected.format(tmp=tmp_path)), text  # (main() turns it into exit 2)
    if output.startswith("gs://no-such"):
        assert "NotFound" in text


def test_dry_run_of_a_reachable_bucket_is_clean(tmp_path, gcs_emulator) -> None:
    code, text = _cli(["run", str(_sumie(tmp_path)), "--dry-run", "--output", f"{gcs_emulator}/dry"])
    assert code == 0 and text.endswith("dry run: nothing started\n"), text


def test_a_method_no_configured_judge_can_score_is_refused_before_work(tmp_path) -> None:
    code, text = _cli(
        ["run", str(_sumie(tmp_path, "[{name: gu-text}, {name: gu-json}]", "[{name: sumie-exact}]")), "--dry-run"]
    )
    assert code == 1 and text == (
        "error: ConfigError: `judges.0`: sumie-exact matches attribute-value pairs of a JSON memory, and `methods.0` "
        "(gu-text) keeps a text memory: score it with a judge that reads text (e.g. `sumie`, which extracts the pairs "
        "with the judge LLM), or use the method's JSON variant"
    ), text


def test_a_json_only_judge_skips_text_methods_another_judge_scores(tmp_path) -> None:
    """Seed 000's table: `sumie` scores every method, `sumie-exact` the JSON ones only."""
    from memloop.jobs.run.config import load_config
    from memloop.jobs.run.plan import make_plan

    plan = make_plan(
        load_config(_sumie(tmp_path, "[{name: gu-text}, {name: gu-json}]", "[{name: sumie}, {name: sumie-exact}]")),
        dry_run=True,
    )
    judged = {u.method.name: [j.name for j in u.judges] for u in plan.units}
    assert judged == {"gu-text": ["sumie"], "gu-json": ["sumie", "sumie-exact"]}
