"""`memloop export --format inspect`: a run as Inspect AI eval logs (`.eval`), so `inspect view` and
Inspect's dataframe tools (`inspect_ai.analysis.samples_df`, `evals_df`, `events_df`) read memloop runs.

One log per (dataset, method), as Inspect has one log per task: the task is the method, the dataset
the dataset, the model the run's model. The mapping, written with inspect_ai's own types and writer
(`inspect_ai.log.write_eval_log`):

- a unit is a sample (`id` the sample id, `epoch` its repeat + 1); `input` the sample's text (its chunks
  as the method read them; Inspect's writer keeps long text as attachments) and `target` its gold
  (`memloop.jobs.results.sample_data.target_of`: SUMIE's facts after the last chunk, the reference summary, the
  RepoQA needle, the Spider rows), both reloaded through the run's config as `memloop rescore` does (when
  the data is not reachable here, the input says why and the target is empty); its final answer the
  sample's output; `total_time` and `working_time` the unit's time from its attempt's start to its commit;
  its token totals its model usage, a failed unit's root cause its error; `metadata` names the unit,
  its status, chunk size, gold and every judge's verdicts;
- each chunk the method read is one span (`type` "chunk", steps without a chunk in a span "final");
  each LLM step a model event in it (the prompt as the user message, the raw output, the tokens
  with the cached ones as cache reads, a step failure as the event's error); each change of the memory
  after a step a store event whose changes are the RFC 6902 patch (`jsonpatch`) from the memory before
  to the memory after, the store holding `{"memory": ...}`;
- each judge's metric one numeric score `scores["{judge}/{metric}"]` (SUMIE's per-turn metrics as start /
  last / avg by `memloop.eval.judges.sumie.turn_summary`, the per-turn values in the score's metadata), so
  `samples_df` reads columns such as `score_sumie-exact/f1:avg` as numbers, and a score event each;
  each re-judging (`memloop rescore`) the same as `{judge}@{judging_id}/{metric}`;
- the log's results are the report's figures (`memloop.jobs.results.figures.score_figures`: the judge's own
  aggregation over samples, mean over repeats), one `EvalScore` per (judge, metric), re-judgings too;
  `model_generate_config` is the run's `sampling` (temperature, max_tokens, top_p, top_k) as the method's own
  options override it, and `seed`; a log with a failed sample has status `error`.

`inspect_ai` is an optional dependency (`pip install memloop[inspect]`); without it the export says so.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
from dataclasses import dataclass
from typing import Any

import pandas as pd
from memloop.eval.judges.sumie import METRICS as SUMIE_METRICS
from memloop.eval.judges.sumie import turn_summary
from memloop.jobs.errors import JobsError
from memloop.jobs.results.compare import run_label
from memloop.jobs.results.figures import score_figures
from memloop.jobs.results.run_data import RunData, run_config
from memloop.jobs.results.sample_data import SampleData, load_sample_data, target_of
from memloop.jobs.store.export import check_destination, check_not_computing, put_export
from memloop.jobs.store.outputs import join_uri, open_store
from memloop.jobs.store.run_store import RunStore


class ExportError(JobsError):
    """A run cannot be exported as asked."""


@dataclass
class InspectExport:
    run_id: str
    dest: str
    logs: list[str]  # file names under dest, one per (dataset, method)
    samples: int
    partial: bool = False  # the run was being computed (exported with allow_partial)


def _inspect() -> Any:
    try:
        import inspect_ai.log  # noqa: F401
    except ImportError:
        raise ExportError(
            "--format inspect writes logs with the inspect_ai package, which is not installed; "
            "`pip install 'memloop[inspect]'` (or `pip install inspect_ai`)"
        ) from None
    import inspect_ai

    return inspect_ai


def _loads(text: Any) -> Any:
    return None if text is None or (isinstance(text, float) and math.isnan(text)) else json.loads(text)


def _iso(t: Any) -> str | None:
    if t is None or pd.isna(t):
        return None
    return pd.Timestamp(t).to_pydatetime().isoformat()


def _model_name(cfg: dict[str, Any], d: RunData) -> tuple[str, str | None]:
    """Inspect's `provider/model` name of the run's model, and the endpoint's base URL: an endpoint is
    `openai/NAME`, which `inspect eval --model openai/NAME --model-base-url URL` runs again as it is."""
    model = cfg.get("model") or {}
    if model.get("kind") == "openai":
        ep = model.get("endpoint") or {}
        return f"openai/{ep.get('model')}", ep.get("base_url")
    return f"memloop/{run_label(d)}", None


def _usage(prompt: int, cached: int, decoded: int) -> Any:
    from inspect_ai.model import ModelUsage

    return ModelUsage(
        input_tokens=int(prompt),
        output_tokens=int(decoded),
        total_tokens=int(prompt + decoded),
        input_tokens_cache_read=int(cached),
    )


def _when(value: Any, fallback: dt.datetime) -> dt.datetime:
    """A step's recorded time, or `fallback` (steps written before steps had times)."""
    return fallback if value is None or pd.isna(value) else pd.Timestamp(value).to_pydatetime()


