"""The object-store contract every backend keeps (`local.LocalStore`, `gcs.GCSStore`): whole objects put,
got and listed under a root, and the two errors a caller acts on.

A generation is an opaque string that changes whenever an object is written (GCS: the object
generation; local: inode and mtime). Write modes, each what GCS enforces with generation preconditions:
- "create": create-only (`ifGenerationMatch=0`). Shards and manifest rows have unique names, so an
  existing object is a real conflict and raises `ConflictError`.
- "overwrite": last writer wins (no precondition). Report files, compare outputs, exports.
- `Store.replace(name, data, generation)`: compare-and-swap for read-modify-write (the lock).
"""

from __future__ import annotations

from typing import Literal, Protocol

from memloop.jobs.errors import StorageError

WriteMode = Literal["create", "overwrite"]


class ConflictError(StorageError):
    """A write precondition did not hold: the object exists (create) or changed (replace)."""


class NotFoundError(StorageError):
    """The object does not exist."""


class Store(Protocol):
    uri: str

    def put(self, name: str, data: bytes, mode: WriteMode = "create") -> str: ...
    def get(self, name: str) -> bytes: ...
    def read(self, name: str) -> tuple[bytes, str]: ...
    def read_tail(self, name: str, n: int) -> tuple[bytes, int]: ...
    def replace(self, name: str, data: bytes, generation: str) -> str: ...
    def list(self, prefix: str) -> list[str]: ...
    def children(self, prefix: str) -> list[str]: ...
    def delete(self, name: str, generation: str | None = None) -> None: ...
