"""Where an output lives: a local directory or gs://bucket/prefix opened as its object store, and names
joined under it the way each kind spells them.
"""

from __future__ import annotations

from pathlib import Path

from memloop.jobs.errors import StorageError
from memloop.jobs.store.gcs import GCSStore
from memloop.jobs.store.local import LocalStore
from memloop.jobs.store.objects import Store


def open_store(uri: str) -> Store:
    if uri.startswith("gs://"):
        return GCSStore(uri)
    if "://" in uri:
        hint = (
            f"; for a local directory write the path without the scheme ({uri[len('file://') :]})"
            if uri.startswith("file://")
            else "; write a local directory or gs://BUCKET/PREFIX"
        )
        raise StorageError(f"output {uri!r}: only local paths and gs://bucket/prefix are supported{hint}")
    return LocalStore(uri)


def join_uri(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}" if base.startswith("gs://") else str(Path(base).expanduser().resolve() / name)
