"""A local directory as an object store (`memloop.jobs.store.objects.Store`): atomic whole-file writes by a
hidden temporary file linked (create-only) or renamed (overwrite) into place, and compare-and-swap
serialised across the processes of this host by a lock file beside the object.
"""

from __future__ import annotations

import contextlib
import errno
import os
import uuid
from pathlib import Path
from typing import Iterator

from memloop.jobs.errors import StorageError
from memloop.jobs.store.objects import ConflictError, NotFoundError, WriteMode


class LocalStore:
    """A directory. put() writes a hidden temporary file next to the target, then links it into
    place (create: fails if the target exists, like O_EXCL) or renames it over the target (overwrite)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser().resolve()
        self.uri = str(self.root)

    def _path(self, name: str) -> Path:
        return self.root / name

    @staticmethod
    def _generation(path: Path) -> str:
        st = path.stat()
        return f"{st.st_ino}.{st.st_mtime_ns}"

    def _write_tmp(self, target: Path, data: bytes) -> Path:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except FileExistsError:  # a file where a directory should be: not a create-only conflict
            raise StorageError(
                f"cannot write {target}: {target.parent} is not a directory; "
                "remove what is in the way or choose another `output`"
            ) from None
        tmp = target.parent / f".{target.name}.{uuid.uuid4().hex[:8]}.tmp"
        try:
            with tmp.open("wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:  # a full disk or an I/O error: no half-written temporary file stays behind
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def put(self, name: str, data: bytes, mode: WriteMode = "create") -> str:
        target = self._path(name)
        try:
            self.check_folder(target.parent)
            tmp = self._write_tmp(target, data)
            try:
                if mode == "overwrite":
                    os.replace(tmp, target)
                else:
                    self._link_exclusive(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            return self._generation(target)
        except FileExistsError:
            raise ConflictError(
                f"{target} already exists and is written create-only; "
                "another process wrote the same object (remove it only if that process is gone)"
            ) from None
        except OSError as exc:
            raise StorageError(f"cannot write {target}: {exc.strerror or exc}; choose a writable `output`") from None

    def check_folder(self, folder: Path) -> None:
        """Raise StorageError when a folder on the way to `folder` is a file (mkdir would say only
        "exists", which reads as a write conflict)."""
        for p in (folder, *folder.parents):
            if p == self.root.parent:
                break
            if p.exists() and not p.is_dir():
                raise StorageError(
                    f"{p} is not a directory (it is a file), so the run cannot write under it; "
                    "move or delete that file, or choose another `output`"
                )

    @staticmethod
    def _link_exclusive(tmp: Path, target: Path) -> None:
        try:
            os.link(tmp, target)  # atomic create-if-absent of a complete file
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            # file systems without hard links (some FUSE mounts): exclusive create, then copy in
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(tmp.read_bytes())

    def get(self, name: str) -> bytes:
        return self.read(name)[0]

    def read(self, name: str) -> tuple[bytes, str]:
        path = self._path(name)
        try:
            with path.open("rb") as f:
                gen = f"{os.fstat(f.fileno()).st_ino}.{os.fstat(f.fileno()).st_mtime_ns}"
                return f.read(), gen
        except (FileNotFoundError, NotADirectoryError):  # a file on the way: no such object either
            raise NotFoundError(f"{path} does not exist; check the run URI") from None

    def read_tail(self, name: str, n: int) -> tuple[bytes, int]:
        """The last `n` bytes of an object and its size (a Parquet footer, without reading the file)."""
        path = self._path(name)
        try:
            with path.open("rb") as f:
                size = os.fstat(f.fileno()).st_size
                f.seek(max(0, size - n))
                return f.read(), size
        except (FileNotFoundError, NotADirectoryError):  # a file on the way: no such object either
            raise NotFoundError(f"{path} does not exist; check the run URI") from None

    @contextlib.contextmanager
    def _mutex(self, target: Path) -> Iterator[None]:
        """Serialises compare-and-swap on one object across the processes of this host."""
        import fcntl

        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / f".{target.name}.mutex", "a+b") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def replace(self, name: str, data: bytes, generation: str) -> str:
        target = self._path(name)
        with self._mutex(target):
            try:
                current = self._generation(target)
            except FileNotFoundError:
                raise ConflictError(f"{target} was removed by another process") from None
            if current != generation:
                raise ConflictError(f"{target} was changed by another process")
            tmp = self._write_tmp(target, data)
            try:
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            return self._generation(target)

    def list(self, prefix: str) -> list[str]:
        base = self._path(prefix)
        if not base.is_dir():
            return []
        return sorted(
            p.relative_to(self.root).as_posix() for p in base.rglob("*") if p.is_file() and not p.name.startswith(".")
        )

    def children(self, prefix: str) -> list[str]:
        base = self._path(prefix) if prefix else self.root
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if p.is_dir() and not p.name.startswith("."))

    def delete(self, name: str, generation: str | None = None) -> None:
        target = self._path(name)
        try:
            if generation is None:
                target.unlink(missing_ok=True)
                return
            with self._mutex(target):
                try:
                    if self._generation(target) != generation:
                        raise ConflictError(f"{target} was changed by another process; not deleted")
                except FileNotFoundError:
                    return
                target.unlink(missing_ok=True)
        except OSError as exc:
            raise StorageError(
                f"cannot delete {target}: {exc.strerror or exc}; check the output's permissions"
            ) from None
