"""Resuming a run whose directory was damaged between invocations, through `memloop run` on the scripted
model: a deleted `steps` file, a cut-short `samples` or `steps` file, bytes overwritten inside one whose
footer is intact, and the delete the error advises. After each, the finished run holds every unit exactly
once, each with its steps."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from memloop.jobs.store.run_store import RunStore

from tests.jobs.cli_entry import memloop_cli
from tests.jobs.scripted_endpoint import attribute_table_answer, scripted_endpoint

UNITS = 4


def _cfg(tmp_path: Path, url: str) -> Path:
    import yaml

    cfg = {
        "name": "matrix",
        "output": str(tmp_path / "runs"),
        "flush_units": 1,
        "flush_s": 0.1,
        "retries": 0,
        "datasets": [{"task": "sumie", "synthetic": {"entities": UNITS, "seed": 5}, "options": {"max_chunks": 2}}],
        "methods": [{"name": "gu-json", "options": {"max_attempts": 1}}],
        "model": {"kind": "openai", "endpoint": {"base_url": url, "model": "m", "max_concurrency": 1}},
        "judge_cpus": 0.25,
    }
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _run(cfg: Path, capsys, monkeypatch) -> tuple[int, dict, str]:
    """`memloop run CFG` through the real entry point (its errors are one line and exit 2)."""
    code, out, err = memloop_cli(["run", str(cfg)], capsys, monkeypatch)
    last = out.strip().splitlines()[-1] if out.strip() else "{}"
    return code, json.loads(last) if last.startswith("{") else {}, out + err


def _overwrite_inside(path: Path) -> None:
    """Overwrite 16 bytes of compressed page data, footer untouched: the middle of the first zstd frame of the
    file's largest column chunk (its dictionary page's values; a page header before a frame holds min/max
    statistics no reader decodes)."""
    data = bytearray(path.read_bytes())
    meta = pq.read_metadata(pa.BufferReader(bytes(data)))
    chunk = max(
        (meta.row_group(g).column(c) for g in range(meta.num_row_groups) for c in range(meta.num_columns)),
        key=lambda c: c.total_compressed_size,
    )
    first = chunk.dictionary_page_offset or chunk.data_page_offset
    end = chunk.data_page_offset if chunk.dictionary_page_offset else first + chunk.total_compressed_size
    frame = data.index(b"\x28\xb5\x2f\xfd", first, end)  # zstd's magic number starts the page's values
    at = frame + (end - frame) // 2
    data[at : at + 16] = bytes(b ^ 0x5A for b in data[at : at + 16])
    path.write_bytes(bytes(data))
    assert pq.read_metadata(pa.BufferReader(bytes(data))).num_rows == meta.num_rows  # the footer reads as before


def _assert_whole(uri: str) -> None:
    rs = RunStore.at(uri)
    samples, steps = rs.table("samples").to_pandas(), rs.table("steps").to_pandas()
    assert len(samples) == UNITS and samples["unit"].is_unique and (samples["status"] == "ok").all()
    assert set(steps["unit"]) == set(samples["unit"])  # every unit with its steps
    assert (samples.set_index("unit")["n_steps"] == steps.groupby("unit").size()).all()


@pytest.mark.parametrize(
    "damage", ["delete-steps", "truncate-steps", "truncate-samples", "overwrite-steps", "overwrite-samples"]
)
def test_a_damaged_shard_is_never_counted_done(ray_local, tmp_path, capsys, monkeypatch, damage) -> None:
    with scripted_endpoint(attribute_table_answer, delay_s=0.2) as (url, _):  # slow: a shard per unit
        cfg = _cfg(tmp_path, url)
        code, first, out = _run(cfg, capsys, monkeypatch)
        assert code == 0 and first["computed"] == UNITS, out
        root = Path(first["output"])
        table = damage.split("-")[1]
        victim = sorted((root / table).glob("*.parquet"))[0]
        shard = victim.stem
        units = set(
            RunStore.at(first["output"])._read_one(f"{root.name}/samples/{shard}.parquet").column("unit").to_pylist()
        )
        if damage == "delete-steps":
            victim.unlink()
        else:
            if damage.startswith("truncate"):
                victim.write_bytes(victim.read_bytes()[:-200])
            else:
                _overwrite_inside(victim)
            code, _, out = _run(cfg, capsys, monkeypatch)
            assert code == 2 and f"error: DamagedRunError: 1 file(s) of {root} are damaged: {victim}" in out, out
            assert "delete them" in out and "already done" not in out
            victim.unlink()  # what the error says to do
        code, again, out = _run(cfg, capsys, monkeypatch)
        assert code == 0, out
        assert (again["skipped"], again["computed"]) == (UNITS - len(units), len(units)), (again, out)
        if table == "steps":
            assert f"1 finished shard(s) miss a file (steps/{shard}.parquet): their units are computed again" in out
        code, third, out = _run(cfg, capsys, monkeypatch)
        assert code == 0 and (third["skipped"], third["computed"]) == (UNITS, 0), out
    _assert_whole(first["output"])
