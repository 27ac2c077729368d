"""Hugging Face hub datasets: a hub id (`owner/name`) resolved to a local snapshot, then read as a local
dataset directory.

The snapshot comes from `huggingface_hub.snapshot_download`, which fetches over the network and
otherwise answers from the HF hub cache (`$HF_HOME/hub`, `$HF_HUB_CACHE`) — so a run with the
data cached needs no network, and one without either fails with `HubDataUnavailableError`, whose
message says how to get the data. `datasets.load_dataset` alone cannot do the offline half: offline it
only reads its own prepared-Arrow cache, never the hub cache.

A pinned `revision` (a commit, tag or branch such as `refs/convert/parquet`) and `config_name` (the
dataset's configuration, e.g. arXiv's `document` or `section`) are passed through; the commit the
snapshot resolved to is returned so that loaders can record what was read.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from memloop.eval.datasets.errors import DatasetNotFoundError

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class HubDataUnavailableError(DatasetNotFoundError):
    """A hub dataset is neither reachable over the network nor in the local HF cache."""


def is_hub_id(source: str | Path) -> bool:
    """True for `owner/name` that is not an existing local path (a local path always wins)."""
    return isinstance(source, str) and bool(_HUB_ID.match(source)) and not Path(source).exists()


@dataclass(frozen=True)
class HubSnapshot:
    repo_id: str
    revision: str | None  # as asked for
    commit: str  # the commit the snapshot is of
    path: Path


def _split_patterns(split: str) -> list[str]:
    """Files worth fetching for one split: the card (which may declare configs) and the split's files.
    arXiv names its validation files `val`, so both spellings are kept for it."""
    names = {split, "val"} if split in ("validation", "val") else {split}
    return ["README.md", "*.json", *(f"*{n}*" for n in sorted(names))]


def download_hint(repo_id: str, revision: str | None, split: str = "test") -> str:
    rev = f" --revision {revision}" if revision else ""
    include = " ".join(f'"{p}"' for p in _split_patterns(split))
    return (
        f"on a machine with network run `hf download {repo_id} --repo-type dataset{rev} --include {include}` "
        "(huggingface_hub's CLI; "
        "older versions: `huggingface-cli download`), then copy its HF cache "
        f"($HF_HOME/hub/datasets--{repo_id.replace('/', '--')}) here or point HF_HOME at it; or pass a local "
        "file or a local copy of the dataset's repository as `path`"
    )


def hub_snapshot(repo_id: str, revision: str | None = None, split: str = "test") -> HubSnapshot:
    """The local snapshot of `repo_id` at `revision` holding `split` (network, else the HF cache)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    try:
        path = Path(
            snapshot_download(repo_id, repo_type="dataset", revision=revision, allow_patterns=_split_patterns(split))
        )
    except HFValidationError as exc:
        raise DatasetNotFoundError(
            f"{repo_id!r} is not a valid hub dataset id ({exc}): give owner/name or a local path"
        ) from None
    except Exception as exc:  # offline, not cached, unknown repo or revision: all end the same way for the user
        raise HubDataUnavailableError(
            f"hub dataset {repo_id!r}"
            + (f" at revision {revision!r}" if revision else "")
            + f" could not be fetched and is not in the local Hugging Face cache ({type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}); "
            + download_hint(repo_id, revision, split)
        ) from None
    return HubSnapshot(repo_id, revision, path.name, path)


def load_local_dataset(directory: Path, split: str, config_name: str | None = None) -> Any:
    """A dataset repository's files on disk (a hub snapshot or a clone) as a `datasets.Dataset` of one split.

    A configuration is looked up in the card first; the parquet-conversion layout
    (`<config>/<split>/*.parquet`, no card) is read from the configuration's folder."""
    import datasets

    base, name = directory, config_name
    if config_name and (directory / config_name).is_dir() and not _card_names(directory, config_name):
        base, name = directory / config_name, None
    try:
        ds = datasets.load_dataset(str(base), name, split=split, cache_dir=_prepared_cache(base))
    except ValueError as exc:  # an unknown config or split
        raise DatasetNotFoundError(
            f"{directory}: cannot read split {split!r}"
            + (f" of configuration {config_name!r}" if config_name else "")
            + f" ({exc}); check `split` and `config_name`"
        ) from None
    except FileNotFoundError as exc:
        raise DatasetNotFoundError(f"{directory}: no data files for split {split!r} ({exc})") from None
    return ds


def _prepared_cache(directory: Path) -> str:
    """Where `datasets` keeps the Arrow it prepares from `directory`: a folder per state of its files.

    `datasets` keys that cache by the folder's name and its card's file patterns, not by the files: a
    second copy named alike (`./mab` elsewhere, or a snapshot whose files changed) would be read from the
    first one's Arrow, silently stale. The key here is the folder's resolved path and every file's
    name, size and modification time (a hub snapshot's files are links to immutable blobs)."""
    import datasets

    h = hashlib.sha256(str(directory.resolve()).encode())
    for f in sorted(p for p in directory.rglob("*") if p.is_file() and ".git" not in p.parts):
        st = f.stat()
        h.update(f"{f.relative_to(directory)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return str(Path(datasets.config.HF_DATASETS_CACHE) / "memloop-local" / h.hexdigest()[:20])


def _card_names(directory: Path, config_name: str) -> bool:
    card = directory / "README.md"
    return (
        card.is_file()
        and re.search(rf"config_name:\s*['\"]?{re.escape(config_name)}\b", card.read_text(errors="replace")) is not None
    )


def hub_records(
    repo_id: str, split: str, revision: str | None = None, config_name: str | None = None
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, row) of one split of a hub dataset; the location names the commit read."""
    snap = hub_snapshot(repo_id, revision, split)
    ds = load_local_dataset(snap.path, split, config_name)
    for i, row in enumerate(ds):
        yield f"{repo_id}@{snap.commit}[{split}][{i}]", dict(row)
