"""From a run config to units of work: samples loaded, methods matched to tasks, repeats expanded.

A unit is one (dataset, sample, method, repeat); it is what the driver schedules, retries, and
what the storage records exactly once. Everything here runs before any actor starts, so a bad
config fails early with the offending field named.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memloop.eval.datasets.hub import HubDataUnavailableError, is_hub_id
from memloop.eval.datasets.sample import Sample
from memloop.eval.errors import EvalError
from memloop.jobs.errors import ConfigError, DataUnavailableError
from memloop.jobs.run.chunk_fit import (
    check_chunks_fit,
    chunk_tokenizer,
    loader_takes,
    loader_takes_tokenizer,
    model_encoder,
)
from memloop.jobs.run.config import DatasetSpec, JudgeSpec, MethodSpec, RunConfig, resolve_path
from memloop.jobs.run.methods import method_settings, method_tasks, validate_methods
from memloop.jobs.store.units import unit_key


@dataclass(frozen=True)
class Unit:
    key: str
    dataset: DatasetSpec
    sample: Sample
    method: MethodSpec
    repeat: int
    seed: int
    settings: dict[str, Any]  # the method's settings (sampling merged with the method's options)
    judges: tuple[JudgeSpec, ...]

    @property
    def chunk_tokens(self) -> int | None:
        v = self.sample.metadata.get("chunk_tokens", self.dataset.options.get("chunk_tokens"))
        return int(v) if v is not None else None

    @property
    def input_tokens(self) -> int:
        """The sample's input in cl100k_base tokens (the papers' tokenizer), whatever model reads it:
        what input-length buckets are made of (the long-context suites' convention)."""
        from memloop.eval.tokens import cl100k_count

        return sum(cl100k_count(c) for c in self.sample.chunks)


def _path_option(task: str, path: str) -> dict[str, Any]:
    """Loaders name their source argument differently (path, source ...): pass it by its own name."""
    from memloop.eval.datasets import get_loader

    first = next(iter(inspect.signature(get_loader(task)).parameters))
    return {first: path}


def load_samples(spec: DatasetSpec, index: int, tokenizer: str | None = None) -> list[Sample]:
    """The dataset's samples; `tokenizer` (the run model's, `memloop.jobs.run.chunk_fit.chunk_tokenizer`) is what its
    `chunk_tokens` count in, unless the dataset's options name one."""
    from memloop.eval.datasets import load_dataset

    field = f"datasets.{index}"
    options = {k: v for k, v in spec.options.items() if k != "max_chunks"}
    if spec.options.get("max_chunks") is not None and loader_takes("max_chunks", spec.task):
        options["max_chunks"] = int(spec.options["max_chunks"])  # the loader stops chunking there
    if tokenizer is not None and "tokenizer" not in options and loader_takes_tokenizer(spec.task):
        options["tokenizer"] = model_encoder(tokenizer)
    try:
        if spec.synthetic is not None:  # the task's own generator, through its loader
            samples = load_dataset(spec.task, synthetic=True, **spec.synthetic, **options)
        elif spec.path is not None:
            source = spec.path if is_hub_id(spec.path) else str(resolve_path(spec.path))
            samples = load_dataset(spec.task, **_path_option(spec.task, source), **options)
        else:  # loaders that build their data from options (installed packages, built-in databases)
            samples = load_dataset(spec.task, **options)
    except HubDataUnavailableError as exc:
        raise DataUnavailableError(f"`{field}`: {exc}") from None
    except EvalError as exc:
        raise ConfigError(f"`{field}`: {exc}") from None
    if spec.ids is not None:
        by_id = {s.id: s for s in samples}
        missing = [i for i in spec.ids if i not in by_id]
        if missing:
            raise ConfigError(f"`{field}.ids`: {missing} not in the dataset (it has e.g. {list(by_id)[:3]})")
        samples = [by_id[i] for i in spec.ids]
    if spec.limit is not None:
        samples = samples[: spec.limit]
    max_chunks = spec.options.get("max_chunks")
    if max_chunks is not None:  # a short excerpt: the first chunks of each sample (and their gold)
        from memloop.eval.datasets import truncate

        samples = [truncate(s, int(max_chunks)) for s in samples]
    return samples


def judges_for(cfg: RunConfig, d: DatasetSpec, samples: list[Sample]) -> tuple[JudgeSpec, ...]:
    """The one rule matching judges to a dataset: the tasks the config gives the judge (`judges[].tasks`),
    else the judge's own tasks, else (judges that declare none, such as ROUGE and KGScore) any task; a
    judge that needs something in the gold (`JudgeInfo.gold`: a reference summary) must find it in every
    sample it would judge, or the run stops here, before any work, naming the samples without it."""
    from memloop.eval.judges import get_judge

    out = []
    for i, j in enumerate(cfg.judges):
        info = get_judge(j.name)
        tasks = j.tasks if j.tasks is not None else info.tasks
        if tasks is not None and d.task not in tasks:
            continue
        if info.gold is not None:
            lacking = [s.id for s in samples if not info.gold.present(s.gold)]
            if lacking:
                raise ConfigError(
                    f"`judges.{i}`: {j.name} scores {info.gold.what} in each sample's gold, and {len(lacking)} of "
                    f"{len(samples)} samples of dataset {d.key!r} carry none (e.g. {lacking[:3]}); "
                    f"{info.gold.remedy}, or keep the judge to other tasks with `judges.{i}.tasks`"
                )
        out.append(j)
    return tuple(out)


def judges_fitting(cfg: RunConfig, mi: int, m: MethodSpec, judges: tuple[JudgeSpec, ...]) -> tuple[JudgeSpec, ...]:
    """The judges that can score method `m`: one that matches structured memories
    (`JudgeInfo.needs_json_memory`) skips a method that keeps a text memory when another judge scores
    it (seed 000's table: `sumie` for all, `sumie-exact` for the JSON methods); a method left with no
    judge that fits is refused before work, instead of failing each of its units after computing it."""
    from memloop.eval.judges import get_judge
    from memloop.eval.methods import method_class

    if not judges or getattr(method_class(m.name), "fmt", None) != "text":
        return judges
    fits = tuple(j for j in judges if not get_judge(j.name).needs_json_memory)
    if not fits:
        j = judges[0]
        i = next(k for k, spec in enumerate(cfg.judges) if spec is j)
        raise ConfigError(
            f"`judges.{i}`: {j.name} matches attribute-value pairs of a JSON memory, and `methods.{mi}` "
            f"({m.name}) keeps a text memory: score it with a judge that reads text (e.g. `sumie`, which "
            f"extracts the pairs with the judge LLM), or use the method's JSON variant"
        )
    return fits


def build_units(cfg: RunConfig, unavailable: list[str] | None = None, weights: Path | None = None) -> list[Unit]:
    """Every unit of the run. With `unavailable` (a dry run) a hub dataset that cannot be reached here is
    left out and its message appended there, instead of stopping the plan. `weights`: the plan's resolved
    model weights (None: resolved from the config where needed)."""
    validate_methods(cfg)
    check_chunks_fit(cfg, weights=weights)
    tokenizer = chunk_tokenizer(cfg, weights)
    loaded = []
    for i, d in enumerate(cfg.datasets):
        try:
            loaded.append((d, load_samples(d, i, tokenizer)))
        except DataUnavailableError as exc:
            if unavailable is None:
                raise
            unavailable.append(str(exc))
            loaded.append((d, []))
    units: list[Unit] = []
    seen: dict[str, int] = {}  # unit key -> the dataset (its index in `datasets`) that produced it
    for mi, m in enumerate(cfg.methods):
        tasks = method_tasks(m)
        matched = [(di, d, ss) for di, (d, ss) in enumerate(loaded) if tasks is None or d.task in tasks]
        if not matched:
            raise ConfigError(
                f"`methods.{mi}`: {m.name} runs on tasks {list(tasks or ())}, none of which is in `datasets`"
            )
        for di, d, samples in matched:
            judges = judges_fitting(cfg, mi, m, judges_for(cfg, d, samples))
            for s in samples:
                for r, seed in enumerate(cfg.seeds()):
                    key = unit_key(d.key, s.id, m.key, r)
                    if seen.get(key) == di:
                        raise ConfigError(
                            f"`datasets.{di}`: {d.key!r} holds sample {s.id!r} twice (two records with "
                            "the same id); remove the duplicate record or give it an id of its own"
                        )
                    if key in seen:
                        raise ConfigError(
                            f"`datasets.{seen[key]}` and `datasets.{di}` both produce sample {s.id!r} "
                            f"under the same name {d.key!r}; give them different files"
                        )
                    seen[key] = di
                    units.append(Unit(key, d, s, m, r, seed, method_settings(cfg, m, seed), judges))
    return units
