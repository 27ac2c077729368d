"""The Ray driver of `memloop run`: composes the plan, the engine actors, the worker pool, the judge
fan-out and the run store.

1. `memloop.jobs.run.plan.make_plan` checks the config against the environment, derives the run id, builds
   the engine configs and the units (all before any work starts; the caller makes the plan once and hands it
   to `execute`); the store drops units already recorded as ok (resume).
2. `memloop.jobs.run.actors` starts the engine actors (one per accelerator host, or per CPU share).
3. `memloop.jobs.run.pool.WorkerPool` runs `max_in_flight` worker threads per actor over one shared queue;
   each runs a unit's method loop against its actor, whose engine batches the concurrent requests.
   A unit that raises is retried (`retries`); when its actor died the worker waits for Ray's
   restart first. A unit that exhausts its attempts is recorded as failed with its error.
4. A finished unit's rows (built by `memloop.jobs.store.tables`) are written as a shard by the process that
   ran its loop (`memloop.jobs.run.shards`): with `method_loops: engine` the method worker, whose commit
   record is all the driver receives; in the driver's threads, the driver. A unit with judges gets a
   shard of its own, whose judge tasks write their rows and whose commit task writes the samples
   file last (`memloop.jobs.run.judge_fanout`); units without judges whose loops ran in the driver are
   buffered and written in batches. Failed units' records are the driver's (it decides the retries).
5. The driver records each shard's units (its index, for resume); the manifest row closes the
   invocation, also when it is interrupted. When the storage fails (its calls are bounded, see
   `memloop.jobs.store.gcs.STORAGE_DEADLINE_S`) the run stops: the shards written are kept, the summary
   names the error and the units not saved, and a re-run resumes.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
import traceback
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from memloop.eval.judges.cost import cache_hit_rate
from memloop.eval.llm import Usage
from memloop.jobs.errors import INFRASTRUCTURE, METHOD, RunError, StorageError, error_text
from memloop.jobs.run import actors as engine_actors
from memloop.jobs.run.config import EngineSpec, RunConfig
from memloop.jobs.run.judge_fanout import Judging
from memloop.jobs.run.loops import run_loop, start_workers
from memloop.jobs.run.plan import RunPlan
from memloop.jobs.run.pool import Attempt, Outcome, WorkerPool
from memloop.jobs.run.progress import Progress
from memloop.jobs.run.shards import ShardWriter, judged, method_failure
from memloop.jobs.run.workload import Unit
from memloop.jobs.store.manifest import finished_manifest, invocation_id, manifest_base
from memloop.jobs.store.run_files import Committed
from memloop.jobs.store.run_store import RunStore
from memloop.jobs.store.tables import now, sample_row

if TYPE_CHECKING:
    from memloop.engine.engine_config import EngineConfig

Log = Callable[[str], None]
EXIT_STORAGE = 4  # the run stopped because its output could not be written


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class RunSummary:
    run_id: str
    output: str
    samples: int
    computed: int
    skipped: int
    failed: int
    stats: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # the first failed units' errors (root causes)
    # units computed whose method produced nothing at any step (samples.status "failed", the steps'
    # outcomes as the cause): a result of the method, scored as such, not a failure of the run
    method_failed: int = 0
    method_errors: list[str] = field(default_factory=list)
    incomplete: int = 0  # units failed for the infrastructure, or whose judge failed: their cells are unknown
    storage_error: str | None = None  # the storage failure that stopped the run, if one did
    unsaved: int = 0  # units finished but not written (the storage failed): a re-run computes them

    def first_errors(self, n: int = 3) -> list[str]:
        """The first `n` distinct root causes of failed units."""
        return list(dict.fromkeys(self.errors))[:n]

    def exit_code(self, max_failed_frac: float = 0.0, fail_on_method: bool = False) -> int:
        """4 when the storage failed; 0 when every unit computed (or at most `max_failed_frac` of this
        invocation's units failed for their method), else 3; always 3 when a unit is incomplete (the
        engine, an endpoint or a judge failed), since its tables' cells cannot be told (docs/judges.md,
        "Means and intervals"). A unit whose method produced nothing is a result (scored 0), not a
        failure of the run, unless `fail_on_method` (`--fail-on method`, for nightly jobs): then 3."""
        if self.storage_error:
            return EXIT_STORAGE
        attempted = self.computed + self.failed
        if fail_on_method and self.method_failed:
            return 3
        return 3 if self.incomplete or (self.failed and self.failed > max_failed_frac * attempted) else 0

    @property
    def method_failed_share(self) -> float:
        """The share of this invocation's units whose method produced nothing (0 when none ran)."""
        attempted = self.computed + self.failed
        return self.method_failed / attempted if attempted else 0.0

    def final_line(self) -> str:
        """One line a person reads last: what computed, what failed and why, what the means count as 0."""
        attempted = self.computed + self.failed
        parts = [
            f"run {self.run_id}: {self.computed} of {attempted} unit(s) computed"
            + (f", {self.skipped} already done" if self.skipped else "")
        ]
        if self.failed or self.incomplete:
            parts.append(f"failed: {self.failed}, incomplete: {self.incomplete} (the run's, not the method's)")
        if self.method_failed:
            parts.append(
                f"method failures: {self.method_failed} of {attempted} unit(s) "
                f"({self.method_failed_share:.0%}; the method produced nothing, counted 0 in the means; "
                "`--fail-on method` makes them fail the run)"
            )
        else:
            parts.append("method failures: 0")
        return "; ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        out = {
            "run_id": self.run_id,
            "output": self.output,
            "samples": self.samples,
            "computed": self.computed,
            "skipped": self.skipped,
            "failed": self.failed,
            "incomplete": self.incomplete,
            "errors": self.first_errors(5),
            "method_failed": self.method_failed,
            "method_failed_share": round(self.method_failed_share, 4),
            "method_errors": list(dict.fromkeys(self.method_errors))[:5],
        }
        if self.storage_error:
            out.update(storage_error=self.storage_error, unsaved=self.unsaved)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


