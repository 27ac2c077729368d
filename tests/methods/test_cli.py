"""`memloop methods --json` prints {method: {template_id: sha256}} as its last line."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys

from memloop.eval.methods import list_methods
from memloop.eval.templates import METHOD_TEMPLATE_DIR as TEMPLATE_DIR

NAMES = [
    "go-text",
    "go-json",
    "gu-text",
    "gu-json",
    "gm-text",
    "gm-json",
    "cok",
    "prism-inplace",
    "prism-amendments",
    "hier-merge",
    "inc-update",
    "kg-retrieval",
    "no-kg",
    "fart-base",
    "fart-compressed",
    "fart-rolling",
    "long-context",
]


def test_methods_json_lists_every_method_with_template_hashes() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from memloop.jobs.commands.cli import main; main()", "methods", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    manifest = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted(manifest) == sorted(NAMES) == sorted(list_methods())
    for name, templates in manifest.items():
        assert templates, name
        for tid, sha in templates.items():
            assert hashlib.sha256((TEMPLATE_DIR / f"{tid}.txt").read_bytes()).hexdigest() == sha
    used = {tid for t in manifest.values() for tid in t}
    on_disk = {p.stem for p in TEMPLATE_DIR.glob("*.txt")}
    assert used == on_disk  # no orphan template file, none missing
