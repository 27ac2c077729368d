"""`memloop view RUN_URI [RUN_URI ...]`: browse runs in a local web app; `--bundle DIR` writes the same
pages as a static site instead. Read-only: nothing is written next to the runs."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer


def _api_key(key_file: Optional[Path]) -> Optional[str]:
    from memloop.jobs.results.view.errors import ViewError

    if key_file is not None:
        try:
            key = key_file.read_text().strip()
        except OSError as exc:
            raise ViewError(
                f"--api-key-file {key_file}: {exc.strerror or exc}; give a readable file holding the key"
            ) from None
        if not key:
            raise ViewError(f"--api-key-file {key_file} is empty; write the key in it")
        return key
    return os.environ.get("MEMLOOP_API_KEY") or None


def view_cmd(
    run_uris: Optional[List[str]] = typer.Argument(
        None,
        help="Run URIs (OUTPUT/RUN_ID, local or gs://) as printed by "
        "`memloop run`, or folders of runs (a config's `output`); default: "
        "the folder in MEMLOOP_LOG_DIR.",
    ),
    host: str = typer.Option(
        "127.0.0.1",
        "--host",
        help="Interface to bind (default: loopback only; any other needs "
        "an API key from MEMLOOP_API_KEY or --api-key-file).",
    ),
    port: int = typer.Option(8765, "--port", min=1, max=65535, help="Port to listen on."),
    api_key_file: Optional[Path] = typer.Option(
        None,
        "--api-key-file",
        help="A file holding the API key (instead of MEMLOOP_API_KEY; never on the command line, where `ps` shows it).",
    ),
    allow_host: List[str] = typer.Option(
        [],
        "--allow-host",
        help="Another name the browser reaches the viewer by (checked against the Host header; repeatable).",
    ),
    bundle: Optional[Path] = typer.Option(
        None,
        "--bundle",
        help="Write the pages of one run as a static site (HTML and "
        "JSON) into this directory and exit; it opens from disk with no server.",
    ),
) -> None:
    """Browse runs: a runs list (sort, filter), the report's tables, every unit's memory timeline and judges
    beside the gold, side by side, compare. `memloop view DIR` opens every run in a folder."""
    from memloop.jobs.results.view.errors import ViewError
    from memloop.jobs.results.view.log_dir import expand
    from memloop.jobs.results.view.runs import ViewRun

    given = list(run_uris or []) or [os.environ.get("MEMLOOP_LOG_DIR", "")]
    run_uris = expand(list(run_uris or []))
    if bundle is not None:
        if len(run_uris) != 1:
            raise ViewError("--bundle writes one run; give exactly one RUN_URI")
        from memloop.jobs.results.view.bundle import write_bundle

        run = ViewRun.load(run_uris[0])
        index = write_bundle(run, bundle)
        print(f"written: {index} ({len(run.index)} units); open it in a browser", flush=True)
        return
    key = _api_key(api_key_file)
    from memloop.jobs.results.view.app import check_bind, create_app

    check_bind(host, key)  # before the (possibly long) loading
    runs = []
    for uri in run_uris:
        print(f"loading {uri} ...", file=sys.stderr, flush=True)
        runs.append(ViewRun.load(uri))
    # the folders are looked at again as the runs list is opened: a run added later appears
    app = create_app(runs, host=host, api_key=key, allow_hosts=tuple(allow_host), sources=[g for g in given if g])
    import uvicorn

    shown = f"[{host}]" if ":" in host else host
    print(
        f"memloop view on http://{shown}:{port}/ ({len(runs)} run{'s' if len(runs) != 1 else ''}); Ctrl-C stops it",
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(app, host=host, port=port, log_level="warning")


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    app.command("view")(view_cmd)
