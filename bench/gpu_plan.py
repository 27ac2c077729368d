"""The plan and the record of `memloop bench gpu`: what each step is expected to cost on this device, which
steps fit the budget, and one JSON file rewritten as each step finishes.

A device run has minutes, not hours (a lent GPU gives 15 minutes, all tries counted), so the bench plans
before it measures. Each step declares its work -- FLOPs, bytes moved, engine iterations, programs to
compile -- and a calibration on this device (a bf16 matrix product, a large copy, and a tiny model's
compile and step) turns work into expected seconds:

    expected_s = compiles * compile_s + iterations * step_overhead_s + flops / flop_rate + bytes / byte_rate

Steps run in order of value (correctness first, then decode at batch 64, prefill at 8k, then the rest);
a step whose expected seconds do not fit what is left of `--budget-s` is skipped with that reason, so a
run that stops at its limit has already written the figures that mattered most.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable


@dataclass(frozen=True)
class Work:
    """What a step asks of the device (all totals over the step, timed passes and warm-ups included)."""

    flops: float = 0.0
    bytes: float = 0.0
    iterations: int = 0  # engine steps (each pays a fixed dispatch and host cost)
    compiles: int = 0  # distinct programs the step compiles for the first time
    fixed_s: float = 0.0  # seconds that scale with none of the above (host work: writing a checkpoint)

    def __add__(self, other: "Work") -> "Work":
        return Work(
            self.flops + other.flops,
            self.bytes + other.bytes,
            self.iterations + other.iterations,
            self.compiles + other.compiles,
            self.fixed_s + other.fixed_s,
        )


@dataclass(frozen=True)
class Rates:
    """This device's measured rates (the calibration step)."""

    flop_rate: float  # bf16 matrix product FLOP/s
    byte_rate: float  # bytes/s of a large copy (read + write)
    step_overhead_s: float  # one engine decode step of a tiny model
    compile_s: float  # one new program of a tiny model (a larger model's costs `compile_scale` times this)
    compile_scale: float = 3.0

    def seconds(self, work: Work) -> float:
        return (
            work.compiles * self.compile_s * self.compile_scale
            + work.iterations * self.step_overhead_s
            + work.flops / self.flop_rate
            + work.bytes / self.byte_rate
            + work.fixed_s
        )


@dataclass
class Step:
    """One measurement. `run` returns the figures (a JSON-able dict); `needs` are setup steps (building a
    checkpoint, loading a model) that run first, once, and whose cost counts toward the first step needing them."""

    name: str
    work: Callable[[], Work]
    run: Callable[[], dict[str, Any]]
    needs: tuple[str, ...] = ()


@dataclass
class Record:
    """The bench's JSON: written whole (to a temporary file, then renamed) after every step."""

    path: Path
    data: dict[str, Any] = field(default_factory=dict)

    def write(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=_jsonable))
        os.replace(tmp, self.path)


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy and JAX scalars
        return value.item()
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    return str(value)


class Runner:
    """Runs steps in the given (value) order within a budget, recording each as it finishes."""

    def __init__(
        self,
        record: Record,
        rates: Rates,
        budget_s: float,
        setups: dict[str, Step],
        log: Callable[[str], None] = print,
        started: float | None = None,
    ) -> None:
        self.record, self.rates, self.budget_s, self.setups, self.log = record, rates, budget_s, setups, log
        self.started = time.perf_counter() if started is None else started
        self.done: set[str] = set()
        self.failed: list[str] = []
        record.data.setdefault("steps", {})

    def left_s(self) -> float:
        return self.budget_s - (time.perf_counter() - self.started)

    def expected_s(self, step: Step, planned: set[str]) -> float:
        setup = sum(self.rates.seconds(self.setups[n].work()) for n in step.needs if n not in planned)
        return setup + self.rates.seconds(step.work())

    def plan(self, steps: list[Step]) -> list[dict[str, Any]]:
        """Each step's expected seconds and whether it fits, in order, as if every earlier one that fits ran."""
        planned = set(self.done)
        left = self.left_s()
        rows = []
        for step in steps:
            expected = self.expected_s(step, planned)
            fits = expected <= left
            if fits:
                left -= expected
                planned.update(step.needs)
            rows.append({"step": step.name, "expected_s": round(expected, 1), "fits": fits})
        return rows

    def run(self, steps: list[Step]) -> None:
        plan = self.plan(steps)
        self.record.data["plan"] = {
            "budget_s": self.budget_s,
            "left_at_plan_s": round(self.left_s(), 1),
            "rates": asdict(self.rates),
            "steps": plan,
        }
        self.record.write()
        self.log(f"plan ({self.budget_s:.0f} s budget, {self.left_s():.0f} s left):")
        for row in plan:
            self.log(f"  {row['step']:34s} {row['expected_s']:9.1f} s  {'run' if row['fits'] else 'skip'}")
        for step in steps:
            expected = self.expected_s(step, self.done)
            if expected > self.left_s():
                self._put(
                    step.name,
                    {
                        "status": "skipped",
                        "expected_s": round(expected, 1),
                        "reason": f"expected {expected:.0f} s, {max(0.0, self.left_s()):.0f} s of the budget left",
                    },
                )
                continue
            if not all(self._setup(n) for n in step.needs):
                self._put(
                    step.name,
                    {
                        "status": "skipped",
                        "reason": "a setup step it needs failed: "
                        + ", ".join(n for n in step.needs if n in self.failed),
                    },
                )
                continue
            self._execute(step, expected)

    def _setup(self, name: str) -> bool:
        if name in self.done:
            return True
        if name in self.failed:
            return False
        step = self.setups[name]
        return self._execute(step, self.rates.seconds(step.work()))

    def _execute(self, step: Step, expected: float) -> bool:
        t0 = time.perf_counter()
        try:
            result = step.run()
        except Exception as exc:  # one step's failure is recorded and the others still run
            seconds = time.perf_counter() - t0
            self.failed.append(step.name)
            self._put(
                step.name,
                {
                    "status": "failed",
                    "seconds": round(seconds, 2),
                    "expected_s": round(expected, 1),
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=8)[-4000:],
                },
            )
            self.log(f"{step.name}: FAILED after {seconds:.1f} s: {type(exc).__name__}: {exc}")
            return False
        seconds = time.perf_counter() - t0
        self.done.add(step.name)
        self._put(step.name, {"status": "ok", "seconds": round(seconds, 2), "expected_s": round(expected, 1), **result})
        self.log(f"{step.name}: {seconds:.1f} s (expected {expected:.1f}) {_summary(result)}")
        return True

    def _put(self, name: str, entry: dict[str, Any]) -> None:
        self.record.data["steps"][name] = entry
        self.record.write()
        if entry["status"] == "skipped":
            self.log(f"{name}: skipped ({entry['reason']})")


def _summary(result: dict[str, Any]) -> str:
    shown = [
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in result.items()
        if isinstance(v, (int, float, str, bool))
    ]
    return " ".join(shown[:8])
