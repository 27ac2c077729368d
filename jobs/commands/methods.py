"""`memloop methods`: the registered methods and the sha256 of every prompt template they use."""
from __future__ import annotations

import json

import typer


def methods(as_json: bool = typer.Option(False, "--json", help="Print one JSON object as the last line.")) -> None:
    """List the methods a run config can name, with their prompt template hashes."""
    from eval.methods import template_manifest

    manifest = template_manifest()
    if as_json:
        print(json.dumps(manifest, sort_keys=True))
        return
    for name, templates in manifest.items():
        print(name)
        for tid, sha in templates.items():
            print(f"  {tid:32s} {sha[:16]}")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("methods")(methods)