def _events(model: str, steps: pd.DataFrame, started: dt.datetime) -> list[Any]:
    """Per chunk a span with its steps' model events and the memory's store events; what came before. Each
    event at the time its step's call began (a model event with its call's duration as `working_time`), a
    memory change and a span's end when the call ended, so Inspect's timeline shows where a unit's time went."""
    import jsonpatch
    from inspect_ai.event import ModelEvent, SpanBeginEvent, SpanEndEvent, StoreEvent
    from inspect_ai.model import ChatMessageUser, GenerateConfig, ModelOutput

    events: list[Any] = []
    memory: Any = None
    span: str | None = None
    last = started  # when the previous step's call ended
    for _, s in steps.sort_values("step").iterrows():
        extra = _loads(s["extra_json"]) or {}
        chunk = extra.get("chunk_index")
        name = f"chunk {chunk}" if chunk is not None else "final"
        began = _when(s.get("started_at"), last)
        ended = _when(s.get("finished_at"), began)
        if name != span:
            if span is not None:
                events.append(SpanEndEvent(id=span, timestamp=last))
            events.append(
                SpanBeginEvent(
                    id=name,
                    name=name,
                    type="chunk" if chunk is not None else "final",
                    timestamp=began,
                    metadata={"chunk_index": chunk},
                )
            )
            span = name
        out = ModelOutput.from_content(model, s["output"] or "", error=s["error"] if pd.notna(s["error"]) else None)
        out.usage = _usage(s["prompt_tokens"], s["cached_tokens"], s["decoded_tokens"])
        events.append(
            ModelEvent(
                model=model,
                input=[ChatMessageUser(content=s["prompt"] or "")],
                tools=[],
                tool_choice="none",
                config=GenerateConfig(),
                output=out,
                span_id=span,
                timestamp=began,
                completed=ended,
                working_time=(ended - began).total_seconds(),
                error=s["error"] if pd.notna(s["error"]) else None,
                metadata={
                    "step": int(s["step"]),
                    "kind": s["kind"],
                    "template_id": s["template_id"],
                    "parsed": _loads(s["parsed_json"]),
                    "attempts": extra.get("attempts"),
                    "failures": extra.get("failures"),
                },
            )
        )
        after = _loads(s["memory_json"])
        patch = jsonpatch.make_patch({"memory": memory}, {"memory": after}).patch
        if patch:  # the memory changed: the RFC 6902 operations, as Inspect's store events carry them
            events.append(
                StoreEvent(
                    changes=[
                        {"op": p["op"], "path": p["path"], "from_": p.get("from"), "value": p.get("value")}
                        for p in patch
                    ],
                    span_id=span,
                    timestamp=ended,
                )
            )
        memory, last = after, ended
    if span is not None:
        events.append(SpanEndEvent(id=span, timestamp=last))
    return events


def _scores(name: str, scores: pd.DataFrame, answer: str | None = None) -> dict[str, Any]:
    """One judge's verdict on one unit as Inspect scores, one per metric and each a number (so
    `samples_df` reads them as numbers), named `{judge}/{metric}`: whole-sample metrics as they are,
    per-turn ones as start / last / avg, the per-turn values in the score's metadata."""
    from inspect_ai.scorer import Score

    out: dict[str, Any] = {}
    for metric, g in scores.groupby("metric", sort=True):
        per_turn = g[g["turn"].notna()]
        values: dict[str, float] = {}
        by_turn: dict[int, float] = {}
        if len(per_turn):
            by_turn = dict(zip(per_turn["turn"].astype(int), per_turn["value"].astype(float)))
            if metric in SUMIE_METRICS:
                values.update({f"{metric}:{k}": v for k, v in turn_summary(by_turn).items()})
        for v in g.loc[g["turn"].isna(), "value"]:
            values[metric] = float(v)
        for key, v in values.items():
            if v is None or (isinstance(v, float) and math.isnan(v)):
                continue
            out[f"{name}/{key}"] = Score(
                value=float(v),
                answer=answer,
                explanation=f"{name}: {key}",
                metadata={"judge": name, "metric": key, "per_turn": [by_turn[t] for t in sorted(by_turn)] or None},
            )
    return out


