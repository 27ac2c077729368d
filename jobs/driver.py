"""The Ray driver of `memloop run`.

1. Validate the config against the environment, derive the run id, probe the output (all before
   any work starts), build the units and drop those already recorded as ok (resume).
2. Start the engine actors: one per accelerator host (`TPU` chips or `num_gpus`), or on CPU one
   per configured share, with `max_restarts` so Ray restarts a dead one.
3. Per actor, `max_in_flight` worker threads pull units from one shared queue (so a slow actor
   takes fewer) and run the method loop against that actor; the engine batches their concurrent
   requests. When a unit's output is ready its judges start at once as separate Ray tasks.
4. A unit that raises is retried (`retries`); when its actor died, the worker waits for Ray to
   restart it first. A unit that exhausts its attempts is recorded as failed with the error.
5. Finished units are written in shards (atomic, see storage.py); the manifest row closes the
   invocation, also when it is interrupted.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

from eval.llm import Usage
from jobs.config import EngineSpec, RunConfig, check_config, run_id, weights_path
from jobs.errors import ConfigError, RunError
from jobs.manifest import manifest_base
from jobs.storage import RunStore, now
from jobs.workload import Unit, build_units

Log = Callable[[str], None]


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

    def to_json(self) -> str:
        return json.dumps({"run_id": self.run_id, "output": self.output, "samples": self.samples,
                           "computed": self.computed, "skipped": self.skipped, "failed": self.failed})


# ---------------------------------------------------------------------------------------------
# engine actors


def actor_options(engine: EngineSpec) -> dict[str, Any]:
    """Ray options of one engine actor: a whole TPU host, a GPU share, or a CPU share."""
    opts: dict[str, Any] = {"max_restarts": engine.max_restarts, "max_task_retries": 0,
                            "num_cpus": engine.cpus_per_actor}
    if engine.accelerator == "tpu":
        opts["resources"] = {"TPU": float(engine.tpu_chips_per_host)}  # all chips of a host: one actor per host
        if engine.tpu_slice:  # keep every actor on the hosts of one slice (Ray labels TPU hosts by slice)
            opts["label_selector"] = {"ray.io/tpu-slice-name": engine.tpu_slice}
    elif engine.accelerator == "gpu":
        opts["num_gpus"] = engine.gpus_per_actor
    return opts


def engine_kwargs(cfg: RunConfig) -> dict[str, Any]:
    """Constructor arguments of `engine.actor.EngineActor`: its engine config from the model and engine sections."""
    d: dict[str, Any] = {"model": str(weights_path(cfg)), "dtype": cfg.model.dtype, **cfg.model.options}
    if cfg.engine.page_budget is not None:
        d["page_budget"] = cfg.engine.page_budget
    if cfg.engine.mesh is not None:
        d["mesh"] = cfg.engine.mesh
    d.update(cfg.engine.options)
    return {"config": d}


def check_engine_config(cfg: RunConfig) -> None:
    """Build the engine config here (cheap), so unknown engine settings fail before actors start."""
    from engine.actor import engine_config
    from engine.errors import EngineError

    try:
        engine_config(engine_kwargs(cfg)["config"])
    except (EngineError, TypeError, ValueError) as exc:
        raise ConfigError(f"`engine.options`/`model.options`: {exc}") from None


def default_actor_class() -> Any:
    from engine.actor import EngineActor

    return EngineActor


def ensure_ray(log: Log) -> None:
    import ray

    if ray.is_initialized():
        return
    address = os.environ.get("RAY_ADDRESS")
    ray.init(address=address, include_dashboard=False, log_to_driver=bool(address), logging_level="WARNING")
    log(f"ray: {'connected to ' + address if address else 'local instance'}; resources {ray.cluster_resources()}")


def start_actors(cfg: RunConfig, actor_cls: Any, kwargs: dict[str, Any], log: Log,
                 name_prefix: str | None = None) -> list[Any]:
    """Start `engine.actors` actors and wait until each answers `health()`."""
    import ray

    remote_cls = actor_cls if hasattr(actor_cls, "remote") else ray.remote(actor_cls)
    opts = actor_options(cfg.engine)
    # Named after the run: `ray list actors` shows whose engines they are, and a second driver of the
    # same run on the same cluster fails at once instead of computing everything twice.
    actors = [remote_cls.options(name=f"{name_prefix}engine-{i}", **opts).remote(**kwargs) if name_prefix
              else remote_cls.options(**opts).remote(**kwargs) for i in range(cfg.engine.actors)]
    pending = [a.health.remote() for a in actors]
    ready, not_ready = ray.wait(pending, num_returns=len(pending), timeout=cfg.engine.start_timeout_s)
    if not_ready:
        for a in actors:
            ray.kill(a)
        raise RunError(
            f"{len(not_ready)} of {len(actors)} engine actors did not start within {cfg.engine.start_timeout_s:.0f} s "
            f"(each asks {opts}; the cluster has {ray.cluster_resources()}): lower `engine.actors` or add hosts"
        )
    ray.get(ready)  # raises the constructor's error, if any
    log(f"engine: {len(actors)} actor(s) ready ({opts})")
    return actors


# ---------------------------------------------------------------------------------------------
# rows


def _sample_row(u: Unit, status: str, error: str | None, attempts: int, out: Any, started, actor: str) -> dict:
    usage = out.usage if out is not None else Usage()
    output = None
    if out is not None:
        output = json.dumps({"answer": out.answer, "memory": out.memory, "settings": out.settings,
                             "templates": out.templates, "failures": out.failures}, sort_keys=True, default=str)
    return dict(_unit_cols(u), seed=u.seed, status=status, error=error, attempts=attempts, output_json=output,
                n_steps=len(out.steps) if out is not None else 0, prompt_tokens=usage.prompt_tokens,
                cached_tokens=usage.cached_tokens, decoded_tokens=usage.decoded_tokens, chunk_tokens=u.chunk_tokens,
                actor=actor, started_at=started, finished_at=now())


def _unit_cols(u: Unit) -> dict[str, Any]:
    return dict(unit=u.key, dataset=u.dataset.key, task=u.sample.task, sample_id=u.sample.id, method=u.method.key,
                repeat=u.repeat)


def _step_rows(u: Unit, out: Any) -> list[dict[str, Any]]:
    rows = []
    for s in out.steps:
        r = s.to_record()
        rows.append(dict(_unit_cols(u), step=r["index"], kind=r["kind"], template_id=r["template_id"],
                         template_hash=r["template_sha256"], prompt=r["prompt"], output=r["output"],
                         parsed_json=r["parsed_json"], memory_json=r["memory_json"],
                         prompt_tokens=r["prompt_tokens"], cached_tokens=r["cached_tokens"],
                         decoded_tokens=r["decoded_tokens"],
                         error=None if r["ok"] else "; ".join(r["failures"]) or "unparsed output",
                         extra_json=json.dumps({k: r[k] for k in ("attempts", "failures", "chunk_index", "ok")})))
    return rows


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()[:2000]


# ---------------------------------------------------------------------------------------------
# the pool of workers


class _Pool:
    def __init__(self, cfg: RunConfig, rs: RunStore, actors: list[Any], units: list[Unit], log: Log,
                 flush_units: int = 16, flush_s: float = 20.0, progress_s: float = 20.0) -> None:
        self.cfg, self.rs, self.actors, self.log = cfg, rs, actors, log
        self.total = len(units)
        self.queue: deque[tuple[Unit, int, str | None]] = deque((u, 0, None) for u in units)
        self.cv = threading.Condition()
        self.stop = threading.Event()
        self.finished = 0
        self.failed = 0
        self.buffer: list[dict[str, list[dict]]] = []
        self.live = [True] * len(actors)
        self.usage = Usage()
        self.flush_units, self.flush_s, self.progress_s = flush_units, flush_s, progress_s
        self.waiters = ThreadPoolExecutor(max_workers=max(4, len(actors) * cfg.engine.max_in_flight),
                                          thread_name_prefix="judge-wait")
        self._judge_remote = None

    # queue ---------------------------------------------------------------------------------

    def _take(self) -> tuple[Unit, int, str | None] | None:
        with self.cv:
            while not self.queue and not self.stop.is_set() and self.finished < self.total:
                self.cv.wait(0.5)
            if self.stop.is_set() or not self.queue:
                return None
            return self.queue.popleft()

    def _finish(self, rows: dict[str, list[dict]], failed: bool) -> None:
        with self.cv:
            self.buffer.append(rows)
            self.finished += 1
            self.failed += int(failed)
            self.cv.notify_all()

    def _attempt_failed(self, item: tuple[Unit, int, str | None], exc: BaseException, actor: str, started) -> None:
        u, attempt, _ = item
        err = _error_text(exc)
        if attempt < self.cfg.retries and not self.stop.is_set():
            self.log(f"retry {attempt + 1}/{self.cfg.retries} of {u.key} after {err[:200]}")
            with self.cv:
                self.queue.append((u, attempt + 1, err))
                self.cv.notify_all()
            return
        self.log(f"FAILED {u.key} after {attempt + 1} attempt(s): {err[:300]}")
        self._finish({"samples": [_sample_row(u, "failed", err, attempt + 1, None, started, actor)]}, failed=True)

    # workers -------------------------------------------------------------------------------

    def _actor_alive(self, i: int) -> bool:
        """After an actor error: wait for Ray's restart; False if the actor is gone for good."""
        import ray
        from ray.exceptions import ActorDiedError, GetTimeoutError

        deadline = time.monotonic() + self.cfg.engine.start_timeout_s
        died = 0
        while time.monotonic() < deadline and not self.stop.is_set():
            try:
                return bool(ray.get(self.actors[i].health.remote(), timeout=max(1.0, deadline - time.monotonic())))
            except ActorDiedError:  # dead for good once it persists (no restarts left)
                died += 1
                if died >= 5:
                    return False
            except (ray.exceptions.RayActorError, GetTimeoutError):  # restarting (model load): ask again
                died = 0
            time.sleep(1.0)
        return False

    def _worker(self, i: int) -> None:
        import ray

        from eval.methods import get_method
        from jobs.llm_adapters import ActorLLM

        llm = ActorLLM(self.actors[i], name=f"engine-{i}", timeout_s=self.cfg.engine.request_timeout_s)
        actor = f"engine-{i}"
        while self.live[i] and (item := self._take()) is not None:
            u, attempt, _ = item
            started = now()
            try:
                out = get_method(u.method.name, **u.settings).run(u.sample, llm)
            except ray.exceptions.RayActorError as exc:
                self.log(f"{actor} failed during {u.key} ({type(exc).__name__}); waiting for its restart")
                if not self._actor_alive(i):
                    self.live[i] = False
                    self.log(f"{actor} is gone (restarts exhausted); its units go to the other actors")
                    with self.cv:  # put the unit back without spending an attempt
                        self.queue.appendleft(item)
                        self.cv.notify_all()
                    break
                self._attempt_failed(item, exc, actor, started)
                continue
            except Exception as exc:  # a method error: recorded with the unit, never dropped
                self._attempt_failed(item, exc, actor, started)
                continue
            with self.cv:
                self.usage = self.usage + out.usage
            self._judge(item, out, llm, actor, started)
        if not any(self.live):
            self._fail_remaining("every engine actor died and could not be restarted (engine.max_restarts)")

    def _fail_remaining(self, reason: str) -> None:
        while True:
            with self.cv:
                if not self.queue:
                    return
                u, attempt, _ = self.queue.popleft()
            self._finish({"samples": [_sample_row(u, "failed", reason, attempt + 1, None, now(), "")]}, failed=True)

    def _judge(self, item, out, llm, actor: str, started) -> None:
        u, attempt, _ = item
        rows = {"samples": [_sample_row(u, "ok", None, attempt + 1, out, started, actor)], "steps": _step_rows(u, out)}
        if not u.judges:
            self._finish(rows, failed=False)
            return
        import ray

        from jobs.judging import judge_one, judge_output

        if self._judge_remote is None:
            self._judge_remote = ray.remote(judge_one)
        refs = [self._judge_remote.options(num_cpus=self.cfg.judge_cpus, max_retries=self.cfg.retries,
                                           retry_exceptions=[ray.exceptions.RayActorError],
                                           name=f"judge:{j.name}")
                .remote(j, judge_output(j.name, out, len(u.sample.chunks)), u.sample.gold, u.sample.metadata, self.cfg.judge_model, llm)
                for j in u.judges]
        self.waiters.submit(self._await_judges, u, attempt, rows, refs, started, actor)

    def _await_judges(self, u: Unit, attempt: int, rows: dict, refs: list, started, actor: str) -> None:
        import ray

        judgments, scores, errors = [], [], []
        for j, ref in zip(u.judges, refs):
            try:
                res = ray.get(ref)
            except Exception as exc:
                errors.append(f"judge {j.name}: {_error_text(exc)}")
                continue
            judgments += [dict(_unit_cols(u), **r) for r in res["judgments"]]
            scores += [dict(_unit_cols(u), **r) for r in res["scores"]]
        if errors:
            self.log(f"FAILED judging {u.key}: {errors[0][:300]}")
            rows["samples"][0].update(status="failed", error="; ".join(errors)[:2000], finished_at=now())
        rows.update(judgments=judgments, scores=scores)
        self._finish(rows, failed=bool(errors))

    # main loop -----------------------------------------------------------------------------

    def _flush(self) -> None:
        with self.cv:
            batch, self.buffer = self.buffer, []
        if not batch:
            return
        merged: dict[str, list[dict]] = {}
        for rows in batch:
            for table, rs in rows.items():
                merged.setdefault(table, []).extend(rs)
        self.rs.write_shard(merged)

    def _live_usage(self) -> Usage:
        """Engine-wide counters (live, also mid-unit), falling back to finished units' usage."""
        import ray

        try:
            stats = ray.get([a.stats.remote() for a in self.actors], timeout=5)
        except Exception:
            return self.usage
        return Usage(sum(s.get("prompt_tokens", 0) for s in stats), sum(s.get("cached_tokens", 0) for s in stats),
                     sum(s.get("decoded_tokens", 0) for s in stats))

    def _progress(self, t0: float, usage: Usage | None = None) -> None:
        el = max(time.monotonic() - t0, 1e-9)
        u = usage or self.usage
        hit = 100.0 * u.cached_tokens / u.prompt_tokens if u.prompt_tokens else 0.0
        self.log(f"progress: {self.finished}/{self.total} units ({self.failed} failed) | "
                 f"{(u.prompt_tokens - u.cached_tokens + u.decoded_tokens) / el:.0f} tok/s "
                 f"({u.decoded_tokens / el:.1f} decoded/s) | cache hit {hit:.1f}% | {time.monotonic() - t0:.0f} s "
                 f"| -> {self.rs.uri}")

    def run(self) -> tuple[int, int, dict[str, Any]]:
        t0 = time.monotonic()
        threads = [threading.Thread(target=self._worker, args=(i,), daemon=True, name=f"unit-{i}-{k}")
                   for i in range(len(self.actors)) for k in range(self.cfg.engine.max_in_flight)]
        for t in threads:
            t.start()
        last_flush = last_progress = time.monotonic()
        last_count = 0
        try:
            while True:
                with self.cv:
                    done = self.finished >= self.total
                    self.cv.wait(0.5)
                    pending = len(self.buffer)
                nowm = time.monotonic()
                if pending and (done or pending >= self.flush_units or nowm - last_flush >= self.flush_s):
                    self._flush()
                    last_flush = nowm
                if done:
                    break
                if self.finished != last_count or nowm - last_progress >= self.progress_s:
                    self._progress(t0, self._live_usage())
                    last_progress, last_count = nowm, self.finished
        finally:
            self.stop.set()
            with self.cv:
                self.cv.notify_all()
            self._flush()  # whatever finished is kept, also on interrupt
            self.waiters.shutdown(wait=False, cancel_futures=True)
        self._progress(t0, self._live_usage())
        el = time.monotonic() - t0
        u = self.usage
        stats = {"wall_s": el, "prompt_tokens": u.prompt_tokens, "cached_tokens": u.cached_tokens,
                 "decoded_tokens": u.decoded_tokens,
                 "cache_hit": u.cached_tokens / u.prompt_tokens if u.prompt_tokens else 0.0,
                 "tokens_per_s": (u.prompt_tokens - u.cached_tokens + u.decoded_tokens) / el if el else 0.0,
                 "engine": self._engine_stats()}
        return self.finished - self.failed, self.failed, stats

    def _engine_stats(self) -> list[dict[str, Any]]:
        import ray

        out = []
        for i, a in enumerate(self.actors):
            try:
                out.append(dict(ray.get(a.stats.remote(), timeout=30), actor=f"engine-{i}"))
            except Exception as exc:
                out.append({"actor": f"engine-{i}", "error": _error_text(exc)})
        return out


