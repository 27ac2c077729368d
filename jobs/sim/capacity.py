"""How many hosts x loops one driver keeps >= 90% busy: a projection from measured inputs only.

`memloop bench scale` on a 2-core machine measures that machine as much as the design: 64 simulated
hosts, their method workers and the driver share its cores, so its large points say "the machine was
the limit" (dilation > 1), not what a driver sustains on a pod. This module asks the design's
question from three inputs, none typed in:

  * the driver's CPU per engine step and per unit, measured at the sweep's points that this machine
    ran as modelled (dilation <= `TRUSTED_DILATION`): the driver's whole CPU (every thread of its
    process) over the point's steps, split by what the driver's own accounting (`CpuSplit`) spent
    handing out units (a per-unit cost) and the rest (per-step: loops, receiving, writing); the worst
    such point per placement is taken;
  * the target's engine step times, from the latency model the sweep ran (`LatencyModel`: the
    accelerator host's datasheet figures, or the CPU engine measured);
  * the shape of a step (uncached prompt tokens, decoded tokens) and the steps per unit, measured
    from the recording the sweep replayed.

Method. A host with L loops (batch B = min(L, max_batch)) serves a round in which each loop makes one
step in R = L * prefill(P) + ceil(L / max_batch) * D * decode_step(B) seconds, so H hosts ask the
driver for H * L / R steps a second, each costing c = c_step + c_unit / S seconds of the driver's one
interpreter (its Python work runs under one GIL: one core, whatever the VM has). At utilisation
rho = H * L * c / R a loop waits c / (1 - rho) for the driver per step (a single queue with random
arrivals, M/M/1), during which its batch slot is idle; the engine is >= 90% busy while
c / (1 - rho) <= R / 9. The largest H is therefore floor((1 - 9c/R) * R / (L * c)), zero when one
step's driver work alone exceeds a ninth of R.
"""

from __future__ import annotations

import math
from typing import Any

from memloop.jobs.errors import ConfigError
from memloop.jobs.sim.replay import Answer, LatencyModel

TRUSTED_DILATION = 1.25  # a point whose simulated steps ran this much slower than modelled measured the machine
BUSY = 0.9  # the engine share the projection keeps
LOOPS = (8, 16, 32, 64, 128, 256)  # loops per host the table covers

METHOD = (
    "hosts(L) = floor((1 - 9c/R) * R / (L*c)), R = L*prefill(P) + ceil(L/max_batch)*D*decode_step(min(L, "
    "max_batch)) from the latency model, c = driver CPU per step + per unit / steps per unit (measured at "
    "the sweep's points with dilation <= 1.25, the worst per placement), P, D, steps per unit from the "
    "recording; the engine >= 90% busy while the driver's M/M/1 response c/(1-rho) <= R/9"
)


class CapacityError(ConfigError):
    """The projection has no measured input to stand on (no point of the sweep ran as modelled)."""


def step_shape(answers: list[Answer], steps: int, units: int) -> dict[str, float]:
    """The recording's mean step (uncached prompt tokens, decoded tokens) and its steps per unit."""
    if not answers or not units:
        raise CapacityError("the recording has no steps to take a step's shape from; record a finished run first")
    n = len(answers)
    return {
        "prompt_tokens_uncached": sum(a.prompt_tokens - a.cached_tokens for a in answers) / n,
        "decoded_tokens": sum(a.decoded_tokens for a in answers) / n,
        "steps_per_unit": steps / units,
    }


def measured_driver_cost(
    rows: list[dict[str, Any]], trusted_dilation: float = TRUSTED_DILATION
) -> dict[str, dict[str, Any]]:
    """Per placement: the driver's CPU seconds per step (its loops, receiving, writing) and per unit
    (handing it out), from the worst point this machine ran as modelled, with the point named."""
    out: dict[str, dict[str, Any]] = {}
    for r in rows:
        if "units_per_s" not in r or not r.get("units") or r["engine_dilation"] > trusted_dilation:
            continue
        steps = r["steps_per_s"] * r["wall_s"]
        if not steps or math.isnan(r["driver_cpu"]):
            continue
        total = r["driver_cpu"] * r["wall_s"]  # CPU seconds of the whole driver process over the point
        split = r.get("driver_ms_per_step") or {}
        own = sum(split.values())  # the driver's accounted work, ms per step
        unit_share = split.get("hand_out", 0.0) / own if own else 0.0
        cost = {
            "cpu_s_per_step": total * (1 - unit_share) / steps,
            "cpu_s_per_unit": total * unit_share / r["units"],
            "steps_per_unit_measured": steps / r["units"],
            "point": f"{r['hosts']}x{r['loops']} {r['placement']} (dilation {r['engine_dilation']:.2f}, "
            f"driver {r['driver_cpu']:.2f} cores over {r['wall_s']:.1f} s, {steps:.0f} steps, "
            f"{r['units']} units)",
        }
        worst = out.get(r["placement"])
        if worst is None or _per_step(cost, cost["steps_per_unit_measured"]) > _per_step(
            worst, worst["steps_per_unit_measured"]
        ):
            out[r["placement"]] = cost
    return out