def _verdicts(judgments: pd.DataFrame) -> list[dict[str, Any]]:
    return [
        {k: r.get(k) for k in ("item", "label", "valid", "source")}
        for r in (json.loads(x) for x in judgments.sort_values("index")["record_json"])
    ]


GENERATE_FIELDS = ("temperature", "max_tokens", "top_p", "top_k")


def _generate_config(cfg: dict[str, Any], method: str | None = None) -> Any:
    """What the method generated with, as Inspect's GenerateConfig: the run's sampling, overridden by the
    method's own options (gu-json's `max_tokens: 200` is what its requests asked for, not the run's 256)."""
    from inspect_ai.model import GenerateConfig

    sampling = {k: v for k, v in (cfg.get("sampling") or {}).items() if v is not None}
    for m in cfg.get("methods") or []:
        if method is not None and (m.get("label") or m.get("name")) == method:
            sampling.update(
                {k: v for k, v in (m.get("options") or {}).items() if k in GENERATE_FIELDS and v is not None}
            )
    return GenerateConfig(
        temperature=sampling.get("temperature"),
        max_tokens=sampling.get("max_tokens"),
        top_p=sampling.get("top_p"),
        top_k=sampling.get("top_k"),
        seed=cfg.get("seed"),
    )


def _input_text(sample: Any) -> str:
    """The sample's text as the method read it: its chunks in order (and its question, when it has one)."""
    text = "\n\n".join(sample.chunks)
    return text + (f"\n\nQuestion: {sample.query}" if sample.query else "")


def _grouped(df: pd.DataFrame, key: str = "unit") -> dict[str, pd.DataFrame]:
    return dict(iter(df.groupby(key, sort=False))) if not df.empty else {}


