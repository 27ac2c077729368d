"""Records what the demo config computes on the bundled SmolLM2 (`--model smollm2-135m`) as
tests/jobs/data/demo-smollm2.json: each unit's output and every score, keyed by unit.

    .venv/bin/python tests/jobs/record_demo.py RUN_DIR   # RUN_DIR: a finished run of that config

`test_demo_recorded.py` runs the same config and compares. A change to jobs/ (orchestration,
storage, reports) must leave the record as it is; a change to what units compute (engine/, eval/:
the run id's code digest) is re-recorded on purpose, with the reason in its commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RECORD = Path(__file__).with_name("data") / "demo-smollm2.json"


def digest_of(run_dir: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    def table(name: str) -> list[dict[str, Any]]:
        files = sorted(Path(run_dir, name).glob("*.parquet"))
        return [r for f in files for r in pq.read_table(f).to_pylist()]

    outputs = {
        r["unit"]: {
            "status": r["status"],
            "output_json": r["output_json"],
            "n_steps": r["n_steps"],
            "prompt_tokens": r["prompt_tokens"],
            "decoded_tokens": r["decoded_tokens"],
        }
        for r in table("samples")
    }
    scores = {f"{r['unit']}|{r['judge']}|{r['metric']}|{r.get('turn')}": r["value"] for r in table("scores")}
    return {"run_id": Path(run_dir).name, "outputs": outputs, "scores": scores}


if __name__ == "__main__":
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(digest_of(sys.argv[1]), indent=1, sort_keys=True) + "\n")
    print(RECORD)
