"""Run progress: a tqdm bar on an interactive terminal, one log line per change elsewhere (a Ray job's
log, CI, a file), each with units done and failed, tokens/s, the engine's cache hit and the output."""

from __future__ import annotations

import sys
import time
from typing import Any, Callable

from memloop.eval.judges.cost import cache_hit_rate
from memloop.eval.llm import Usage


class Progress:
    def __init__(self, total: int, uri: str, log: Callable[[str], None], interactive: bool) -> None:
        self.total, self.uri, self.log = total, uri, log
        self.t0 = time.monotonic()
        self.bar: Any = None
        if interactive:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="unit", file=sys.stderr, dynamic_ncols=True, desc="memloop")

    def update(self, finished: int, failed: int, prompt: int, cached: int, decoded: int, engines: str = "") -> None:
        """`engines`: what the engines are doing, in words (shapes compiled, sequences running), shown with
        the counts so that the first minutes of a run (compiling, 0 units done) do not read as a hang."""
        el = max(time.monotonic() - self.t0, 1e-9)
        tok_s = (prompt - cached + decoded) / el
        hit = 100.0 * cache_hit_rate(Usage(prompt, cached, 0))
        extra = f" | {engines}" if engines else ""
        if self.bar is not None:
            self.bar.n = finished
            self.bar.set_postfix_str(f"{failed} failed | {tok_s:.0f} tok/s | cache hit {hit:.1f}%{extra}", refresh=True)
            return
        self.log(
            f"progress: {finished}/{self.total} units ({failed} failed) | {tok_s:.0f} tok/s "
            f"({decoded / el:.1f} decoded/s) | cache hit {hit:.1f}%{extra} | {el:.0f} s | -> {self.uri}"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.log(f"results -> {self.uri}")