class CpuSplit:
    """The driver's CPU while units run, by what it was spent on (each thread's own CPU time)."""

    PARTS = ("hand_out", "loops", "write")

    def __init__(self) -> None:
        self.s = dict.fromkeys(self.PARTS, 0.0)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def __call__(self, part: str):  # type: ignore[no-untyped-def]
        t = time.thread_time()
        try:
            yield
        finally:
            with self._lock:
                self.s[part] += time.thread_time() - t

    def summary(self, total_cpu_s: float) -> dict[str, float]:
        """Seconds per part; `receive` is the rest: results deserialised on Ray's threads, outcomes
        recorded, progress, and Ray's own threads in the driver."""
        return dict(self.s, receive=max(0.0, total_cpu_s - sum(self.s.values())))


class _UnitRunner:
    """The unit function of the pool: one method loop against one lane's LLM (an engine actor, or the
    endpoint), in this process or in the lane's method worker next to its engine, then its shard."""

    def __init__(
        self,
        cfg: RunConfig,
        llms: list[Any],
        actors: list[Any],
        writer: ShardWriter,
        log: Log,
        workers: list[Any] | None = None,
        cpu: CpuSplit | None = None,
    ) -> None:
        self.cfg, self.llms, self.actors, self.writer, self.log = cfg, llms, actors, writer, log
        self.workers = workers or []
        self.cpu = cpu or CpuSplit()
        self.usage = Usage()
        self.method_failed = 0  # units whose steps all produced nothing, and their first causes
        self.method_errors: list[str] = []
        self.stopping = False
        self.stop = threading.Event()  # the pool's: once set, a finished unit starts no Ray work
        self._lock = threading.Lock()

    def run(self, a: Attempt[Unit], lane: int) -> Outcome | Future:
        u = a.item
        if self.workers:  # the loop runs on the engine's host, which also writes the unit's shard
            with self.cpu("hand_out"):
                ref = self.workers[lane].run.remote(u, a.number)
            # Waiting on the ref's future, not in ray.get: a thread blocked in ray.get wakes every
            # second to check for signals, which with thousands of loop threads keeps the GIL busy.
            written, usage, method_error = ref.future().result()
        else:
            with self.cpu("loops"):
                rows, out = run_loop(u, a.number, self.llms[lane], self.writer.judging)
            usage, method_error = out.usage + out.retry_usage, method_failure(rows)
            if not judged(u, out, rows):
                written = None  # buffered by the pool and written in batches, by this process
            elif self.stop.is_set():  # stopping: no judge task starts (the unit stays unrecorded; a resume computes it)
                raise RunError(f"{u.key}: not judged, the run is stopping")
            else:
                with self.cpu("write"):
                    written = self.writer.write(u, rows, out, self.llms[lane])
        with self._lock:  # totals of finished units (the progress line's fallback, the run's stats)
            self.usage = self.usage + usage
            if method_error is not None:  # no step produced anything: recorded failed, no judge ran
                self.method_failed += 1
                if len(self.method_errors) < 20:
                    self.method_errors.append(method_error)
        if written is None:
            return Outcome(rows)
        if isinstance(written, Committed):  # its error is a judge's: the unit is ok, its judgment incomplete
            return Outcome({}, incomplete=written.error, written=written)
        return _outcome_of(written)

    def failed_rows(self, a: Attempt[Unit], error: str, infrastructure: bool) -> dict[str, list[dict[str, Any]]]:
        row = sample_row(a.item, "failed", error, a.number + 1, None, now(), "")
        return {"samples": [dict(row, failure=INFRASTRUCTURE if infrastructure else METHOD)]}

    def lane_lost(self, exc: BaseException, lane: int) -> bool:
        """True when the lane's actor is gone for good (an error of a live actor is the unit's)."""
        import ray

        if not self.actors or not isinstance(exc, ray.exceptions.RayActorError):
            return False
        self.log(f"engine-{lane} failed ({type(exc).__name__}); waiting for its restart")
        if engine_actors.wait_restarted(self.actors[lane], self.cfg.engine.start_timeout_s, lambda: self.stopping):
            return False
        self.log(f"engine-{lane} is gone (restarts exhausted); its units go to the other actors")
        return True


