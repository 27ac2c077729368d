"""`memloop bench scale`: a SIMULATION of a run over N hosts with M method loops each.

What is real: the driver (`memloop.jobs.run.driver.execute`: the plan, the worker pool, the method loops, the
run store, compaction, the manifest and the unit index), Ray (a local cluster), the engine actors as
Ray actors, the methods (rendering, parsing, revisions, token counting with the model's tokenizer),
the Parquet files and the resume read. What is simulated: the engines. Each simulated host is a
`memloop.jobs.sim.replay.ReplayEngine` actor that answers with the outputs a real finished run recorded for the
same prompts, after the time the real engine's measured step times say a continuous-batching
engine would take (`memloop.bench.engine_latency`). Judges are left out (they are Ray tasks of their own,
not driver work, and the recording holds only the methods' steps).

Units are the recording's own units, replicated under new sample ids (the prompts stay those the
real run rendered, so every request finds its recorded answer), enough to keep every loop busy for
the point's capped duration; the run is then stopped the way a signal stops it.

Per point: units per second; the driver's CPU (cores' worth) and GIL wait (how late a 5 ms sleeper
thread in the driver wakes: the GIL plus, on a shared host, the OS scheduler); the simulated
engines' busy fraction (the batch slots in use over the min(loops, max_batch) slots the host's
loops could fill: 1.0 when every loop is waiting on its engine, less when loops wait on the
driver), the share of time a step was running, and the dilation (how much longer the simulated
steps took than modelled: above 1 this machine's cores, not the design, limit the point); the driver's RSS
and the simulated hosts' and workers' RSS; shards and bytes written (after compaction); and the time
a resume takes to learn which units are done, against reading every shard as before.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import RunConfig, parse_config
from memloop.jobs.run.driver import Simulated
from memloop.jobs.run.handles import packed_handles, rss_mb
from memloop.jobs.run.workload import Unit
from memloop.jobs.sim.capacity import CapacityError, capacity, step_shape
from memloop.jobs.sim.replay import LatencyModel, ReplayEngine, recording_from_steps, tokenizer_json, unit_time_estimate
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.units import unit_key

Log = Callable[[str], None]
LABEL = "SIMULATION: engines replay a recorded run with a latency model; nothing here ran on N real hosts"


def parse_points(text: str) -> list[tuple[int, int]]:
    """'1x8,4x16' -> [(1, 8), (4, 16)]."""
    out = []
    for part in text.split(","):
        try:
            n, m = (int(x) for x in part.strip().lower().split("x"))
        except ValueError:
            raise ConfigError(f"--points: {part!r} is not HOSTSxLOOPS (e.g. 4x16)") from None
        if n < 1 or m < 1:
            raise ConfigError(f"--points: {part!r} needs at least one host and one loop")
        out.append((n, m))
    return out


@dataclasses.dataclass
class Recording:
    uri: str
    config: RunConfig
    answers: dict[str, Any]
    steps: int
    units: int


def load_recording(uri: str) -> Recording:
    """A finished run: its config (from the manifest) and its steps table as {prompt: answer}."""
    rs = RunStore.at(uri)
    runs = rs.table("runs").to_pandas()
    steps = rs.table("steps").to_pandas()
    if runs.empty or steps.empty:
        raise ConfigError(
            f"{uri} has no manifest or no steps; record a finished run first "
            "(`memloop run jobs/configs/demo.yaml --output DIR`)"
        )
    cfg = parse_config(json.loads(runs.sort_values("started_at").iloc[-1]["config_json"]), f"{uri} (manifest)")
    return Recording(uri, cfg, recording_from_steps(steps), len(steps), int(steps["unit"].nunique()))


def latency_model(rec: Recording, path: str | None, log: Log) -> LatencyModel:
    """The fitted model from `path` if it exists, else measured now on the real engine (and saved)."""
    if path and Path(path).is_file():
        return LatencyModel.from_dict({k: v for k, v in json.loads(Path(path).read_text()).items() if k != "points"})
    from memloop.bench.engine_latency import measure

    log("latency: measuring the real engine's step times (once; --latency FILE keeps them)")
    fit = measure(sorted(rec.answers, key=len), model=rec.config.model.weights, log=log)
    fit["source"] = f"measured on {os.cpu_count()} CPU cores, engine in process, prompts of {rec.uri}"
    if path:
        Path(path).write_text(json.dumps(fit, indent=1))
    return LatencyModel.from_dict({k: v for k, v in fit.items() if k != "points"})


@dataclasses.dataclass(frozen=True)
class HostChoice:
    """What a simulated host stands for: a named accelerator host serving a model size, its step
    times derived from datasheet figures (`memloop.bench.accelerators.host_latency`); or, with host "cpu",
    the real engine measured on this machine's CPU (`latency_model`), `speedup` times faster."""

    host: str = "tpu-v5e-4"
    model_size: str = "8b"
    mfu: float = 0.4
    hbm_fraction: float = 1.0
    speedup: float = 1.0
    latency_path: str | None = None  # host "cpu": the measured fit's file


