"""The run plan: everything a run config means for the environment, worked out once before any work.

`make_plan` checks the config against the registries and the files it names, digests the model
weights and dataset files, derives the run id, translates the model and engine sections into the
engine's own config names, and builds the units. The driver, the manifest row and the CLI read
these values from the plan; nothing is digested or checked twice.

The run id hashes everything that changes results (datasets and their content, methods, model
weights and dtype, sampling, judges and the judge model, repeats and seeds, the result-affecting
code and every prompt template, and an optional `tag`) and nothing that only changes how the work
is carried out (output location, number of actors, concurrency, retries, page budget, mesh).
Re-submitting the same config with the same code therefore resumes the same run; after a code or
template change, or with a new tag, it computes a fresh one.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memloop.jobs.errors import ConfigError
from memloop.jobs.run.config import JudgeSpec, MethodSpec, RunConfig, resolve_path

if TYPE_CHECKING:
    from memloop.engine.engine_config import EngineConfig
    from memloop.jobs.run.workload import Unit


# ---------------------------------------------------------------------------------------------
# content digests


def _digest_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _digest_cache() -> Path:
    return Path(os.environ.get("MEMLOOP_CACHE", Path.home() / ".cache" / "memloop")) / "digests.json"


def content_digest(path: Path) -> str:
    """sha256 of a file, or of a directory's files (names + contents); cached by size and mtime."""
    path = path.resolve()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    cache_file = _digest_cache()
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    h = hashlib.sha256()
    changed = False
    for f in files:
        st = f.stat()
        ck = f"{f}:{st.st_size}:{st.st_mtime_ns}"
        if ck not in cache:
            cache[ck] = _digest_file(f)
            changed = True
        h.update(f.relative_to(path).as_posix().encode() if path.is_dir() else b"")
        h.update(cache[ck].encode())
    if changed:
        try:
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache))
            os.replace(tmp, cache_file)
        except OSError:
            pass  # the cache is an optimisation only
    return h.hexdigest()


def model_weights(cfg: RunConfig) -> Path | None:
    """The run model's file or directory: the bundled default, a short model name (`qwen2.5-coder-0.5b`,
    joined from its packages on first use), or a path relative to the working directory; None when the
    methods call an endpoint. Weights the config names must exist (a ConfigError says what to give).
    A plan resolves them once, here, and hands the path on (`RunPlan.weights`)."""
    if cfg.model.kind == "openai":
        return None
    if cfg.model.weights is None:
        return _resolve_weights(None)  # the bundled model; if it is missing, the engine says how to install it
    from memloop.engine.assets import MODELS
    from memloop.engine.errors import EngineError

    try:
        path = _resolve_weights(cfg.model.weights)
    except EngineError as exc:  # a short name whose packages are missing or corrupt
        raise ConfigError(f"`model.weights`: {exc}") from None
    if not path.exists():
        raise ConfigError(
            f"`model.weights`: {cfg.model.weights} does not exist; give a GGUF file, a model "
            f"directory or a model name ({', '.join(MODELS)})"
        )
    return path


def _resolve_weights(weights: str | None) -> Path:
    from memloop.engine.assets import resolve_model

    return resolve_model(None if weights is None else resolve_path(weights))


def judge_weights_path(cfg: RunConfig) -> Path | None:
    """The weights of the run's own judge engine (`judge_model.weights`), or None: no judge engine."""
    jm = cfg.judge_model
    return _resolve_weights(jm.weights) if jm.kind == "engine" and jm.weights is not None else None


# ---------------------------------------------------------------------------------------------
# checks against the registries and the environment


def check_output(cfg: RunConfig) -> None:
    """Inside a Ray job the working directory is Ray's temporary copy of the uploaded working_dir,
    deleted with the job: a relative output would vanish with it."""
    from memloop.jobs.store.provenance import ray_job_config

    out = cfg.output
    if ray_job_config() is not None and not out.startswith("gs://") and not os.path.isabs(os.path.expanduser(out)):
        raise ConfigError(
            f"`output`: {out!r} is relative, and this driver runs as a Ray job whose working directory "
            f"({Path.cwd()}) is a temporary upload that Ray deletes; give an absolute path on shared "
            "storage or gs://bucket/prefix (e.g. --output gs://my-bucket/memloop)"
        )


