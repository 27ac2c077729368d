"""The run config: a YAML file validated by pydantic (structure only).

What the config means for the environment (files, registries, the engine, the run id) is worked
out once, before any work starts, by `memloop.jobs.run.plan`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from memloop.eval.options import MaxTokens, Temperature, TopK, TopP
from memloop.jobs.errors import ConfigError
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from memloop.sampling import SEED_MAX, SEED_MIN, raised_by_check

# Upper bounds of the config's counts: far above any real run, low enough that a typo (an extra few
# zeros) fails in one line instead of exhausting memory building units or threads.
MAX_REPEATS = 100  # the papers repeat at most 5 times
MAX_SAMPLES_LIMIT = 1_000_000  # `limit`: samples of one dataset
MAX_CHUNKS = 1_000_000  # `max_chunks`: chunks of one sample
MAX_ACTORS = 1_024  # engine actors
MAX_IN_FLIGHT = 4_096  # samples at once per actor (a batch is at most a few hundred)
MAX_CONCURRENCY = 4_096  # requests at once to an endpoint
MAX_RETRIES = 20  # attempts after the first (per sample, per endpoint request)
MAX_RESTARTS = 100  # engine actor restarts
MAX_FLUSH_UNITS = 100_000  # units per shard write
MAX_SEED = SEED_MAX - MAX_REPEATS  # each repeat's seed (seed + repeat) is a method's 64-bit `seed` option


def _at_most(most: int, what: str, advice: str = "lower it") -> AfterValidator:
    """A bound with a message saying what the field counts and what to do."""

    def check(v: int | None) -> int | None:
        if v is not None and v > most:
            raise ValueError(f"at most {most:,} {what} (got {v:,}); {advice}")
        return v

    return AfterValidator(check)


# The papers' table layouts live in `memloop.jobs.results.paper_tables`, a floor above the run: it registers
# its table ids here, so the config can check `paper_tables:` without importing what sits above it.
# The entry points (the CLI's commands, `memloop.run`) load that floor before they read a config.
_PAPER_TABLES: set[str] = set()


def register_paper_tables(names: Iterable[str]) -> None:
    _PAPER_TABLES.update(names)


def paper_table_names() -> frozenset[str]:
    return frozenset(_PAPER_TABLES)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DatasetSpec(_Strict):
    """One dataset: a task, a file (or a synthetic generator), and which samples to take."""

    task: str
    path: str | None = None  # a file or directory the task's loader reads
    synthetic: dict[str, Any] | None = None  # generator options (e.g. SUMIE: entities, seed)
    limit: Annotated[
        int | None, _at_most(MAX_SAMPLES_LIMIT, "samples per dataset", "lower it, or leave it out to take every sample")
    ] = Field(default=None, ge=1)  # the first `limit` samples
    ids: list[str] | None = None  # or exactly these sample ids
    options: dict[str, Any] = Field(default_factory=dict)  # loader options; `max_chunks` keeps the first N chunks

    @field_validator("task")
    @classmethod
    def _known_task(cls, v: str) -> str:
        from memloop.eval.datasets import list_tasks  # the dataset registry is the one source of task names

        if v not in list_tasks():
            raise ValueError(f"unknown task {v!r}; use one of {', '.join(list_tasks())}")
        return v

    @field_validator("options")
    @classmethod
    def _max_chunks(cls, v: dict[str, Any]) -> dict[str, Any]:
        n = v.get("max_chunks")
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ValueError(f"`max_chunks` must be a whole number of chunks >= 1 (got {n!r})")
        if n is not None and n > MAX_CHUNKS:
            raise ValueError(
                f"`max_chunks` is at most {MAX_CHUNKS:,} chunks (got {n:,}); lower it, or leave it "
                "out to keep every chunk"
            )
        return v

    @model_validator(mode="after")
    def _one_source(self) -> "DatasetSpec":
        if self.path is not None and self.synthetic is not None:
            raise ValueError("give `path` (a data file) or `synthetic` (generator options), not both")
        return self

    @property
    def key(self) -> str:
        """Short stable name used in tables: the task plus the file name or 'synthetic'."""
        src = Path(self.path).stem if self.path else ("synthetic" if self.synthetic is not None else "builtin")
        size = self.options.get("chunk_tokens")
        return f"{self.task}:{src}" + (f"@{size}" if size is not None else "")  # chunk-size sweeps stay apart


class MethodSpec(_Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    tasks: list[str] | None = None  # run only on these tasks (default: every dataset)
    label: str | None = None  # name in tables when one method appears with different options

    @property
    def key(self) -> str:
        return self.label or self.name


class EndpointSpec(_Strict):
    """An OpenAI-compatible endpoint (for a remote judge or model)."""

    base_url: str
    model: str
    api_key_env: str | None = None  # name of the environment variable holding the key (never the key)
    max_concurrency: Annotated[int, _at_most(MAX_CONCURRENCY, "requests at once")] = Field(
        default=16, ge=1
    )  # requests in flight at once (provider rate limits)
    timeout_s: float = Field(default=120.0, gt=0)  # one attempt, whole: connect, send, wait and read the answer
    max_retries: Annotated[int, _at_most(MAX_RETRIES, "retries of a request")] = Field(
        default=3, ge=0
    )  # transient failures (connection, 429, 5xx), honouring Retry-After
    json_schema: bool = True  # the server constrains output to a JSON Schema (response_format json_schema)

    @field_validator("base_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        from urllib.parse import urlsplit

        parts = urlsplit(v.strip())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(
                f"base_url must be an http:// or https:// URL with a host (got {v!r}); "
                "write it as e.g. http://127.0.0.1:8000/v1"
            )
        return v


class ModelSpec(_Strict):
    """The model the methods call: memloop's own engine (`kind: engine`, the default) on `weights`, or
    any OpenAI-compatible endpoint (`kind: openai`: vLLM, SGLang, a TPU server, an API provider,
    `memloop serve`). Only `weights`, `dtype`, `options` and the endpoint's model change results."""

    kind: Literal["engine", "openai"] = "engine"
    weights: str | None = None  # GGUF file or Hugging Face directory; None = bundled SmolLM2
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    options: dict[str, Any] = Field(default_factory=dict)  # model options passed to the engine config
    endpoint: EndpointSpec | None = None  # kind openai: where the model is served

    @model_validator(mode="after")
    def _endpoint_given(self) -> "ModelSpec":
        if self.kind == "openai":
            if self.endpoint is None:
                raise ValueError("kind 'openai' needs `endpoint` with base_url and model")
            if self.weights is not None or self.options:
                raise ValueError("kind 'openai' serves its own model: remove `weights` and `options`")
        elif self.endpoint is not None:
            raise ValueError("`endpoint` is for kind 'openai'; set `kind: openai` or remove it")
        return self