def context_tokens(rec: Recording) -> float:
    """The mean keys a recorded request's decode steps read: its prompt and half its output."""
    answers = list(rec.answers.values())
    return sum(a.prompt_tokens + a.decoded_tokens / 2 for a in answers) / max(1, len(answers))


def host_model(rec: Recording, choice: HostChoice, log: Log) -> LatencyModel:
    """The latency model the simulated hosts run (see `HostChoice`), `choice.speedup` times faster."""
    if choice.host == "cpu":
        return latency_model(rec, choice.latency_path, log).faster(choice.speedup)
    if choice.latency_path:
        raise ConfigError(
            f"--latency is the CPU fit's file; with --host {choice.host} the model is derived "
            "from the host's datasheet figures: leave out --latency or use --host cpu"
        )
    from memloop.bench.accelerators import HostModelError, host_latency

    try:
        fields = host_latency(
            choice.host,
            choice.model_size,
            context_tokens=context_tokens(rec),
            mfu=choice.mfu,
            hbm_fraction=choice.hbm_fraction,
        )
    except HostModelError as exc:
        raise ConfigError(f"--host/--model-size: {exc}") from None
    return LatencyModel.from_dict(fields).faster(choice.speedup)


def simulated_hosts(recording: Any, latency: LatencyModel, tokenizer: Any, per_process: int = 1) -> Simulated:
    """`engine.actors` simulated hosts, `per_process` to a `ReplayEngine` actor process (and, with
    `method_loops: engine`, to a method worker): 64 processes of ~170 MB each do not fit beside the
    other work of a 24 GB machine. `recording` and `tokenizer` are object refs (put once)."""

    def start(spec: Any, log: Log) -> tuple[list[Any], list[Any]]:
        import ray

        cls = ray.remote(ReplayEngine)
        n = spec.actors
        procs = [
            cls.options(
                num_cpus=spec.cpus_per_actor, max_restarts=0, max_concurrency=2 * per_process * spec.max_in_flight + 64
            ).remote(recording, latency.to_dict(), tokenizer, hosts=min(per_process, n - j))
            for j in range(0, n, per_process)
        ]
        ray.get([p.health.remote() for p in procs])
        log(f"simulated: {n} engine host(s) in {len(procs)} process(es)")
        return packed_handles(procs, per_process, n), procs

    return Simulated(start, pack=per_process)


def replicate(units: list[Unit], copies: int) -> list[Unit]:
    """`copies` of every unit under new sample ids, the copies interleaved so each mixes methods."""
    out = []
    for k in range(copies):
        for u in units:
            s = dataclasses.replace(u.sample, id=f"{u.sample.id}~{k}")
            out.append(dataclasses.replace(u, key=unit_key(u.dataset.key, s.id, u.method.key, u.repeat), sample=s))
    return out