def _outcome_of(commit_ref: Any) -> "Future[Outcome]":
    """A future of the unit's outcome once its commit task wrote the shard (the pool takes the next
    unit meanwhile)."""
    done: "Future[Outcome]" = Future()

    def resolved(f: Future) -> None:
        try:
            c = f.result()
        except BaseException as exc:  # the commit failed for good: the pool records the unit failed
            done.set_exception(exc)
            return
        done.set_result(Outcome({}, incomplete=c.error, written=c))  # a judge's error leaves the unit ok

    commit_ref.future().add_done_callback(resolved)
    return done


def _show_progress(progress: Progress, pool: WorkerPool, runner: _UnitRunner) -> None:
    u, engines = engine_actors.live_state(runner.actors, runner.usage)  # live engine counters, also mid-unit
    progress.update(pool.finished, pool.failed, u.prompt_tokens, u.cached_tokens, u.decoded_tokens, engines)


def _cached(plan: RunPlan, llms: list[Any]) -> list[Any]:
    """The lanes' LLMs behind the run's response cache, when it has one (`response_cache`)."""
    cfg = plan.config
    if cfg.response_cache is None:
        return llms
    from memloop.eval.llm_cache import CachedLLM

    key = json.dumps(plan.identity["model"], sort_keys=True)
    return [CachedLLM(llm, cfg.response_cache, key) for llm in llms]