def _log(
    d: RunData,
    cfg: dict[str, Any],
    runs: pd.DataFrame,
    ds: str,
    method: str,
    units: pd.DataFrame,
    steps: dict[str, pd.DataFrame],
    scores: dict[str, pd.DataFrame],
    judgments: dict[str, pd.DataFrame],
    rejudged: list[tuple[str, dict[str, pd.DataFrame], dict[str, pd.DataFrame]]],
    data: SampleData,
) -> Any:
    from inspect_ai.event import ScoreEvent
    from inspect_ai.log import (
        EvalConfig,
        EvalDataset,
        EvalError,
        EvalLog,
        EvalMetric,
        EvalResults,
        EvalSample,
        EvalScore,
        EvalSpec,
        EvalStats,
    )
    from inspect_ai.model import ChatMessageAssistant, ChatMessageUser, ModelOutput

    model, base_url = _model_name(cfg, d)
    empty = pd.DataFrame(columns=["judge", "metric", "turn", "value", "index", "record_json"])
    samples = []
    for _, u in units.iterrows():
        started = (
            pd.Timestamp(u["started_at"]).to_pydatetime()
            if pd.notna(u["started_at"])
            else dt.datetime.now(dt.timezone.utc)
        )
        finished = pd.Timestamp(u["finished_at"]).to_pydatetime() if pd.notna(u["finished_at"]) else started
        out = _loads(u["output_json"]) or {}
        answer = out.get("answer")
        answer_text = answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True, default=str)
        events = _events(model, steps.get(u["unit"], empty.iloc[0:0]), started)
        sample_scores, verdicts = {}, {}
        judged = [(None, scores, judgments)] + [(jid, s, j) for jid, s, j in rejudged]
        for jid, sc, jg in judged:
            us, uj = sc.get(u["unit"], empty), jg.get(u["unit"], empty)
            for judge, g in us.groupby("judge", sort=True):
                name = judge if jid is None else f"{judge}@{jid}"
                verdicts[name] = _verdicts(uj[uj["judge"] == judge] if len(uj) else uj)
                for key, score in _scores(name, g, answer_text or None).items():  # the answer the judge scored
                    sample_scores[key] = score
                    events.append(ScoreEvent(score=score, scorer=key, timestamp=finished))
        sample = data.get(ds, u["sample_id"])
        prompt = (
            _input_text(sample)
            if sample is not None
            else f"{u['task']} sample {u['sample_id']} of {ds}, read by {method} ({int(u['n_steps'] or 0)} steps); "
            f"{data.note}"
        )
        target = target_of(sample) if sample is not None else ""
        took = (
            (pd.Timestamp(u["finished_at"]) - pd.Timestamp(u["started_at"])).total_seconds()
            if pd.notna(u["started_at"]) and pd.notna(u["finished_at"])
            else None
        )
        samples.append(
            EvalSample(
                id=str(u["sample_id"]),
                epoch=int(u["repeat"]) + 1,
                input=prompt,
                target=target,
                total_time=took,
                working_time=took,
                messages=[ChatMessageUser(content=prompt)]
                + ([ChatMessageAssistant(content=answer_text)] if answer_text else []),
                output=ModelOutput.from_content(model, answer_text or ""),
                scores=sample_scores or None,
                metadata={
                    "unit": u["unit"],
                    "dataset": ds,
                    "method": method,
                    "task": u["task"],
                    "status": u["status"],
                    "n_steps": int(u["n_steps"] or 0),
                    "chunk_tokens": None if pd.isna(u["chunk_tokens"]) else int(u["chunk_tokens"]),
                    "memory": out.get("memory"),
                    "judgments": verdicts,
                    "gold": sample.gold if sample is not None else None,
                },
                store={"memory": out.get("memory")},
                events=events,
                model_usage={model: _usage(u["prompt_tokens"] or 0, u["cached_tokens"] or 0, u["decoded_tokens"] or 0)},
                started_at=_iso(u["started_at"]),
                completed_at=_iso(u["finished_at"]),
                error=EvalError(message=u["error"], traceback="", traceback_ansi="")
                if u["status"] == "failed"
                else None,
            )
        )
    figures = [(f, None) for f in score_figures(d)[0]]
    figures += [(f, j.judging_id) for j in d.judgings for f in score_figures(d.judged_by(j))[0]]
    figures = [(f, jid) for f, jid in figures if f["method"] == method and f["dataset"] == ds and f["mean"] is not None]
    results = EvalResults(  # named as the samples' scores: `{judge}/{metric}`, a re-judging `{judge}@{id}/{metric}`
        total_samples=len(units),
        completed_samples=int((units["status"] == "ok").sum()),
        scores=[
            EvalScore(
                name=f"{f['judge'] if jid is None else f['judge'] + '@' + jid}/{f['metric']}",
                scorer=f["judge"],
                scored_samples=f["judged"],
                unscored_samples=f["total"] - f["judged"],
                metrics={"mean": EvalMetric(name="mean", value=f["mean"])},
            )
            for f, jid in figures
        ],
    )
    latest = runs.sort_values("finished_at").iloc[-1] if not runs.empty else None
    created = _iso(latest["started_at"]) if latest is not None else dt.datetime.now(dt.timezone.utc).isoformat()
    eval_id = hashlib.sha256(f"{d.run_id}|{ds}|{method}".encode()).hexdigest()[:22]
    spec = EvalSpec(
        eval_set_id=d.run_id,
        eval_id=eval_id,
        run_id=d.run_id,
        created=created,
        task=method,
        task_id=eval_id,
        dataset=EvalDataset(
            name=ds,
            samples=int(units["sample_id"].nunique()),
            sample_ids=sorted(str(s) for s in units["sample_id"].unique()),
        ),
        model=model,
        model_base_url=base_url,
        model_generate_config=_generate_config(cfg, method),
        config=EvalConfig(epochs=int(units["repeat"].max()) + 1),
        packages=json.loads(latest["packages_json"] or "{}") if latest is not None else {},
        metadata={
            "memloop_run_id": d.run_id,
            "run_uri": d.uri,
            "dataset": ds,
            "method": method,
            "code_version": latest["code_version"] if latest is not None else None,
        },
    )
    usage = _usage(
        units["prompt_tokens"].fillna(0).sum(),
        units["cached_tokens"].fillna(0).sum(),
        units["decoded_tokens"].fillna(0).sum(),
    )
    stats = EvalStats(
        started_at=_iso(units["started_at"].min()) or "",
        completed_at=_iso(units["finished_at"].max()) or "",
        model_usage={model: usage},
    )
    # a log any of whose samples errored is an errored log, as Inspect marks one (its viewer flags it)
    errored = [s for s in samples if s.error is not None]
    error = (
        EvalError(
            message=f"{len(errored)} of {len(samples)} sample(s) failed; the first: {errored[0].error.message}",
            traceback="",
            traceback_ansi="",
        )
        if errored
        else None
    )
    return EvalLog(
        status="error" if errored else "success", eval=spec, results=results, stats=stats, samples=samples, error=error
    )