def check_config(cfg: RunConfig) -> None:
    """Fail before any work starts: unknown methods, tasks or judges, missing files, unset keys."""
    check_names_and_data(cfg)
    if cfg.model.weights is not None:
        model_weights(cfg)


def check_names_and_data(cfg: RunConfig) -> None:
    """What `check_config` checks but the model's weights (which `make_plan` resolves once for itself):
    the registries' names, judge options, dataset paths and the endpoints' key variables."""
    from memloop.eval.datasets import list_tasks
    from memloop.eval.datasets.textfile import check_data_path
    from memloop.eval.errors import EvalError
    from memloop.eval.judges import get_judge, list_judges
    from memloop.eval.methods import list_methods

    methods, tasks, judges = list_methods(), list_tasks(), list_judges()
    for i, m in enumerate(cfg.methods):
        _check_registered(f"methods.{i}", "method", m, methods, tasks)
    for i, j in enumerate(cfg.judges):
        _check_registered(f"judges.{i}", "judge", j, judges, tasks)
        try:
            get_judge(j.name).check_options(j.options)
        except EvalError as exc:
            raise ConfigError(f"`judges.{i}.options`: {exc}") from None
    from memloop.eval.datasets.hub import is_hub_id

    for i, d in enumerate(cfg.datasets):
        if d.path is None or is_hub_id(d.path):
            continue
        p = Path(os.path.expanduser(d.path))
        if not p.exists() and not p.is_symlink():
            raise ConfigError(
                f"`datasets.{i}.path`: {d.path} does not exist (relative paths are taken from {Path.cwd()}); "
                "fix the path or generate the file first (a Hugging Face hub dataset is given as owner/name)"
            )
        try:  # a FIFO, a device or a symlink loop: refused before anything reads or hashes it
            check_data_path(p, "dataset path")
        except EvalError as exc:
            raise ConfigError(f"`datasets.{i}.path`: {exc}") from None
    ep = cfg.judge_model.endpoint
    if ep is not None and ep.api_key_env and not os.environ.get(ep.api_key_env):
        raise ConfigError(f"`judge_model.endpoint.api_key_env`: environment variable {ep.api_key_env} is not set")
    mep = cfg.model.endpoint
    if mep is not None and mep.api_key_env and not os.environ.get(mep.api_key_env):
        raise ConfigError(f"`model.endpoint.api_key_env`: environment variable {mep.api_key_env} is not set")


def _check_registered(
    where: str, kind: str, entry: MethodSpec | JudgeSpec, registered: list[str], tasks: list[str]
) -> None:
    """A `methods` or `judges` entry (`where`, e.g. "judges.0") names a registered `kind` and known tasks."""
    if entry.name not in registered:
        raise ConfigError(f"`{where}.name`: unknown {kind} {entry.name!r}; registered: {', '.join(registered)}")
    for t in entry.tasks or ():
        if t not in tasks:
            raise ConfigError(f"`{where}.tasks`: unknown task {t!r}; use one of {', '.join(tasks)}")


# ---------------------------------------------------------------------------------------------
# the engine's config, in the engine's own names


def engine_config(cfg: RunConfig, weights: Path) -> dict[str, Any]:
    """The `engine` config dict of the run's actors: the run config's names translated here, so the
    engine speaks only its own (`page_budget` -> `kv_budget`, dtype "auto" -> None, `mesh` -> `tp`)."""
    d: dict[str, Any] = {
        "model": str(weights),
        "dtype": None if cfg.model.dtype == "auto" else cfg.model.dtype,
        **cfg.model.options,
    }
    if cfg.engine.page_budget is not None:
        d["kv_budget"] = cfg.engine.page_budget
    if cfg.engine.mesh is not None:
        axes = set(cfg.engine.mesh) - {"tp"}
        if axes:
            raise ConfigError(
                f"`memloop.engine.model.mesh`: the engine shards over one tensor-parallel axis `tp`; "
                f"remove {sorted(axes)}"
            )
        d["tp"] = cfg.engine.mesh["tp"]
    from memloop.engine.engine_config import OUTPUT_FIELDS

    moved = sorted(set(cfg.engine.options) & set(OUTPUT_FIELDS))
    if moved:  # engine.* is transport and outside the run id; these settings change the outputs
        raise ConfigError(
            f"`engine.options.{moved[0]}` changes the model's outputs, so it belongs under "
            f"`model.options` (part of the run id); move {', '.join(moved)} there"
        )
    d.update(cfg.engine.options)
    return d


