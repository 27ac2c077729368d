"""The `memloop` command line. Each area registers its commands from its own module.

Command modules import heavy libraries (jax, ray, torch) inside their functions so that
`memloop --help` stays fast.
"""

from __future__ import annotations

import importlib
import sys

import typer
from memloop.jobs.results import paper_tables  # noqa: F401 (registers the table names a run config may ask for)

from memloop.errors import MemloopError

app = typer.Typer(
    name="memloop",
    help="Run long-input LLM methods with incremental memories at scale, and score them.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        from memloop.jobs.store.provenance import code_version, package_version

        print(f"memloop {package_version()} ({code_version()})")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and the code it runs, then exit."
    ),
) -> None:
    """Run long-input LLM methods with incremental memories at scale, and score them."""


bench_app = typer.Typer(
    help="Benchmarks that print ratios against peers measured in the same run.", no_args_is_help=True
)
app.add_typer(bench_app, name="bench")

# module -> owner of the commands it registers (run/report, serve, data, score, methods, bench ...)
COMMAND_MODULES = (
    "memloop.jobs.commands.run",
    "memloop.jobs.commands.serve",
    "memloop.jobs.commands.data",
    "memloop.jobs.commands.score",
    "memloop.jobs.commands.methods",
    "memloop.jobs.commands.bench_model",
    "memloop.jobs.commands.bench_prefix",
    "memloop.jobs.commands.bench_gpu",
    "memloop.jobs.commands.bench_scale",
    "memloop.jobs.commands.bench_rows",
    "memloop.jobs.commands.export",
    "memloop.jobs.commands.rescore",
    "memloop.jobs.commands.compare",
    "memloop.jobs.commands.nightly",
    "memloop.jobs.commands.view",
    "memloop.jobs.commands.bench_view",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app, bench_app)


def main() -> None:
    """Entry point: user-caused errors print a one-line explanation and exit with status 2."""
    try:
        app()
    except MemloopError as exc:
        print(f"error: {type(exc).__name__}: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


if __name__ == "__main__":  # `python -m memloop.jobs.commands.cli ...`, as the `memloop` script
    main()
