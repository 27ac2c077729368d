"""`memloop ARGS` through the real entry point in this process, as a user's shell would run it (errors
become one line and an exit code)."""

from __future__ import annotations

import sys


def memloop_cli(args: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `memloop ARGS`."""
    from memloop.jobs.commands.cli import main

    monkeypatch.setattr(sys, "argv", ["memloop", *args])
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err