class EngineSpec(_Strict):
    """How engine actors are placed and fed (transport settings: not part of the run id)."""

    actors: Annotated[int, _at_most(MAX_ACTORS, "engine actors")] = Field(
        default=1, ge=1
    )  # CPU: one per configured share; TPU/GPU: one per host
    accelerator: Literal["cpu", "gpu", "tpu"] = "cpu"
    cpus_per_actor: float = Field(default=1.0, gt=0)
    gpus_per_actor: float = Field(default=1.0, gt=0)
    tpu_chips_per_host: int = Field(default=4, ge=1)
    tpu_slice: str | None = None  # run on the hosts of this TPU slice only (Ray's ray.io/tpu-slice-name label)
    max_in_flight: Annotated[int, _at_most(MAX_IN_FLIGHT, "samples at once per actor")] = Field(
        default=8, ge=1
    )  # samples run concurrently against each actor
    # Where method loops run: "driver" (threads of the driver process), "engine" (a worker process
    # on each engine actor's node, which also writes its units' shards; the driver only hands out
    # units and records outcomes) or "auto" (the default: chosen by `auto_placement` when the config
    # is read, so a parsed config always holds "driver" or "engine"). Same results in each.
    method_loops: Literal["auto", "driver", "engine"] = "auto"
    max_restarts: Annotated[int, _at_most(MAX_RESTARTS, "restarts of an engine actor")] = Field(default=3, ge=0)
    start_timeout_s: float = Field(default=900.0, gt=0)  # model load + compile, or waiting for hosts
    request_timeout_s: float | None = Field(default=None, gt=0)  # one LLM call; a timeout fails the attempt
    page_budget: float | int | None = Field(default=None, gt=0)  # fraction of device memory or bytes for the KV cache
    mesh: dict[str, int] | None = None
    options: dict[str, Any] = Field(default_factory=dict)  # further engine config fields