class _Probe:
    """A thread in the driver that sleeps 5 ms at a time and records how late it wakes, and the
    driver's RSS."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, float]] = []  # (time, lateness s, rss MB)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="gil-probe")

    def _run(self) -> None:
        n = 0
        rss = rss_mb()
        while not self.stop.is_set():
            t = time.perf_counter()
            time.sleep(0.005)
            late = time.perf_counter() - t - 0.005
            n += 1
            if n % 50 == 0:
                rss = rss_mb()
            self.samples.append((time.monotonic(), late, rss))

    def window(self, t0: float, t1: float) -> tuple[float, float]:
        """Mean lateness (ms) and peak RSS (MB) within [t0, t1]."""
        w = [(late, rss) for t, late, rss in self.samples if t0 <= t <= t1]
        if not w:
            return math.nan, rss_mb()
        return 1000 * sum(x for x, _ in w) / len(w), max(r for _, r in w)


def _files(root: Path) -> tuple[int, int]:
    shards = len(list((root / "samples").glob("*.parquet")))
    size = sum(p.stat().st_size for p in root.rglob("*.parquet"))
    return shards, size


def _point_config(base: RunConfig, out: str, hosts: int, loops: int, placement: str) -> RunConfig:
    data = base.model_dump()
    data.update(output=out, judges=[], response_cache=None)
    data["engine"].update(
        actors=hosts,
        max_in_flight=loops,
        cpus_per_actor=0.001,
        method_loops=placement,
        start_timeout_s=900.0,
        max_restarts=0,
    )
    return parse_config(data, "bench scale")


def run_point(
    rec: Recording,
    model: LatencyModel,
    tok_ref: Any,
    rec_ref: Any,
    hosts: int,
    loops: int,
    placement: str,
    duration_s: float,
    workdir: str,
    log: Log,
    processes: int = 8,
) -> dict[str, Any]:
    from memloop.jobs.run.driver import execute
    from memloop.jobs.run.plan import make_plan

    out = tempfile.mkdtemp(prefix=f"scale-{hosts}x{loops}-{placement}-", dir=workdir)
    cfg = _point_config(rec.config, out, hosts, loops, placement)
    state: dict[str, Any] = {}
    per_step = unit_time_estimate(model, list(rec.answers.values()), min(loops, model.max_batch))
    est_unit_s = max(1e-3, per_step * rec.steps / rec.units)
    wanted = int(hosts * loops * (2 + duration_s / est_unit_s))

    def units(plan_units: list[Unit]) -> list[Unit]:
        return replicate(plan_units, max(1, math.ceil(min(wanted, 200_000) / len(plan_units))))

    probe = _Probe()
    probe.thread.start()
    try:
        per_process = math.ceil(hosts / min(hosts, processes))
        summary = execute(
            make_plan(cfg),
            sim=simulated_hosts(rec_ref, model, tok_ref, per_process),
            units=units,
            stop_after_s=duration_s,
            log=log,
            state=state,
        )
    finally:
        probe.stop.set()
    stats = summary.stats
    engines = [e for e in stats.get("engine", []) if "busy_s" in e]
    gil_ms, rss = probe.window(state.get("pool_started", 0.0), state.get("pool_ended", math.inf))
    misses = sum(e.get("misses", 0) for e in engines)
    run_root = Path(summary.output)
    shards, size = _files(run_root)
    rs = RunStore.open(out, summary.run_id)
    t = time.monotonic()
    done = rs.done_units()
    resume_s = time.monotonic() - t
    t = time.monotonic()
    full = rs.samples()  # the former resume: every samples shard read whole
    resume_full_s = time.monotonic() - t
    wall = stats.get("wall_s", 0.0) or 1e-9
    steps = sum(e.get("requests", 0) for e in engines)
    split = stats.get("driver_cpu_s", {})
    row = {
        "hosts": hosts,
        "loops": loops,
        "placement": stats.get("method_loops", placement),
        "asked": placement,
        "processes": math.ceil(hosts / per_process),
        "units": summary.computed,
        "failed": summary.failed,
        "replay_misses": misses,
        "wall_s": round(wall, 2),
        "units_per_s": summary.computed / wall,
        "steps_per_s": sum(e.get("requests", 0) for e in engines) / wall,
        "driver_cpu": stats.get("driver_cpu", math.nan),
        "gil_wait_ms": gil_ms,
        # the driver's CPU per engine step, by what it was spent on (memloop.jobs.run.driver.CpuSplit)
        "driver_ms_per_step": {k: 1e3 * v / steps for k, v in split.items()} if steps else {},
        # batch slots in use over the slots the host's loops could fill: < 1 when loops wait on the driver
        "engine_busy_fraction": (
            sum(e["mean_slots"] / min(loops, e["max_batch"]) for e in engines) / len(engines) if engines else math.nan
        ),
        "engine_step_fraction": sum(e["busy_fraction"] for e in engines) / len(engines) if engines else math.nan,
        # > 1: the machine ran the simulated steps slower than modelled (its cores were the bottleneck)
        "engine_dilation": sum(e.get("dilation", 1.0) for e in engines) / len(engines) if engines else math.nan,
        "engine_held_per_loop": (sum(e["mean_held"] for e in engines) / len(engines) / loops) if engines else math.nan,
        "rss_mb": rss,
        "hosts_rss_mb": sum(e.get("rss_mb", 0.0) for e in engines),
        "shards": shards,
        "shards_before_compaction": stats.get("shards", {}).get("before", shards),
        "bytes": size,
        "resume_s": resume_s,
        "resume_full_read_s": resume_full_s,
        "resume_agrees": done
        == {u for u, s in zip(full.column("unit").to_pylist(), full.column("status").to_pylist()) if s == "ok"},
        "errors": summary.first_errors(2),
    }
    log(
        f"point {hosts}x{loops} ({placement}): {row['units_per_s']:.2f} units/s, driver {row['driver_cpu']:.2f} "
        f"cores, engines busy {row['engine_busy_fraction']:.0%}"
    )
    return row


def sweep(
    recording: str,
    points: list[tuple[int, int]],
    placements: list[str],
    duration_s: float,
    choice: HostChoice,
    log: Log,
    workdir: str | None = None,
    processes: int = 8,
) -> dict[str, Any]:
    import ray
    from memloop.jobs.run import actors as engine_actors

    for p in placements:
        if p not in ("driver", "engine", "auto"):
            raise ConfigError(f"--placements: {p!r} is not `driver`, `engine` or `auto`")
    rec = load_recording(recording)
    model = host_model(rec, choice, log)
    if not ray.is_initialized() and not os.environ.get("RAY_ADDRESS"):
        # a Ray of its own: never joined to another local cluster that happens to be running on the machine
        from memloop.jobs.run.actors import quiet_private_auth

        quiet_private_auth()
        ray.init(address="local", include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    engine_actors.ensure_ray(log)
    tok_ref = ray.put(tokenizer_json(rec.config.model.weights))
    rec_ref = ray.put(rec.answers)
    rows = []
    with tempfile.TemporaryDirectory(prefix="memloop-scale-", dir=workdir) as tmp:
        for hosts, loops in points:
            for placement in placements:
                try:
                    rows.append(
                        run_point(
                            rec, model, tok_ref, rec_ref, hosts, loops, placement, duration_s, tmp, log, processes
                        )
                    )
                except Exception as exc:  # e.g. Ray's memory monitor: the point is reported as not shown
                    from memloop.jobs.errors import error_text

                    log(f"point {hosts}x{loops} ({placement}) could not be measured: {error_text(exc)[:300]}")
                    rows.append(
                        {
                            "hosts": hosts,
                            "loops": loops,
                            "placement": placement,
                            "errors": [error_text(exc)[:500]],
                            "failed": None,
                            "replay_misses": None,
                        }
                    )
    res = {
        "simulation": True,
        "label": LABEL,
        "recording": recording,
        "recorded_steps": rec.steps,
        "latency_model": model.to_dict(),
        "simulated_host": dataclasses.asdict(choice),
        "duration_cap_s": duration_s,
        "max_processes": processes,
        "host": {
            "cpus": os.cpu_count(),
            "ray_nodes": len(ray.nodes()),
            "load_avg": os.getloadavg(),
            "note": "one machine; every simulated host, worker and the driver share its cores",
        },
        "rows": rows,
        "step_shape": step_shape(list(rec.answers.values()), rec.steps, rec.units),
    }
    res["projection"] = projection(res)
    try:  # what one driver sustains, from the measured inputs (jobs/sim/capacity.py)
        res["capacity"] = capacity(res)
    except CapacityError as exc:
        res["capacity"] = {"error": str(exc)}
    return res


COLUMNS = [
    ("hosts", "{:>5}"),
    ("loops", "{:>5}"),
    ("placement", "{:>9}"),
    ("units", "{:>6}"),
    ("units_per_s", "{:>8.2f}"),
    ("driver_cpu", "{:>6.2f}"),
    ("split", "{}"),
    ("gil_wait_ms", "{:>7.2f}"),
    ("engine_busy_fraction", "{:>6.0%}"),
    ("engine_step_fraction", "{:>6.0%}"),
    ("engine_dilation", "{:>6.2f}"),
    ("rss_mb", "{:>7.0f}"),
    ("hosts_rss_mb", "{:>8.0f}"),
    ("shards", "{:>6}"),
    ("bytes", "{:>10}"),
    ("resume_s", "{:>8.3f}"),
    ("resume_full_read_s", "{:>8.3f}"),
]
HEADERS = [
    "hosts",
    "loops",
    "placement",
    "units",
    "units/s",
    "drvCPU",
    "ms/step hand+loop+recv+write",
    "GIL ms",
    "busy",
    "stepping",
    "dilate",
    "drv MB",
    "hosts MB",
    "shards",
    "bytes",
    "resume s",
    "full s",
]


def table(result: dict[str, Any]) -> str:
    m = result["latency_model"]
    lines = [
        result["label"],
        f"simulated host: {m['source'] or 'given'}; speedup {m['speedup']:g}",
        f"latency model: prefill "
        f"{1e3 * m['prefill_s_per_token'] / m['speedup']:.3f} ms/token, decode step "
        f"{1e3 * m['decode_s_base'] / m['speedup']:.2f} ms + {1e3 * m['decode_s_per_seq'] / m['speedup']:.2f} "
        f"ms per sequence, max batch {m['max_batch']}",
        "  ".join(f"{h:>{max(5, len(h))}}" for h in HEADERS),
    ]
    for r in result["rows"]:
        if "units_per_s" not in r:
            lines.append(f"{r['hosts']:>5}  {r['loops']:>5}  {r['placement']:>9}  NOT MEASURED: {r['errors'][0][:160]}")
            continue
        cells = []
        for (key, fmt), h in zip(COLUMNS, HEADERS):
            v = r.get(key)
            if key == "split":
                d = r.get("driver_ms_per_step") or {}
                v = "+".join(f"{d.get(k, math.nan):.2f}" for k in ("hand_out", "loops", "receive", "write"))
            number = isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))
            cells.append(f"{fmt.format(v) if number else str(v):>{max(5, len(h))}}")
        lines.append("  ".join(cells))
        if r["errors"] or r["replay_misses"]:
            lines.append(
                f"      ! {r['failed']} failed, {r['replay_misses']} replay misses: "
                + "; ".join(e.splitlines()[0][:200] for e in r["errors"])
            )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Paper-scale projection: the seed papers' full experiments at the measured rates.


@dataclasses.dataclass(frozen=True)
class Workload:
    """One paper experiment in steps: units x steps per unit, and a step's tokens (estimates from
    the paper's dataset sizes, stated in `basis`)."""

    name: str
    units: int
    steps_per_unit: float
    prompt_tokens: int  # per step, uncached (the memory and instructions of a step repeat; see cached)
    cached_fraction: float  # of the prompt served from the prefix cache
    decoded_tokens: int
    basis: str


