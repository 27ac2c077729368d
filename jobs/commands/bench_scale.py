"""`memloop bench scale`: N simulated hosts x M method loops (jobs/sim/scale_sim.py), labelled a simulation."""

from __future__ import annotations

import json
import sys

import typer


def bench_scale(
    recording: str = typer.Option(
        ...,
        "--recording",
        help="URI of a finished run (OUTPUT/RUN_ID) whose steps "
        "the simulated engines replay, e.g. from `memloop run jobs/configs/demo.yaml`.",
    ),
    points: str = typer.Option("1x8,4x16,16x32,64x64", "--points", help="HOSTSxLOOPS, comma-separated."),
    placements: str = typer.Option(
        "driver,engine",
        "--placements",
        help="Where method loops run: driver, engine, auto (what `engine.method_loops: auto` picks for the point).",
    ),
    duration: float = typer.Option(30.0, "--duration", min=1.0, help="Seconds of computing per point (a cap)."),
    host: str = typer.Option(
        "tpu-v5e-4",
        "--host",
        help="What a simulated host stands for: an accelerator host "
        "of bench/accelerators.py's HOSTS (tpu-v5e-4, tpu-v5e-8, tpu-v6e-4, tpu-v5p-4, h100-8, "
        "h100-1, a100-8, l4-1), its step times derived from datasheet figures; or `cpu`: the "
        "real engine measured on this machine (see --latency, --speedup).",
    ),
    model_size: str = typer.Option(
        "8b", "--model-size", help="The model the accelerator host serves: 1b, 3b, 8b, 70b (Llama 3 shapes, bf16)."
    ),
    mfu: float = typer.Option(0.4, "--mfu", min=0.01, max=1.0, help="Prefill's share of the host's peak bf16 FLOP/s."),
    hbm_fraction: float = typer.Option(
        1.0,
        "--hbm-fraction",
        min=0.01,
        max=1.0,
        help="Decode's share of the host's HBM bandwidth (1.0: the bandwidth bound, the fastest engine).",
    ),
    speedup: float = typer.Option(
        1.0, "--speedup", min=1e-3, help="Simulated hosts this many times faster than the latency model."
    ),
    latency: str = typer.Option(
        None,
        "--latency",
        help="With --host cpu: JSON of the fitted latency model, "
        "read if it exists, else measured on the real engine and written there.",
    ),
    processes: int = typer.Option(
        8,
        "--processes",
        min=1,
        help="At most this many simulated-host processes "
        "(and method-worker processes); hosts are packed into them to fit in memory.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="End stdout with the result as one JSON line (the table goes to stderr)."
    ),
) -> None:
    """A SIMULATION of a run over many hosts: units/s, driver CPU and GIL wait, engine busy share,
    memory, shards and bytes, resume time per (hosts, loops, placement)."""
    from memloop.jobs.run.signals import graceful_interrupts
    from memloop.jobs.sim.capacity import capacity_table
    from memloop.jobs.sim.scale_sim import HostChoice, parse_points, projection_table, sweep, table

    log = lambda m: print(m, file=sys.stderr, flush=True)
    with graceful_interrupts():  # Ctrl-C / SIGTERM stop the point in progress cleanly (its Ray actors killed)
        res = sweep(
            recording,
            parse_points(points),
            [p.strip() for p in placements.split(",") if p.strip()],
            duration,
            HostChoice(host, model_size, mfu, hbm_fraction, speedup, latency),
            log,
            processes=processes,
        )
    out = sys.stderr if as_json else sys.stdout
    print(table(res), file=out, flush=True)
    print(projection_table(res["projection"]), file=out, flush=True)
    cap = res["capacity"]
    print(f"CAPACITY: not projected: {cap['error']}" if "error" in cap else capacity_table(cap), file=out, flush=True)
    if as_json:
        print(json.dumps(res, default=str), flush=True)  # before Ray's exit can cut a buffered stdout


def register(app: typer.Typer, bench_app: typer.Typer) -> None:
    bench_app.command("scale")(bench_scale)