def _compute(
    plan: RunPlan,
    rs: RunStore,
    todo: list[Unit],
    llms: list[Any],
    actors: list[Any],
    log: Log,
    state: dict[str, Any],
    workers: list[Any] | None = None,
    judging: Judging | None = None,
) -> dict[str, Any]:
    cfg = plan.config
    per_lane = cfg.model.endpoint.max_concurrency if cfg.model.endpoint is not None else cfg.engine.max_in_flight
    llms = _cached(plan, llms)
    cpu = CpuSplit()
    judging = judging or Judging.of(cfg)
    runner = _UnitRunner(
        cfg, llms, actors, ShardWriter(rs.store.uri, plan.run_id, "driver", judging), log, workers, cpu
    )

    def flush(rows: dict[str, list[dict[str, Any]]]) -> None:
        with cpu("write"):
            rs.write_shard(rows)

    progress = Progress(len(todo), rs.uri, log, interactive=log is _stderr and sys.stderr.isatty())
    t0, cpu0 = time.monotonic(), time.process_time()
    pool: WorkerPool[Unit] = WorkerPool(
        todo,
        lanes=len(llms),
        per_lane=per_lane,
        retries=cfg.retries,
        run=runner.run,
        failed_rows=runner.failed_rows,
        flush=flush,
        record=rs.record,
        describe=lambda u: u.key,
        lane_lost=runner.lane_lost,
        flush_units=cfg.flush_units,
        flush_s=cfg.flush_s,
        progress=lambda p: _show_progress(progress, p, runner),
        log=log,
    )
    runner.stop = pool.stop
    state["pool"] = pool
    state["pool_started"] = t0
    timer = threading.Timer(state["stop_after_s"], pool.stop.set) if state.get("stop_after_s") else None
    if timer is not None:  # a simulation's cap on computing time
        timer.start()
    try:
        pool.run()
    finally:
        if timer is not None:
            timer.cancel()
        runner.stopping = True
    el, cpu_s = time.monotonic() - t0, time.process_time() - cpu0
    state["pool_ended"] = t0 + el
    _show_progress(progress, pool, runner)
    progress.close()
    u = runner.usage
    state["method_failed"] = (runner.method_failed, list(runner.method_errors))
    return {
        "wall_s": el,
        "method_failed": runner.method_failed,
        "prompt_tokens": u.prompt_tokens,
        "cached_tokens": u.cached_tokens,
        "decoded_tokens": u.decoded_tokens,
        "cache_hit": cache_hit_rate(u),
        "tokens_per_s": (u.prompt_tokens - u.cached_tokens + u.decoded_tokens) / el if el else 0.0,
        "method_loops": cfg.engine.method_loops if actors else "driver",
        "driver_cpu": cpu_s / el if el else 0.0,  # cores' worth of the driver process while units ran
        "driver_cpu_s": cpu.summary(cpu_s),  # the same in seconds, by what it was spent on
        "engine": engine_actors.engine_stats(actors),
        "response_cache": {
            "hits": sum(getattr(x, "hits", 0) for x in llms),
            "misses": sum(getattr(x, "misses", 0) for x in llms),
        },
    }


def _stop_pool(state: dict[str, Any]) -> None:
    pool = state.get("pool")
    if pool is not None:
        pool.stop.set()


def _start_and_compute(
    plan: RunPlan,
    rs: RunStore,
    todo: list[Unit],
    actor_cls: Any,
    sim: "Simulated | None",
    log: Log,
    state: dict[str, Any],
) -> dict[str, Any]:
    """Start the engine actors (or connect to the endpoint) and, with `method_loops: engine`, a method
    worker beside each; compute the units, and kill the actors whatever happens."""
    import ray
    from memloop.jobs.run.describe import describe_waiting, waiting_units
    from memloop.jobs.run.llm_adapters import ActorLLM

    engine_actors.ensure_ray(log)  # judges run as Ray tasks in either case
    cfg = plan.config
    judge_procs = _start_judge_engine(plan, actor_cls, log)
    judging = Judging.of(
        cfg,
        ActorLLM(judge_procs[0], name="judge-engine", timeout_s=cfg.engine.request_timeout_s) if judge_procs else None,
    )
    try:
        if judge_procs and waiting_units(todo):  # RepoQA needles with no cached description: the judge writes them
            todo = describe_waiting(
                cfg,
                todo,
                lambda model: ActorLLM(judge_procs[0], name=model, timeout_s=cfg.engine.request_timeout_s),
                log,
            )
        return _start_engines_and_compute(plan, rs, todo, actor_cls, sim, log, state, judging)
    finally:
        for a in judge_procs:
            ray.kill(a)


def _start_judge_engine(plan: RunPlan, actor_cls: Any, log: Log) -> list[Any]:
    """One engine actor on the judge's own weights (`judge_model.weights`), or none."""
    if plan.judge_engine_config is None:
        return []
    spec = plan.config.engine.model_copy(update={"actors": 1})
    log(f"judge engine: {plan.judge_engine_config.model}")
    return _start_run_actors(plan, spec, actor_cls, plan.judge_engine_config, log, "judge-")


def _start_run_actors(
    plan: RunPlan, spec: EngineSpec, actor_cls: Any, engine_config: "EngineConfig | None", log: Log, role: str = ""
) -> list[Any]:
    """Engine actors named after the run (`memloop:<run id>:<role>engine-<i>`): a name already taken means
    another driver computes this run on the cluster, which is a RunError."""
    try:
        return engine_actors.start_actors(
            spec,
            actor_cls or engine_actors.default_actor_class(),
            {"config": engine_config},
            log,
            name_prefix=f"memloop:{plan.run_id}:{role}",
        )
    except ValueError as exc:  # the name is taken
        raise RunError(
            f"run {plan.run_id} is already being computed on this Ray cluster ({exc}); wait for it or stop it"
        ) from None