def _safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in text)


def export_inspect(
    run_uri: str, dest: str | None = None, allow_partial: bool = False, samples: SampleData | None = None
) -> InspectExport:
    """Write one `.eval` log per (dataset, method) of the run under `dest` (default `{run}/inspect/`); a run being
    computed now is refused unless `allow_partial`. `samples`: the run's inputs and gold when the caller holds
    them (the running run's plan); else they are reloaded through the run's recorded config."""
    _inspect()
    import tempfile
    from pathlib import Path

    from inspect_ai.log import write_eval_log

    rs = RunStore.at(run_uri)
    partial = check_not_computing(rs, allow_partial) is not None
    if dest:
        check_destination(dest, tables=False)  # .eval files only: beside a run's tables is fine (the default)
    d = RunData.load(rs)
    if d.samples.empty:
        raise ExportError(f"{rs.uri} has no finished unit yet; export it after `memloop run` has written some")
    cfg, runs = run_config(d), rs.table("runs").to_pandas()
    steps, scores, judgments = _grouped(d.steps), _grouped(d.scores), _grouped(rs.table("judgments").to_pandas())
    rejudged = [
        (j.judging_id, _grouped(j.scores), _grouped(rs.judging(j.judging_id).table("judgments").to_pandas()))
        for j in d.judgings
    ]
    data = samples if samples is not None else load_sample_data(rs)
    store = open_store(dest or join_uri(rs.uri, "inspect"))
    names = []
    with tempfile.TemporaryDirectory() as tmp:  # inspect's writer writes a file; the store puts it (local or gs://)
        for (ds, method), units in d.samples.groupby(["dataset", "method"], sort=True):
            log = _log(d, cfg, runs, ds, method, units, steps, scores, judgments, rejudged, data)
            name = f"{_safe(d.run_id)}_{_safe(method)}_{_safe(ds)}.eval"
            write_eval_log(log, str(Path(tmp) / name), format="eval")
            put_export(store, name, (Path(tmp) / name).read_bytes())
            names.append(name)
    return InspectExport(rs.run_id, store.uri, names, len(d.samples), partial)


class LiveInspectLogs:
    """`memloop run --log-format inspect`: the run's Inspect logs written as it goes, so `inspect view` shows a
    run without an export step. Every `every_s` seconds while the run computes, and once when it ends, the
    logs are rewritten from what the run has committed (`export_inspect` with `allow_partial`: the run's own
    lock is held) into `{run}/inspect/` (or `dest`); each file is replaced whole, so a reader never sees half a
    log. `samples`: the run's inputs and gold as its plan loaded them (else each write reloads the datasets). A write
    that fails (nothing committed yet, a full disk) is retried at the next tick; the last
    failure is kept in `error`."""

    def __init__(
        self, uri: str, dest: str | None = None, every_s: float = 30.0, samples: SampleData | None = None
    ) -> None:
        import threading

        _inspect()  # missing inspect_ai: said before the run starts, not after
        self.uri, self.dest, self.every_s = uri, dest, every_s
        self.samples = samples  # the run's inputs and gold (its plan's), read once for every rewrite
        self.written: InspectExport | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="inspect-logs", daemon=True)

    def start(self) -> "LiveInspectLogs":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.write()

    def write(self) -> None:
        from memloop.errors import MemloopError

        try:
            self.written, self.error = (
                export_inspect(self.uri, self.dest, allow_partial=True, samples=self.samples),
                None,
            )
        except MemloopError as exc:
            self.error = str(exc)

    def stop(self) -> InspectExport | None:
        """Stop the ticks and write the logs once more, from everything the run committed."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        self.write()
        return self.written