def build_engine_config(config: dict[str, Any]) -> "EngineConfig":
    """The engine's config object the actors are built with, and the weights checked here (cheap), so
    unknown settings and unusable model files fail in one line before Ray or any actor starts."""
    from memloop.engine.engine_config import EngineConfig
    from memloop.engine.errors import EngineError
    from memloop.engine.model.weights import check_weights

    try:
        built = EngineConfig.from_dict(config)
    except (EngineError, TypeError, ValueError) as exc:
        raise ConfigError(f"`engine.options`/`model.options`: {exc}") from None
    try:
        check_weights(Path(config["model"]))
    except EngineError as exc:
        raise ConfigError(f"`model.weights`: {exc}") from None
    return built


def judge_weights_digest(cfg: RunConfig) -> str | None:
    """What identifies the judge engine's weights: a model name as it is (its pinned packages fix the
    weights, and a dry run may be on a machine without them), a file or directory by its content."""
    from memloop.engine.assets import MODELS

    w = cfg.judge_model.weights
    if w is None or w in MODELS or cfg.judge_model.kind != "engine":
        return None
    path = resolve_path(w)
    return content_digest(path) if path.exists() else None


def methods_ask_judge(cfg: RunConfig) -> bool:
    """Whether a method of the run asks the judge model for a step of its own."""
    from memloop.eval.methods import get_method
    from memloop.jobs.run.methods import method_settings

    return any(get_method(m.name, **method_settings(cfg, m, cfg.seed)).asks_judge() for m in cfg.methods)


def judge_engine_config(cfg: RunConfig, unavailable: list[str] | None = None) -> "EngineConfig | None":
    """The judge engine's config (its weights, default options) when `judge_model.weights` names one and
    a judge of the run, or a method's step (seed 001's graph extraction), asks an LLM, or it describes RepoQA
    needles (a dataset's `describer_model` is the judge model); None otherwise. A dry run (`unavailable` a list) notes a
    named judge
    model whose packages are not installed here instead of stopping: the machine that runs may have them."""
    from memloop.engine.assets import MODELS
    from memloop.engine.errors import EngineError
    from memloop.eval.judges import get_judge
    from memloop.jobs.run.describe import judge_describes

    g = cfg.graph_model
    extracts_on_judge_engine = methods_ask_judge(cfg) and (g is None or g.weights is not None)
    # RepoQA needles whose `describer_model` is the judge model: the judge engine describes uncached ones
    describes = any(
        d.task == "repoqa"
        and d.options.get("describer_model")
        and judge_describes(cfg, str(d.options["describer_model"]))
        for d in cfg.datasets
    )
    if cfg.judge_model.weights is None or not (
        any(get_judge(j.name).needs_llm for j in cfg.judges) or extracts_on_judge_engine or describes
    ):
        return None
    try:
        path = judge_weights_path(cfg)
        if not path.exists():
            raise ConfigError(
                f"`judge_model.weights`: {cfg.judge_model.weights} does not exist; give a GGUF file, "
                f"a model directory or a model name ({', '.join(MODELS)})"
            )
    except EngineError as exc:  # a short name whose packages are missing: `make models` installs them
        if unavailable is None:
            raise ConfigError(f"`judge_model.weights`: {exc}") from None
        unavailable.append(f"judge model {cfg.judge_model.weights}: {exc}")
        return None
    config: dict[str, Any] = {"model": str(path), "dtype": None}
    if cfg.engine.page_budget is not None:
        config["kv_budget"] = cfg.engine.page_budget
    return build_engine_config(config)


# ---------------------------------------------------------------------------------------------
# identity and run id


def template_hashes(cfg: RunConfig) -> dict[str, dict[str, str]]:
    """sha256 of every prompt template the run's methods and judges use, by method key and `judge:<name>`."""
    from memloop.eval.judges import get_judge
    from memloop.eval.methods import method_class

    out = {m.key: method_class(m.name).template_hashes() for m in cfg.methods}
    out.update({f"judge:{j.name}": get_judge(j.name).template_hashes() for j in cfg.judges})
    return out