def _start_engines_and_compute(
    plan: RunPlan,
    rs: RunStore,
    todo: list[Unit],
    actor_cls: Any,
    sim: "Simulated | None",
    log: Log,
    state: dict[str, Any],
    judging: Judging,
) -> dict[str, Any]:
    import ray
    from memloop.jobs.run.llm_adapters import ActorLLM, endpoint_llm

    cfg = plan.config
    if cfg.model.kind == "openai":
        return _compute(plan, rs, todo, [endpoint_llm(cfg.model.endpoint)], [], log, state, judging=judging)
    if sim is not None:
        actors, procs = sim.start(cfg.engine, log)
    else:
        actors = procs = _start_run_actors(plan, cfg.engine, actor_cls, plan.engine_config, log)
    timeout = cfg.engine.request_timeout_s
    llms = [ActorLLM(a, name=f"engine-{i}", timeout_s=timeout) for i, a in enumerate(actors)]
    workers: list[Any] = []
    worker_procs: list[Any] = []
    try:
        if cfg.engine.method_loops == "engine":
            workers, worker_procs = start_workers(
                actors,
                cfg.engine.max_in_flight,
                max_restarts=cfg.engine.max_restarts,
                timeout_s=timeout,
                cache_dir=cfg.response_cache,
                cache_key=json.dumps(plan.identity["model"], sort_keys=True),
                pack=sim.pack if sim is not None else 1,
                writer=(rs.store.uri, plan.run_id, judging),
            )
            log(f"method loops: {len(worker_procs)} worker process(es) beside the engine actors")
        return _compute(plan, rs, todo, llms, actors, log, state, workers, judging)
    finally:
        for a in worker_procs + procs:  # free the hosts (and, in a shared Ray, the CPUs and memory) at once
            ray.kill(a)


@dataclass
class Simulated:
    """How a simulation (`memloop bench scale`) replaces the engines: `start(engine_spec, log)` returns
    a handle per engine lane and the actor processes to kill; `pack` lanes share a method worker."""

    start: Callable[[Any, Log], tuple[list[Any], list[Any]]]
    pack: int = 1