# ---------------------------------------------------------------------------------------------


def prepare(cfg: RunConfig) -> tuple[str, RunStore, list[Unit]]:
    """Everything that can fail because of the config, before any Ray work starts."""
    check_config(cfg)
    check_engine_config(cfg)
    rid = run_id(cfg)
    rs = RunStore.open(cfg.output, rid)
    rs.check_writable()
    return rid, rs, build_units(cfg)


def execute(cfg: RunConfig, *, actor_cls: Any = None, log: Log = _stderr,
            on_ready: Callable[[str, str], None] | None = None) -> RunSummary:
    """Run (or resume) the config; returns the counts printed as the CLI's last line."""
    rid, rs, units = prepare(cfg)
    if on_ready:
        on_ready(rid, rs.uri)
    done = rs.done_units()
    todo = [u for u in units if u.key not in done]
    skipped = len(units) - len(todo)
    log(f"run {rid}: {len(units)} units, {skipped} already done, {len(todo)} to compute; results -> {rs.uri}")
    invocation = f"{now().strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:8]}"
    base = manifest_base(cfg, invocation, rs.uri)
    started, t0 = now(), time.monotonic()
    computed = failed = 0
    stats: dict[str, Any] = {}
    pool = None
    try:
        if todo:
            ensure_ray(log)
            try:
                actors = start_actors(cfg, actor_cls or default_actor_class(), engine_kwargs(cfg), log,
                                      name_prefix=f"memloop:{rid}:")
            except ValueError as exc:  # the name is taken
                raise RunError(f"run {rid} is already being computed on this Ray cluster ({exc}); "
                               "wait for it or stop it") from None
            try:
                pool = _Pool(cfg, rs, actors, todo, log, flush_units=cfg.flush_units, flush_s=cfg.flush_s)
                computed, failed, stats = pool.run()
            finally:
                import ray

                for a in actors:  # free the hosts (and, in a shared Ray, the CPUs and memory) at once
                    ray.kill(a)
    except BaseException as exc:
        if pool is not None:
            computed, failed = pool.finished - pool.failed, pool.failed
        stats["interrupted"] = _error_text(exc)
        if not isinstance(exc, (KeyboardInterrupt, RunError)):
            stats["traceback"] = traceback.format_exc()[-4000:]
        raise
    finally:
        rs.write_manifest(dict(base, started_at=started, finished_at=now(), wall_s=time.monotonic() - t0,
                               samples=len(units), computed=computed, skipped=skipped, failed=failed,
                               stats_json=json.dumps(stats, default=str)))
    return RunSummary(rid, rs.uri, len(units), computed, skipped, failed, stats)
