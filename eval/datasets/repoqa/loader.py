"""RepoQA-style retrieval (seed 002): find a function in a real repository from its description."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from memloop.eval.datasets.errors import DatasetError
from memloop.eval.datasets.repoqa.needles import (
    FIELDS,
    QUERY,
    choose_needles,
    describe_from_cache,
    describe_from_code,
    describe_with_llm,
)
from memloop.eval.datasets.repoqa.release import is_release, load_release
from memloop.eval.datasets.repoqa.source import chunk_of, chunk_starts, dependency_order, pack_lines, read_package
from memloop.eval.datasets.sample import Sample, slug
from memloop.eval.tokens import TokenizerLike, token_counter


def repository_text(files) -> str:
    """The files in dependency order, each introduced by a `# file: <path>` line."""
    return "".join(f"# file: {f.path}\n{f.text if f.text.endswith(chr(10)) else f.text + chr(10)}\n" for f in files)


# Five repositories of standard-library code, always installed, 100k-135k cl100k tokens each (the paper's
# RepoQA contexts average 121k): one large package, or two packages laid out as one repository ("a+b").
DEFAULT_PACKAGES = ("asyncio", "email+http", "tkinter+logging", "xml+unittest", "multiprocessing+lib2to3")


def _read_repository(spec: str | Path) -> list:
    """The source files of one repository: a package, a folder, or packages joined with '+'."""
    parts = str(spec).split("+") if isinstance(spec, str) and not Path(spec).exists() else [spec]
    return [f for part in parts for f in read_package(part)]


def load_repoqa(
    packages: Sequence[str | Path] | str = DEFAULT_PACKAGES,
    needles: int = 10,
    seed: int = 0,
    chunk_tokens: int = 8192,
    tokenizer: TokenizerLike = None,
    llm: Any = None,
    describer_model: str | None = None,
    description_cache: str | Path | None = None,
    require_docstring: bool = True,
    language: str = "python",
    limit: int | None = None,
) -> list[Sample]:
    """`needles` samples per repository (an installed package name, packages joined with '+', or a folder of
    .py files); the default gives 50 samples, the size of PRISM's RepoQA evaluation. A path to RepoQA's
    release file (`repoqa-*.json`) reads the real benchmark instead (its `language` repositories, with
    their own needles and descriptions).

    The repository is laid out in dependency order and cut into chunks of whole lines; each sample's
    query describes one needle function in the paper's form, and the gold is its exact name. With an
    `llm`, descriptions are the LLM's (cached in `description_cache`, default the memloop cache), checked
    for leaked identifiers; with `describer_model` (a config's way), the answers that model gave earlier
    are read from that cache; without either, or when a description leaks, they are rule-based and
    name-free.
    """
    if isinstance(packages, (str, Path)):
        packages = [packages]
    count = token_counter(tokenizer)
    if len(packages) == 1 and is_release(packages[0]):
        return load_release(packages[0], chunk_tokens, count, language, limit)
    if (llm is not None or describer_model is not None) and description_cache is None:
        from memloop.eval.assets import cache_root

        description_cache = cache_root() / "repoqa-descriptions"
    samples: list[Sample] = []
    for package in packages:
        files = dependency_order(_read_repository(package))
        text = repository_text(files)
        chunks = tuple(pack_lines(text, chunk_tokens, count))
        offsets = chunk_starts(chunks)
        # rule-based descriptions take their purpose from the docstring: needles without one only when a
        # model describes them
        for needle in choose_needles(
            files, needles, seed, require_docstring=require_docstring or (llm is None and describer_model is None)
        ):
            if llm is not None:
                description, describer = describe_with_llm(needle, llm, description_cache)
            elif describer_model is not None:
                description, describer = describe_from_cache(needle, describer_model, description_cache)
            else:
                description, describer = describe_from_code(needle), "code"
            at = text.index(f"# file: {needle.file.path}\n") + len(f"# file: {needle.file.path}\n")
            at += sum(len(line) for line in needle.file.text.splitlines(keepends=True)[: needle.node.lineno - 1])
            chunk_index = chunk_of(offsets, at)
            samples.append(
                Sample(
                    id=f"repoqa/{slug(str(package))}/{needle.qualname}",
                    task="repoqa",
                    chunks=chunks,
                    query=QUERY.format(**description),
                    gold=needle.name,
                    metadata={
                        "package": str(package),
                        "file": needle.file.path,
                        "qualname": needle.qualname,
                        "lineno": needle.node.lineno,
                        "description": description,
                        "needle_chunk": chunk_index,
                        "describer": describer,
                        "chunk_tokens": chunk_tokens,
                    },
                )
            )
    return samples[:limit]


WAITING = "code fallback (no description by "  # a describer's label while no answer of its model is cached


def waiting_for_description(sample: Sample) -> str | None:
    """The describer model a sample's fallback query waits for (no answer of it cached), or None."""
    describer = str(sample.metadata.get("describer") or "")
    if sample.task != "repoqa" or not describer.startswith(WAITING):
        return None
    return describer[len(WAITING) :].split(" cached in ", 1)[0]


def describe_sample(sample: Sample, llm: Any, description_cache: str | Path | None = None) -> Sample:
    """`sample` with its needle described by `llm` (whose `name` is the cache's model name, the config's
    `describer_model`), the answer cached per needle as it comes (a run stopped half-way resumes from the
    cache); a description that leaks or copies falls back as `describe_with_llm` says."""
    from dataclasses import replace

    from memloop.eval.datasets.repoqa.needles import Needle, _functions

    if description_cache is None:
        from memloop.eval.assets import cache_root

        description_cache = cache_root() / "repoqa-descriptions"
    meta = sample.metadata
    files = [f for f in _read_repository(meta["package"]) if f.path == meta["file"]]
    found = [
        (q, node, m)
        for f in files
        for q, node, m in _functions(f)
        if q == meta["qualname"] and node.lineno == meta["lineno"]
    ]
    if not found:
        raise DatasetError(
            f"sample {sample.id}: its needle {meta['qualname']} is no longer at {meta['file']}:"
            f"{meta['lineno']} (the package changed); reload the dataset"
        )
    q, node, is_method = found[0]
    needle = Needle(node.name, q, files[0], node, is_method)
    description, describer = describe_with_llm(needle, llm, description_cache)
    return replace(
        sample, query=QUERY.format(**description), metadata={**meta, "description": description, "describer": describer}
    )


__all__ = ["load_repoqa", "repository_text", "FIELDS", "DEFAULT_PACKAGES", "describe_sample", "waiting_for_description"]