def execute(
    plan: RunPlan,
    *,
    actor_cls: Any = None,
    sim: Simulated | None = None,
    units: Callable[[list[Unit]], list[Unit]] | None = None,
    stop_after_s: float | None = None,
    log: Log = _stderr,
    on_ready: Callable[[str, str], None] | None = None,
    state: dict[str, Any] | None = None,
) -> RunSummary:
    """Run (or resume) the plan's config; returns the counts printed as the CLI's last line. The caller makes
    the plan (`memloop.jobs.run.plan.make_plan`, which loads every dataset and digests every file) once.

    For simulations (`memloop bench scale`): `sim` replaces the engine actors, `units` maps the plan's
    units to the ones computed, `stop_after_s` stops the run like a signal would after that many
    seconds of computing, and `state` receives the pool and its timings."""
    cfg = plan.config
    all_units = units(plan.units) if units is not None else plan.units
    rs = RunStore.open(cfg.output, plan.run_id)
    from memloop.jobs.run.preflight import check_endpoints, run_endpoints

    if sim is None and run_endpoints(cfg):  # an endpoint that refuses or lacks the model stops the run here, in
        pending = rs.done_units()  # one line, before the run has an id on stdout or a folder (a finished run
        if any(u.key not in pending for u in all_units):  # calls no endpoint, so it is not checked)
            check_endpoints(cfg, log)
    rs.check_writable()
    if on_ready:
        on_ready(plan.run_id, rs.uri)
    t_resume = time.monotonic()
    done = rs.done_units()
    resume_s = time.monotonic() - t_resume
    todo = [u for u in all_units if u.key not in done]
    skipped = len(all_units) - len(todo)
    if rs.incomplete:  # a file of a finished shard is gone: its units are computed again, not trusted
        files = sorted(f for fs in rs.incomplete.values() for f in fs)
        log(
            f"{len(rs.incomplete)} finished shard(s) miss a file "
            f"({', '.join(files[:3])}{' ...' if len(files) > 3 else ''}): "
            "their units are computed again"
        )
    log(
        f"run {plan.run_id}: {len(all_units)} units, {skipped} already done, {len(todo)} to compute; "
        f"results -> {rs.uri}"
    )
    invocation = invocation_id()
    base = manifest_base(plan, invocation, rs.uri)
    started, t0 = now(), time.monotonic()
    stats: dict[str, Any] = {"resume_s": resume_s}
    state = state if state is not None else {}
    state["stop_after_s"] = stop_after_s
    from memloop.jobs.store.run_lock import run_lock

    # A second driver of the same run into the same output is refused here, before it writes anything. A rerun
    # with nothing to compute still takes it to merge the small shards an earlier compaction left (a full disk).
    compact_only = not todo and rs.compactable(cfg.shard_rows)
    held = (
        run_lock(rs, f"{invocation} ({plan.run_id})", log, on_lost=lambda: _stop_pool(state))
        if todo or compact_only
        else contextlib.nullcontext({"lost": None})
    )
    with held as lock:
        try:
            if todo or compact_only:
                orphans = rs.remove_orphans()  # the lock is ours: no writer of this run is between parts and commit
                if orphans:
                    stats["orphans_removed"] = len(orphans)
                    log(
                        f"removed {len(orphans)} file(s) of shards an earlier invocation never committed "
                        f"({', '.join(orphans[:2])}{' ...' if len(orphans) > 2 else ''})"
                    )
            if todo:
                stats.update(_start_and_compute(plan, rs, todo, actor_cls, sim, log, state))
            if todo or compact_only:
                t = time.monotonic()
                if state.get("pool") is None or state["pool"].storage_error is None:
                    try:
                        stats["shards"] = rs.compact(cfg.shard_rows)  # small shards merged for analysis
                    except StorageError as exc:  # safe to stop mid-way: readers resolve duplicate shards
                        if state.get("pool") is not None:
                            state["pool"].storage_error = error_text(exc)
                        else:
                            state["storage_error"] = error_text(exc)
                        log(f"compaction stopped: {error_text(exc)[:300]}")
                stats["compact_s"] = time.monotonic() - t
        except BaseException as exc:
            stats["interrupted"] = error_text(exc)
            if not isinstance(exc, (KeyboardInterrupt, RunError)):
                stats["traceback"] = traceback.format_exc()[-4000:]
            raise
        finally:
            pool = state.get("pool")
            unsaved = pool.unsaved if pool is not None else 0
            computed, failed = (pool.finished - pool.failed, pool.failed) if pool is not None else (0, 0)
            if unsaved:  # finished but not written: not done, so counted neither way (a re-run computes them)
                unsaved_failed = pool.unsaved_failed
                computed, failed = computed - (unsaved - unsaved_failed), failed - unsaved_failed
            state["counts"] = (
                computed,
                failed,
                list(pool.errors) if pool is not None else [],
                pool.infrastructure if pool is not None else 0,
            )
            state["storage_error"] = pool.storage_error if pool is not None else state.get("storage_error")
            state["unsaved"] = unsaved
            if state["counts"][2]:  # the causes, so a run with no row written still names them (RunStore.at)
                stats["first_errors"] = [e[:500] for e in list(dict.fromkeys(state["counts"][2]))[:3]]
            try:
                rs.write_index(invocation)  # before the manifest: what the next resume reads
                rs.write_manifest(
                    finished_manifest(
                        base,
                        started=started,
                        t0=t0,
                        samples=len(plan.units),
                        computed=computed,
                        skipped=skipped,
                        failed=failed,
                        stats=stats,
                    )
                )
            except StorageError as exc:  # the shards already written are what counts; a resume lists them
                log(f"the invocation's index and manifest were not written ({error_text(exc)[:300]})")
                state["storage_error"] = state["storage_error"] or error_text(exc)
    if lock["lost"]:
        raise RunError(lock["lost"])
    state["storage_error"] = state["storage_error"] or lock.get("storage_error")
    computed, failed, errors, incomplete = state["counts"]
    method_failed, method_errors = state.get("method_failed", (0, []))
    return RunSummary(
        plan.run_id,
        rs.uri,
        len(all_units),
        computed,
        skipped,
        failed,
        stats,
        errors,
        method_failed,
        method_errors,
        incomplete,
        storage_error=state["storage_error"],
        unsaved=state["unsaved"],
    )