def _per_step(cost: dict[str, Any], steps_per_unit: float) -> float:
    return cost["cpu_s_per_step"] + cost["cpu_s_per_unit"] / max(steps_per_unit, 1e-9)


def round_s(m: LatencyModel, loops: int, shape: dict[str, float]) -> float:
    """Engine seconds for a round in which each of `loops` loops makes one step."""
    batch = min(loops, m.max_batch)
    return loops * m.prefill_s(int(round(shape["prompt_tokens_uncached"]))) + math.ceil(loops / m.max_batch) * shape[
        "decoded_tokens"
    ] * m.decode_step_s(batch)


def max_hosts(c: float, r: float, loops: int, busy: float = BUSY) -> int:
    """The most hosts of `loops` loops one driver serves at >= `busy` engine share (see the module)."""
    k = busy / (1 - busy)  # 9 at 90%: the driver's response may be at most R / 9
    if c <= 0:
        raise CapacityError("a measured driver CPU of 0 per step cannot be projected from; measure longer points")
    room = 1 - k * c / r
    return max(0, math.floor(room * r / (loops * c)))


def capacity(
    result: dict[str, Any], loops: tuple[int, ...] = LOOPS, trusted_dilation: float = TRUSTED_DILATION
) -> dict[str, Any]:
    """The largest hosts x loops one driver keeps >= 90% busy, per placement, from `result` (a sweep's:
    its rows, its latency model and its recording's step shape): each input with where it came from."""
    costs = measured_driver_cost(result["rows"], trusted_dilation)
    if not costs:
        raise CapacityError(
            "no point of the sweep ran as modelled (every one had dilation > "
            f"{trusted_dilation} or failed), so the driver's CPU per step was not measured; "
            "run smaller points (e.g. --points 1x8,4x16) or on a quieter machine"
        )
    m = LatencyModel.from_dict(result["latency_model"])
    shape = result["step_shape"]
    table = []
    for n in loops:
        r = round_s(m, n, shape)
        row: dict[str, Any] = {"loops": n, "round_s": r, "host_steps_per_s": n / r}
        for place, cost in costs.items():
            c = _per_step(cost, shape["steps_per_unit"])
            h = max_hosts(c, r, n)
            row[f"hosts_{place}"] = h
            row[f"driver_cores_{place}"] = h * n / r * c
        table.append(row)
    best = {p: max(table, key=lambda x: x[f"hosts_{p}"] * x["loops"]) for p in costs}
    return {
        "method": METHOD,
        "busy": BUSY,
        "inputs": {
            "driver": costs,
            "latency_model": m.to_dict(),
            "step_shape": shape,
            "decode_step_s_at_max_batch": m.decode_step_s(m.max_batch),
            "prefill_s_per_step": m.prefill_s(int(round(shape["prompt_tokens_uncached"]))),
        },
        "rows": table,
        "largest": {
            p: {"hosts": b[f"hosts_{p}"], "loops": b["loops"], "hosts_x_loops": b[f"hosts_{p}"] * b["loops"]}
            for p, b in best.items()
        },
    }


def capacity_table(cap: dict[str, Any]) -> str:
    places = sorted(cap["inputs"]["driver"])
    shape = cap["inputs"]["step_shape"]
    lines = [
        f"CAPACITY of one driver at >= {cap['busy']:.0%} engine busy (projection; method: {cap['method']})",
        f"step: {shape['prompt_tokens_uncached']:.0f} uncached prompt tokens, {shape['decoded_tokens']:.0f} "
        f"decoded, {shape['steps_per_unit']:.1f} steps per unit; prefill "
        f"{1e3 * cap['inputs']['prefill_s_per_step']:.1f} "
        f"ms a step, decode step {1e3 * cap['inputs']['decode_step_s_at_max_batch']:.2f} ms at the full batch",
    ]
    for p in places:
        d = cap["inputs"]["driver"][p]
        lines.append(
            f"driver, loops in the {p}: {1e3 * d['cpu_s_per_step']:.2f} ms CPU per step + "
            f"{1e3 * d['cpu_s_per_unit']:.2f} ms per unit, measured at {d['point']}"
        )
    lines.append(f"{'loops':>5} {'round s':>8} {'steps/s/host':>12} " + " ".join(f"{'hosts ' + p:>13}" for p in places))
    for r in cap["rows"]:
        lines.append(
            f"{r['loops']:>5} {r['round_s']:>8.2f} {r['host_steps_per_s']:>12.2f} "
            + " ".join(f"{r[f'hosts_{p}']:>13}" for p in places)
        )
    lines.append(
        "largest: "
        + "; ".join(f"{p}: {b['hosts']} hosts x {b['loops']} loops" for p, b in sorted(cap["largest"].items()))
    )
    return "\n".join(lines)
