"""`memloop rescore`: judge a finished run's stored outputs again, with another judge, judge model or
judge options, without running the methods again.

What a judge reads is rebuilt from the run's tables and its stored config: the method output from
`samples.output_json` and the unit's `steps` rows (`memloop.jobs.run.stored_output`), the sample's gold and
metadata by loading the datasets again through the run's recorded config (checked against the
content digests the run recorded, so a changed data file is refused rather than judged against
other gold). Only units the run finished `ok` are judged; which judge applies to which dataset is
the run's own rule (`memloop.jobs.run.workload.judges_for`).

The new rows go to a re-judging of their own, `{run}/judgings/{judging_id}/` (`JudgingStore`),
never into the run's tables. The judging id hashes what changes the verdicts (the judge and its
options, the judge model, the judge's templates, the code, an optional tag), so running the same
rescore again resumes it: shards are create-only, committed by their `judged` rows and listed in
the invocation's index, and only units without a committed `judged` row are judged.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
import traceback
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Callable

from memloop.jobs.errors import ConfigError, RescoreError, error_text
from memloop.jobs.run.config import JudgeModelSpec, JudgeSpec, RunConfig, parse_config
from memloop.jobs.run.driver import RunSummary
from memloop.jobs.run.plan import RunPlan, make_plan
from memloop.jobs.run.pool import Attempt, Outcome, WorkerPool
from memloop.jobs.run.workload import Unit
from memloop.jobs.store.manifest import finished_manifest, invocation_id, manifest_base
from memloop.jobs.store.run_store import JudgingStore, RunStore
from memloop.jobs.store.tables import judge_failure_row, judged_row, now, with_unit

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass
class RescoreSummary(RunSummary):
    judging_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(super().to_dict(), judging_id=self.judging_id)


def stored_config(rs: RunStore) -> tuple[RunConfig, dict[str, Any]]:
    """The config and identity of the run's latest invocation, as its `runs` table recorded them."""
    runs = rs.table("runs").to_pandas()
    if runs.empty:
        raise RescoreError(f"{rs.uri} records no invocation (no runs/ rows); rescore a run `memloop run` wrote")
    last = runs.sort_values("finished_at").iloc[-1]
    cfg = parse_config(json.loads(last["config_json"]), f"{rs.uri} (the run's recorded config)")
    return cfg, json.loads(last["identity_json"] or "{}")


def judge_model_identity(spec: JudgeModelSpec, plan: RunPlan) -> dict[str, Any]:
    """What of the judge model changes verdicts: the run's model (by digest) or the endpoint's URL and model."""
    if spec.kind == "engine":
        return {"kind": "engine", "model": plan.model_digest, "weights": spec.weights}
    ep = spec.endpoint
    assert ep is not None  # JudgeModelSpec requires it for kind openai
    return {"kind": "openai", "base_url": ep.base_url.rstrip("/"), "model": ep.model, "json_schema": ep.json_schema}


def judging_identity(
    run_id: str, judge: JudgeSpec, judge_model: JudgeModelSpec, plan: RunPlan, tag: str | None
) -> dict[str, Any]:
    from memloop.eval.judges import get_judge
    from memloop.jobs.store.provenance import code_digest

    return {
        "run_id": run_id,
        "judge": judge.model_dump(),
        "judge_model": judge_model_identity(judge_model, plan),
        "templates": get_judge(judge.name).template_hashes(),
        "code": code_digest(),
        "tag": tag,
    }