def identity(cfg: RunConfig, model_digest: str) -> dict[str, Any]:
    """What the run id hashes: the result-affecting settings, with files replaced by their content
    digest, plus the code that computes results (`memloop.jobs.store.provenance.code_digest`), every prompt
    template's hash and the run's `tag`."""
    from memloop.eval.datasets.hub import is_hub_id
    from memloop.jobs.store.provenance import code_digest

    datasets = []
    for d in cfg.datasets:
        entry = d.model_dump(exclude={"path"})
        if d.path and is_hub_id(d.path):  # named by id; `options.revision` (in the entry) pins its content
            entry["content"] = f"hub:{d.path}"
        else:
            entry["content"] = content_digest(resolve_path(d.path)) if d.path else None
        datasets.append(entry)
    return {
        "datasets": datasets,
        "methods": [m.model_dump() for m in cfg.methods],
        "model": {"weights": model_digest, "dtype": cfg.model.dtype, "options": cfg.model.options},
        "sampling": cfg.sampling.overrides(),
        "judges": [j.model_dump() for j in cfg.judges],
        "judge_model": dict(cfg.judge_model.model_dump(), weights_digest=judge_weights_digest(cfg)),
        **({"graph_model": cfg.graph_model.model_dump()} if cfg.graph_model is not None else {}),
        "seeds": cfg.seeds(),
        "code": code_digest(),
        "templates": template_hashes(cfg),
        "tag": cfg.tag,
        **({"count_tokens": cfg.count_tokens} if cfg.count_tokens != "model" else {}),
    }


def run_id_of(name: str, ident: dict[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()
    return f"{name}-{digest[:12]}"


def run_id(cfg: RunConfig) -> str:
    """The run id of a config (digests the files it names; `make_plan` does this once per run)."""
    return run_id_of(cfg.name, identity(cfg, model_digest(cfg, model_weights(cfg))))


def model_digest(cfg: RunConfig, weights: Path | None) -> str:
    """The model's identity: the content digest of its `weights` (`model_weights`), or an endpoint's URL
    and model name."""
    ep = cfg.model.endpoint
    if cfg.model.kind == "openai" and ep is not None:
        return "endpoint:" + hashlib.sha256(f"{ep.base_url.rstrip('/')}|{ep.model}".encode()).hexdigest()
    assert weights is not None, "a model on the engine has weights (`model_weights` resolves them)"
    return content_digest(weights)


# ---------------------------------------------------------------------------------------------
# the plan


@dataclass(frozen=True)
class RunPlan:
    config: RunConfig
    weights: Path | None  # None when the methods call an endpoint
    model_digest: str
    identity: dict[str, Any]
    run_id: str
    engine_config: "EngineConfig | None"  # what each engine actor is built with; None for an endpoint
    units: list["Unit"]
    unavailable: tuple[str, ...] = ()  # dry run only: hub datasets not reachable here, with how to get them
    judge_engine_config: "EngineConfig | None" = None  # the judge engine's, when judge_model names weights


def make_plan(cfg: RunConfig, dry_run: bool = False) -> RunPlan:
    """Everything that can fail because of the config, before any Ray work starts. A dry run lists hub
    datasets it cannot reach (`RunPlan.unavailable`) instead of stopping: the machine that runs may have
    network or the HF cache."""
    from memloop.jobs.run.workload import build_units

    if cfg.models:
        raise ConfigError(
            f"config {cfg.name!r} names {len(cfg.models)} models (`models:`): that is one run per model; "
            "plan each of `memloop.jobs.run.config.model_configs(cfg)` (`memloop run` does)"
        )
    check_output(cfg)
    check_names_and_data(cfg)
    weights = model_weights(cfg)  # resolved once: the engine config, the digest and the units all use this path
    engine = None
    if weights is not None:
        engine = build_engine_config(engine_config(cfg, weights))
    digest = model_digest(cfg, weights)
    ident = identity(cfg, digest)
    unavailable: list[str] | None = [] if dry_run else None
    units = build_units(cfg, unavailable, weights)
    judge_engine = judge_engine_config(cfg, unavailable)
    return RunPlan(
        cfg, weights, digest, ident, run_id_of(cfg.name, ident), engine, units, tuple(unavailable or ()), judge_engine
    )