# The crossover `memloop bench scale` measured (docs/jobs.md, "Scale"): up to this many method loops
# in all (hosts x max_in_flight; 16 hosts x 32 loops) the driver's threads keep the engines >= 90%
# busy; above it the loops' rendering, parsing and shard writing saturate the driver, and they go
# beside the engines.
AUTO_ENGINE_ABOVE_LOOPS = 512


def auto_placement(actors: int, max_in_flight: int, model_kind: str) -> Literal["driver", "engine"]:
    """Where `method_loops: auto` runs the loops: beside the engines when there are more than
    `AUTO_ENGINE_ABOVE_LOOPS` loops over at least two engine actors, else in the driver (one host
    gains nothing from a process of its own, and an endpoint has no engine actors to sit beside)."""
    if model_kind != "engine" or actors < 2:
        return "driver"
    return "engine" if actors * max_in_flight > AUTO_ENGINE_ABOVE_LOOPS else "driver"


class SamplingSpec(_Strict):
    """Run-wide sampling overrides. A field left out (None) keeps each method's own default (CoK writes up to
    1024 tokens, most methods 512); only the fields set here are laid over it, for every method (as Inspect's
    GenerateConfig merges). Each is bounded by `memloop.sampling.check`, as a request's is."""

    max_tokens: MaxTokens | None = None  # strict: YAML's true is not 1
    temperature: Temperature | None = None
    top_k: TopK | None = None
    top_p: TopP | None = None

    def overrides(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class JudgeSpec(_Strict):
    name: str
    options: dict[str, Any] = Field(default_factory=dict)
    tasks: list[str] | None = None  # judge only these tasks (default: the judge's own tasks)


class JudgeModelSpec(_Strict):
    """The model LLM judges call. `kind: engine` without `weights`: the model under test judges its
    own outputs (its engine actors or endpoint); `kind: engine` with `weights`: a judge engine of its
    own on those weights (a model name such as qwen2.5-coder-1.5b, or a path), started beside the
    run's engines; `kind: openai`: an OpenAI-compatible endpoint. `--judge-model NAME` on the command
    line is read by `memloop.jobs.run.model_names.judge_section`."""

    kind: Literal["engine", "openai"] = "engine"
    weights: str | None = None
    endpoint: EndpointSpec | None = None

    @model_validator(mode="after")
    def _endpoint_given(self) -> "JudgeModelSpec":
        if self.kind == "openai" and self.endpoint is None:
            raise ValueError("kind 'openai' needs `endpoint` with base_url and model")
        if self.kind == "openai" and self.weights is not None:
            raise ValueError("kind 'openai' serves its own model: remove `weights`")
        return self


class RunConfig(_Strict):
    name: str = "run"
    tag: str | None = None  # part of the run id: e.g. the date, for runs that must compute afresh
    # local directory or gs://bucket/prefix; left out: $MEMLOOP_LOG_DIR (also `memloop view`'s folder), else ./runs
    output: str = Field(default_factory=lambda: os.environ.get("MEMLOOP_LOG_DIR") or "./runs")
    datasets: list[DatasetSpec] = Field(min_length=1)
    methods: list[MethodSpec] = Field(min_length=1)
    model: ModelSpec = Field(default_factory=ModelSpec)
    # several models: one run per model (`model_configs`), each with its own run id; a string is `weights`
    models: list[ModelSpec] | None = Field(default=None, min_length=1)
    engine: EngineSpec = Field(default_factory=EngineSpec)
    sampling: SamplingSpec = Field(default_factory=SamplingSpec)
    judges: list[JudgeSpec] = Field(default_factory=list)
    judge_model: JudgeModelSpec = Field(default_factory=JudgeModelSpec)
    # the model that extracts seed 001's book graph (kg-retrieval's `extraction_model: judge`) when it is not the
    # judge model, as the paper's were two (gpt-3.5-turbo extracted the graph, Mixtral 8x7B judged KGScore):
    # an endpoint (`kind: openai`), the model under test (`kind: engine` without weights) or the judge engine's
    # weights; left out, the judge model extracts
    graph_model: JudgeModelSpec | None = None
    # MAX_REPEATS is also below memloop.eval.asking.RETRY_SEED_STRIDE (1 << 20)
    repeats: Annotated[int, _at_most(MAX_REPEATS, "repeats", "lower it (the papers use 1 to 5)")] = Field(
        default=1, ge=1
    )
    # the first repeat's seed: a signed 64-bit integer, as every sampling seed is (memloop.sampling)
    seed: Annotated[
        int,
        _at_most(
            MAX_SEED,
            "as the run's seed",
            "lower it (each repeat samples with seed + repeat, which must fit in 64 bits)",
        ),
    ] = Field(default=0, ge=SEED_MIN)
    retries: Annotated[int, _at_most(MAX_RETRIES, "retries of a sample")] = Field(
        default=2, ge=0
    )  # attempts after the first, per sample
    judge_cpus: float = Field(default=0.5, gt=0)
    response_cache: str | None = None  # a directory: identical requests are answered from it (engine or endpoint)
    flush_units: Annotated[int, _at_most(MAX_FLUSH_UNITS, "units per shard")] = Field(
        default=16, ge=1
    )  # write a shard every this many finished units ...
    flush_s: float = Field(default=20.0, gt=0)  # ... or this many seconds
    shard_rows: int = Field(default=50_000, ge=1)  # at the end of a run, small shards merge up to this many rows
    # the papers' tables `memloop report` lays out from this run (memloop.jobs.results.paper_tables; not in the run id)
    paper_tables: list[str] = Field(default_factory=list)
    # what chunk sizes (`chunk_tokens`) and the methods' token budgets (K, summary limits) count in: the run
    # model's tokenizer, or cl100k_base as seed 000 and the official BooookScore code count; a step's fit
    # in the model's window is counted in the model's own tokens either way
    count_tokens: Literal["model", "cl100k"] = "model"
    # a record of the command-line / API overrides this config was made with (`with_overrides`), kept in the
    # manifest's config; not hashed itself: what they change (sampling, options, seed, model) is
    overrides: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _graph_model_served(self) -> "RunConfig":
        g, j = self.graph_model, self.judge_model
        if (
            g is not None
            and g.kind == "engine"
            and g.weights is not None
            and (j.kind, j.weights) != ("engine", g.weights)
        ):
            raise ValueError(
                f"graph_model: an engine on weights of its own ({g.weights}) is not started beside the judge "
                "engine; serve that model (`memloop serve`) and give it as `kind: openai` with its endpoint, "
                "or use the judge model's weights"
            )
        return self

    @field_validator("name", "tag")
    @classmethod
    def _slug(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}", v):
            raise ValueError("use letters, digits, '.', '_' and '-' only (at most 64 characters)")
        return v

    @field_validator("paper_tables")
    @classmethod
    def _known_tables(cls, v: list[str]) -> list[str]:
        known = paper_table_names()
        unknown = [t for t in v if t not in known]
        if unknown and not known:
            raise ValueError(
                "no paper tables are registered in this process: import memloop.jobs.results.paper_tables "
                "before reading a config that names some (the memloop CLI and memloop.run do)"
            )
        if unknown:
            raise ValueError(f"unknown paper table(s) {unknown}; use some of {', '.join(sorted(known))}")
        return v

    @field_validator("output")
    @classmethod
    def _output_given(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("is empty; give a directory (e.g. ./runs) or gs://bucket/prefix")
        return v

    @field_validator("methods")
    @classmethod
    def _unique_method_keys(cls, v: list[MethodSpec]) -> list[MethodSpec]:
        keys = [m.key for m in v]
        dup = sorted({k for k in keys if keys.count(k) > 1})
        if dup:
            raise ValueError(f"methods {dup} appear twice; give each a distinct `label`")
        return v

    @field_validator("judges")
    @classmethod
    def _judges_write_apart(cls, v: list[JudgeSpec]) -> list[JudgeSpec]:
        """Two entries writing the same `judge` rows (a judge listed twice, or booookscore beside
        booookscore-batched) would blend into one figure, or count every score twice."""
        from memloop.eval.errors import JudgeError
        from memloop.eval.judges import get_judge

        writers: dict[str, list[str]] = {}
        for j in v:
            try:
                writers.setdefault(get_judge(j.name).row_name, []).append(j.name)
            except JudgeError:
                continue  # an unknown name is reported by the plan, with the known ones
        twice = {row: names for row, names in writers.items() if len(names) > 1}
        if twice:
            row, names = sorted(twice.items())[0]
            raise ValueError(
                f"{' and '.join(repr(n) for n in names)} both write `judge={row}` rows, which would "
                "merge into one figure; list each judge once (to judge a run again with other options, "
                "use `memloop rescore RUN --judge NAME`)"
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _model_or_models(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("models") is None:
            return data
        if data.get("model") not in (None, {}, ModelSpec().model_dump()):
            raise ValueError("give `model` (one model) or `models` (a run per model), not both")
        models = data["models"]
        if isinstance(models, list):  # a bare name or path is the engine's weights
            data = dict(data, models=[{"weights": m} if isinstance(m, str) else m for m in models])
        return data

    @model_validator(mode="before")
    @classmethod
    def _resolve_auto_placement(cls, data: Any) -> Any:
        """`engine.method_loops: auto` (or left out) becomes the placement `auto_placement` picks."""
        if not isinstance(data, dict) or data.get("models") is not None:
            return data  # a model set: each model's own config picks its placement (`model_configs`)
        engine, model = data.get("engine") or {}, data.get("model") or {}
        if isinstance(engine, EngineSpec):
            engine = engine.model_dump()
        if not isinstance(engine, dict) or engine.get("method_loops", "auto") != "auto":
            return data
        kind = (
            model.kind
            if isinstance(model, ModelSpec)
            else (model.get("kind", "engine") if isinstance(model, dict) else "engine")
        )
        try:
            actors, loops = int(engine.get("actors", 1)), int(engine.get("max_in_flight", 8))
        except (TypeError, ValueError):
            return data  # the field validators name the bad value
        return dict(data, engine=dict(engine, method_loops=auto_placement(actors, loops, kind)))

    @model_validator(mode="after")
    def _loops_need_engines(self) -> "RunConfig":
        if self.engine.method_loops == "engine" and any(m.kind != "engine" for m in self.models or [self.model]):
            raise ValueError(
                "`engine.method_loops: engine` runs the loops next to memloop's engine actors; "
                "with `model.kind: openai` there are none: use `method_loops: driver`"
            )
        return self

    def seeds(self) -> list[int]:
        """One seed per repeat, derived from the base seed."""
        return [self.seed + i for i in range(self.repeats)]


def model_label(m: ModelSpec) -> str:
    """A short name of a model for run names: the endpoint's model, the weights' file or short name."""
    if m.kind == "openai" and m.endpoint is not None:
        text = m.endpoint.model
    elif m.weights is None:
        text = "default"
    else:
        text = Path(m.weights).name
        text = text[: -len(".gguf")] if text.endswith(".gguf") else text
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "model"


def model_configs(cfg: RunConfig) -> list[RunConfig]:
    """The runs a config stands for: itself, or with `models:` one config per model, each named
    `{name}-{model label}` (so each has its own run id and directory) with that model as `model`."""
    if not cfg.models:
        return [cfg]
    labels = [model_label(m) for m in cfg.models]
    out = []
    for i, (m, label) in enumerate(zip(cfg.models, labels)):
        if labels.count(label) > 1:
            label = f"{label}-{i}"
        data = cfg.model_dump()
        data.update(models=None, model=m.model_dump(), name=f"{cfg.name}-{label}"[:64].rstrip("-."))
        out.append(parse_config(data, f"`models.{i}`"))
    keys = [c.model for c in out]
    dup = [i for i, k in enumerate(keys) if keys.index(k) != i]
    if dup:
        raise ConfigError(f"`models.{dup[0]}` repeats `models.{keys.index(keys[dup[0]])}`; list each model once")
    return out


def _format_error(exc: ValidationError, source: str) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"`{loc}`: {raised_by_check(err) or err['msg']}")  # a sampling bound: its own message
    return f"{source}: " + "; ".join(parts)


def parse_config(data: dict[str, Any], source: str = "config") -> RunConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the config must be a YAML mapping with `datasets` and `methods`")
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc, source)) from None


def with_overrides(
    cfg: RunConfig,
    source: str = "config",
    *,
    output: str | None = None,
    tag: str | None = None,
    limit: int | None = None,
    max_chunks: int | None = None,
    repeats: int | None = None,
    model: str | None = None,
    judge_model: str | None = None,
    model_base_url: str | None = None,
    judge_model_base_url: str | None = None,
    settings: list[str] | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    seed: int | None = None,
) -> RunConfig:
    """The config with command-line overrides applied and validated again (`--limit N` keeps at most
    N samples of every dataset, `--max-chunks N` the first N chunks of each sample, `--repeats N`
    sets the repeats, `--model M` the model: engine weights (a short name or a path) or an Inspect-style
    `PROVIDER/NAME` (`memloop.jobs.run.model_names`); `-S dotted.path=value` any setting (`memloop.jobs.run.overrides`),
    `--temperature`, `--max-tokens` and `--seed` the common ones). Every override is part of the run id
    like the same setting in the file, and is recorded in the config's `overrides`. With them a paper's
    config runs reduced: `--limit 2 --max-chunks 2 --repeats 1`, or on another model:
    `--model qwen2.5-coder-0.5b`, `--model openai/NAME --model-base-url http://127.0.0.1:8000/v1`."""
    from memloop.jobs.run.model_names import judge_section, model_section
    from memloop.jobs.run.overrides import apply_settings

    data = cfg.model_dump()
    given: list[str] = []
    if judge_model is not None:  # `--judge-model NAME`: part of the run id like the file's judge_model
        data["judge_model"] = judge_section(judge_model, judge_model_base_url)
        given.append(f"judge_model={judge_model}" + (f" ({judge_model_base_url})" if judge_model_base_url else ""))
    elif judge_model_base_url is not None:
        raise ConfigError("--judge-model-base-url goes with --judge-model openai/NAME (or vllm/NAME, sglang/NAME)")
    if model is not None and cfg.models:  # one model named on the command line replaces the config's list
        data.update(models=None, model=model_section(model, model_base_url))
    elif model is not None:
        data["model"] = model_section(model, model_base_url, data["model"])
    elif model_base_url is not None:
        raise ConfigError("--model-base-url goes with --model openai/NAME (or vllm/NAME, sglang/NAME)")
    if model is not None:
        given.append(f"model={model}" + (f" ({model_base_url})" if model_base_url else ""))
    if output is not None:
        data["output"] = output
    if tag is not None:
        data["tag"] = tag
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--limit must be at least 1 (got {limit})")
        for d in data["datasets"]:
            d["limit"] = min(d["limit"] or limit, limit)
        given.append(f"limit={limit}")
    if max_chunks is not None:
        if max_chunks < 1:
            raise ConfigError(f"--max-chunks must be at least 1 (got {max_chunks})")
        for d in data["datasets"]:
            d["options"]["max_chunks"] = min(d["options"].get("max_chunks") or max_chunks, max_chunks)
        given.append(f"max_chunks={max_chunks}")
    if repeats is not None:
        if repeats < 1:
            raise ConfigError(f"--repeats must be at least 1 (got {repeats})")
        data["repeats"] = repeats
        given.append(f"repeats={repeats}")
    flags = {"sampling.temperature": temperature, "sampling.max_tokens": max_tokens, "seed": seed}
    pairs = [f"{k}={v}" for k, v in flags.items() if v is not None] + list(settings or [])
    apply_settings(data, pairs)
    given += pairs
    if given:
        data["overrides"] = list(data.get("overrides") or []) + given
    return parse_config(data, source + (" with overrides " + " ".join(pairs) if pairs else ""))


# A run config is a few hundred YAML nodes; aliases (`*name`) may repeat a subtree, and nested ones
# multiply (the "billion laughs"): a document that expands beyond this is refused before it is built.
MAX_CONFIG_NODES = 100_000


def _expanded_nodes(root: yaml.Node) -> int:
    """The node count of the document with every alias written out (memoised over the shared nodes,
    so counting is linear in the document; stops early past MAX_CONFIG_NODES)."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node, depth: int = 0) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        sizes[key] = MAX_CONFIG_NODES + 1  # a node met again while counting it: a recursive alias
        n = 1
        if isinstance(node, yaml.SequenceNode):
            for child in node.value:
                n += size(child, depth + 1)
                if n > MAX_CONFIG_NODES:
                    break
        elif isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                n += size(k, depth + 1) + size(v, depth + 1)
                if n > MAX_CONFIG_NODES:
                    break
        sizes[key] = n
        return n

    return size(root)


def _load_yaml(text: str, p: Path) -> Any:
    """yaml.safe_load, refusing alias expansion beyond MAX_CONFIG_NODES anywhere in the document."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node) > MAX_CONFIG_NODES:
            raise ConfigError(
                f"{p}: expands to over {MAX_CONFIG_NODES} YAML nodes through aliases (*name) or a "
                "recursive alias; a run config is small: write the repeated parts out"
            )
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(
            f"{p}: nests lists or mappings too deeply to read; a run config is a few levels deep: flatten it"
        ) from None
    finally:
        loader.dispose()


def load_config(path: str | os.PathLike[str]) -> RunConfig:
    """Read and validate a YAML run config (structure only; see `check_config` for the environment)."""
    p = Path(path)
    if p.is_dir():
        raise ConfigError(f"{p} is a directory; pass the path of a YAML run config file (e.g. jobs/configs/demo.yaml)")
    if not p.is_file():
        raise ConfigError(f"config file {p} does not exist; pass the path of a YAML run config")
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{p}: not UTF-8 text (byte {exc.start}); save the config as UTF-8 YAML") from None
    try:
        data = _load_yaml(text, p)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{p}: not valid YAML ({where}{problem}); fix the syntax") from None
    return parse_config(data, str(p))


def resolve_path(path: str) -> Path:
    """Dataset and weight paths are relative to the current directory (where `memloop run` runs)."""
    return Path(os.path.expanduser(path)).resolve()