WORKLOADS = (
    Workload(
        "seed 000 SUMIE, 8 methods", 200 * 8, 7, 900, 0.3, 250, "200 entities x 7 paragraphs; GO/GU/GM/CoK x JSON/text"
    ),
    Workload(
        "seed 000 books, 8 methods",
        100 * 8,
        60,
        3500,
        0.3,
        500,
        "100 books of ~120k tokens in 2K chunks; GO/GU/GM/CoK x JSON/text",
    ),
    Workload(
        "seed 002 PRISM books, 4 chunk sizes x 2 memories",
        100 * 4 * 2,
        110,
        2500,
        0.5,
        300,
        "100 books; chunks 512-4096 (234+117+59+29 chunks, mean 110); in-place and amendments",
    ),
    Workload(
        "seed 003 BooookScore, 2 methods",
        100 * 2,
        90,
        2500,
        0.3,
        300,
        "100 books in 2K chunks; incremental updating (60 steps) and hierarchical merging (~120)",
    ),
    Workload(
        "seed 001 KG, BookSum chapters",
        1155,
        6,
        2500,
        0.2,
        400,
        "1,155 validation chapters of ~3 chunks; extraction and summary per chunk",
    ),
)


def projection(result: dict[str, Any], hosts: int = 64, workloads: tuple[Workload, ...] = WORKLOADS) -> dict[str, Any]:
    """Host-hours of each workload at the simulated host's rate (a full batch), hours on `hosts`
    hosts, and the driver's measured CPU per step against what `hosts` hosts would ask of it."""
    m = LatencyModel.from_dict(result["latency_model"])
    b = m.max_batch
    per_seq_decode = m.decode_step_s(b) / b  # host-seconds per decoded token at a full batch
    drv = {}
    for r in result["rows"]:
        if "units_per_s" not in r or r["engine_dilation"] > 1.25:  # points this machine's cores limited
            continue
        steps = r["steps_per_s"] * r["wall_s"]
        if steps and not math.isnan(r["driver_cpu"]):
            drv.setdefault(r["placement"], []).append(r["driver_cpu"] * r["wall_s"] / steps)
    cpu_per_step = {p: max(v) for p, v in drv.items()}  # the worst trustworthy point, per placement
    rows = []
    for w in workloads:
        steps = w.units * w.steps_per_unit
        host_s = m.prefill_s(int(w.prompt_tokens * (1 - w.cached_fraction))) + w.decoded_tokens * per_seq_decode
        host_rate = 1.0 / host_s  # steps per second per host, full batch
        need = hosts * host_rate  # steps per second the driver must sustain
        rows.append(
            {
                "experiment": w.name,
                "basis": w.basis,
                "steps": int(steps),
                "host_hours": steps * host_s / 3600,
                f"hours_on_{hosts}_hosts": steps * host_s / 3600 / hosts,
                "driver_steps_per_s_needed": need,
                **{f"driver_cores_needed_{p}": need * c for p, c in cpu_per_step.items()},
            }
        )
    return {"hosts": hosts, "speedup": m.speedup, "driver_cpu_s_per_step": cpu_per_step, "rows": rows}


def projection_table(p: dict[str, Any]) -> str:
    h = p["hosts"]
    places = sorted(p["driver_cpu_s_per_step"])
    lines = [
        f"PROJECTION at the simulated host's rate (speedup {p['speedup']:g}); driver CPU per step measured: "
        + ", ".join(f"{k} {1e3 * v:.2f} ms" for k, v in p["driver_cpu_s_per_step"].items()),
        f"{'experiment':50} {'steps':>9} {'host-h':>9} {f'h on {h}':>8} {'drv steps/s':>11} "
        + " ".join(f"{'cores ' + x:>12}" for x in places),
    ]
    for r in p["rows"]:
        lines.append(
            f"{r['experiment']:50} {r['steps']:>9} {r['host_hours']:>9.1f} {r[f'hours_on_{h}_hosts']:>8.2f} "
            f"{r['driver_steps_per_s_needed']:>11.1f} "
            + " ".join(f"{r[f'driver_cores_needed_{x}']:>12.2f}" for x in places)
        )
    return "\n".join(lines)