def judging_id_of(judge: JudgeSpec, ident: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()
    return f"{judge.name}-{digest[:12]}"


@dataclass(frozen=True)
class RescorePlan:
    run: RunStore
    plan: RunPlan  # the run's config with the new judge (its units carry the judge where it applies)
    judge: JudgeSpec
    judge_model: JudgeModelSpec
    judging_id: str
    identity: dict[str, Any]
    units: list[Unit]  # the run's ok units the judge applies to, in the run's order


def plan_rescore(
    run_uri: str, judge: JudgeSpec, judge_model: JudgeModelSpec | None = None, tag: str | None = None
) -> RescorePlan:
    """Everything that can fail before judging: the run, its recorded config, the judge's name and
    options, the datasets (reloaded and checked against the run's digests), and the units to judge."""
    rs = RunStore.at(run_uri)
    cfg, ident = stored_config(rs)
    data = cfg.model_dump()
    data.update(judges=[judge.model_dump()], output=rs.store.uri)
    if judge_model is not None:
        data["judge_model"] = judge_model.model_dump()
    new = parse_config(data, "the rescore's judge")
    try:
        plan = make_plan(new)
    except ConfigError as exc:
        raise ConfigError(
            f"{exc} (rescore reloads the run's datasets through its recorded config; run it from "
            "the directory `memloop run` ran in)"
        ) from None
    if ident.get("datasets") is not None and plan.identity["datasets"] != ident["datasets"]:
        raise RescoreError(
            f"the datasets of {rs.uri} are not what the run read (their settings or content digests "
            "differ from the ones it recorded): the gold would not be the run's; restore the data files"
        )
    samples = rs.samples()
    ok = {u for u, st in zip(samples.column("unit").to_pylist(), samples.column("status").to_pylist()) if st == "ok"}
    applies = [u for u in plan.units if u.judges]
    units = [u for u in applies if u.key in ok]
    if not units:
        tasks = sorted({u.dataset.task for u in plan.units})
        why = (
            f"it applies to none of the run's tasks {tasks}; pick a judge of those tasks (`memloop methods` lists "
            "them) or give it `--task`"
            if not applies
            else f"none of the {len(applies)} units it applies to finished ok (a failed unit is judged once "
            "`memloop run` has computed it again)"
        )
        raise RescoreError(f"judge {judge.name!r} has nothing to judge in {rs.uri}: {why}")
    if new.judge_model.kind == "engine" and new.judge_model.weights is not None:
        raise RescoreError(
            f"a judge engine on its own weights ({new.judge_model.weights}) is not started by rescore; "
            "serve those weights with `memloop serve` and pass it as --judge-model "
            "'{kind: openai, endpoint: {base_url: ..., model: ...}}'"
        )
    jident = judging_identity(rs.run_id, judge, new.judge_model, plan, tag)
    return RescorePlan(rs, plan, judge, new.judge_model, judging_id_of(judge, jident), jident, units)


class _Judging:
    """The unit function of the pool: one judge on one stored output, in this process (a judge's LLM
    calls are I/O; its lane's LLM is the run's model when the judge model is `engine`)."""

    def __init__(
        self,
        p: RescorePlan,
        outputs: dict[str, dict[str, Any]],
        steps: dict[str, list[dict[str, Any]]],
        llms: list[Any],
    ) -> None:
        self.p, self.outputs, self.steps, self.llms = p, outputs, steps, llms

    def run(self, a: Attempt[Unit], lane: int) -> Outcome:
        from memloop.eval.judges import get_judge
        from memloop.jobs.run.judge_task import judge_one
        from memloop.jobs.run.stored_output import stored_output

        u, jid, started = a.item, self.p.judging_id, now()
        out = stored_output(self.outputs[u.key], self.steps.get(u.key, ()))
        pred = get_judge(self.p.judge.name).prediction(out, len(u.sample.chunks))
        res = judge_one(self.p.judge, pred, u.sample.gold, u.sample.metadata, self.p.judge_model, self.llms[lane])
        return Outcome(
            {
                "judged": [judged_row(u, jid, "ok", None, a.number + 1, started)],
                "judgments": [dict(r, judging_id=jid) for r in with_unit(u, res["judgments"])],
                "scores": [dict(r, judging_id=jid) for r in with_unit(u, res["scores"])],
            }
        )

    def failed_rows(self, a: Attempt[Unit], error: str, infrastructure: bool) -> dict[str, list[dict[str, Any]]]:
        """A unit whose judge failed: its `judged` row and, as a run records it, a `judgments` row with
        the cause (`infrastructure` changes nothing here: either way the judgment is unknown)."""
        jid = self.p.judging_id
        return {
            "judged": [judged_row(a.item, jid, "failed", error, a.number + 1, now())],
            "judgments": [
                dict(r, judging_id=jid) for r in with_unit(a.item, [judge_failure_row(self.p.judge.name, error)])
            ],
        }


@contextlib.contextmanager
def _judge_lanes(p: RescorePlan, log: Log):
    """(LLMs, one per lane, threads per lane) for the judge: none for judges without an LLM or with
    their own endpoint; the run's endpoint, or engine actors started for the purpose, for `engine`."""
    from memloop.eval.judges import get_judge

    cfg = p.plan.config
    if not get_judge(p.judge.name).needs_llm:
        yield [None], 2
        return
    if p.judge_model.kind == "openai":
        assert p.judge_model.endpoint is not None
        yield [None], p.judge_model.endpoint.max_concurrency
        return
    from memloop.jobs.run.llm_adapters import ActorLLM, endpoint_llm

    if cfg.model.kind == "openai":
        assert cfg.model.endpoint is not None
        yield [endpoint_llm(cfg.model.endpoint)], cfg.model.endpoint.max_concurrency
        return
    import ray
    from memloop.jobs.run import actors as engine_actors

    engine_actors.ensure_ray(log)
    actors = engine_actors.start_actors(
        cfg.engine,
        engine_actors.default_actor_class(),
        {"config": p.plan.engine_config},
        log,
        name_prefix=f"memloop:{p.run.run_id}:{p.judging_id}:",
    )
    try:
        yield (
            [ActorLLM(a, name=f"engine-{i}", timeout_s=cfg.engine.request_timeout_s) for i, a in enumerate(actors)],
            cfg.engine.max_in_flight,
        )
    finally:
        for a in actors:
            ray.kill(a)


def _by_unit(table: Any, keys: set[str]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in table.to_pylist():
        if row["unit"] in keys:
            out[row["unit"]].append(row)
    return out


def rescore(
    run_uri: str,
    judge: JudgeSpec,
    judge_model: JudgeModelSpec | None = None,
    *,
    tag: str | None = None,
    log: Log = _stderr,
    on_ready: Callable[[str, str], None] | None = None,
) -> RescoreSummary:
    """Judge the run's ok units again with `judge` (and `judge_model`, default the run's); resumes a
    re-judging with the same settings. Returns the counts, as `memloop run` does."""
    p = plan_rescore(run_uri, judge, judge_model, tag)
    js: JudgingStore = p.run.judging(p.judging_id)
    js.check_writable()
    if on_ready:
        on_ready(p.judging_id, js.uri)
    done = js.done_units()
    todo = [u for u in p.units if u.key not in done]
    skipped = len(p.units) - len(todo)
    log(
        f"rescore {p.run.run_id} with {judge.name} as {p.judging_id}: {len(p.units)} units, {skipped} already "
        f"judged, {len(todo)} to judge; results -> {js.uri}"
    )
    keys = {u.key for u in todo}
    outputs = {r["unit"]: r for r in p.run.samples().to_pylist() if r["unit"] in keys}
    steps = _by_unit(p.run.table("steps"), keys)
    invocation = invocation_id()
    base = dict(
        manifest_base(p.plan, invocation, js.uri),
        identity_json=json.dumps(p.identity, sort_keys=True),
        config_json=json.dumps(
            {
                "judging_id": p.judging_id,
                "judge": p.judge.model_dump(),
                "judge_model": p.judge_model.model_dump(),
                "tag": tag,
            },
            sort_keys=True,
        ),
        model_digest=json.dumps(p.identity["judge_model"], sort_keys=True),
        template_hashes_json=json.dumps({f"judge:{judge.name}": p.identity["templates"]}, sort_keys=True),
    )
    started, t0 = now(), time.monotonic()
    stats: dict[str, Any] = {}
    state: dict[str, Any] = {}
    from memloop.jobs.store.run_lock import run_lock

    held = (
        run_lock(
            js,
            f"{invocation} (rescore {p.judging_id})",
            log,
            on_lost=lambda: state["pool"].stop.set() if "pool" in state else None,
        )
        if todo
        else contextlib.nullcontext({"lost": None})
    )
    with held as lock:
        try:
            if todo:
                with _judge_lanes(p, log) as (llms, per_lane):
                    fn = _Judging(p, outputs, steps, llms)
                    pool: WorkerPool[Unit] = WorkerPool(
                        todo,
                        lanes=len(llms),
                        per_lane=per_lane,
                        retries=p.plan.config.retries,
                        run=fn.run,
                        failed_rows=fn.failed_rows,
                        flush=js.write_shard,
                        describe=lambda u: u.key,
                        flush_units=p.plan.config.flush_units,
                        flush_s=p.plan.config.flush_s,
                        log=log,
                    )
                    state["pool"] = pool
                    pool.run()
                stats["shards"] = js.compact(p.plan.config.shard_rows)
        except BaseException as exc:
            stats["interrupted"] = error_text(exc)
            if not isinstance(exc, KeyboardInterrupt):
                stats["traceback"] = traceback.format_exc()[-4000:]
            raise
        finally:
            pool = state.get("pool")
            computed, failed = (pool.finished - pool.failed, pool.failed) if pool is not None else (0, 0)
            state["counts"] = (computed, failed, list(pool.errors) if pool is not None else [])
            js.write_index(invocation)
            js.write_manifest(
                finished_manifest(
                    base,
                    started=started,
                    t0=t0,
                    samples=len(p.units),
                    computed=computed,
                    skipped=skipped,
                    failed=failed,
                    stats=stats,
                )
            )
    if lock["lost"]:
        raise RescoreError(lock["lost"])
    computed, failed, errors = state["counts"]
    return RescoreSummary(
        p.run.run_id, js.uri, len(p.units), computed, skipped, failed, stats, errors, judging_id=p.judging_id
    )
