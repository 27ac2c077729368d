"""gs://bucket/prefix as an object store (`memloop.jobs.store.objects.Store`) through google-cloud-storage, with
generation preconditions for create-only writes and compare-and-swap, and bounded retries so a bucket
that stops answering fails a call in seconds instead of minutes.
"""

from __future__ import annotations

import os
from typing import Any

from memloop.jobs.errors import StorageError
from memloop.jobs.store.objects import ConflictError, NotFoundError, WriteMode

# One storage call's bound, retries included: a bucket that stops answering fails the call after this
# many seconds instead of retrying for minutes (the run then stops, keeping what it wrote).
STORAGE_DEADLINE_S = 60.0
# One HTTP request's bound inside it (a connection that hangs is dropped and retried within the deadline).
STORAGE_REQUEST_TIMEOUT_S = 20.0
# Once a call has failed, the next calls get this much shorter bound until one succeeds, so a run
# that stops on a storage outage closes (index, manifest, lock) in seconds, not minutes.
STORAGE_DOWN_DEADLINE_S = 5.0


class GCSStore:
    """gs://bucket/prefix through google-cloud-storage.

    A single-request upload is atomic (readers see the old state or the whole object). With
    STORAGE_EMULATOR_HOST set, the client talks to that emulator with anonymous credentials.
    """

    def __init__(self, uri: str, client: Any = None, deadline_s: float | None = None) -> None:
        from google.cloud import storage
        from google.cloud.storage.retry import DEFAULT_RETRY, ConditionalRetryPolicy, is_generation_specified

        rest = uri[len("gs://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise StorageError(f"{uri!r} names no bucket; write gs://BUCKET/PREFIX")
        self.uri = uri.rstrip("/")
        self.prefix = prefix.strip("/")
        if client is None:
            if os.environ.get("STORAGE_EMULATOR_HOST"):
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(
                    project=os.environ.get("GOOGLE_CLOUD_PROJECT", "memloop"), credentials=AnonymousCredentials()
                )
            else:
                try:
                    client = storage.Client()
                except Exception as exc:  # no default credentials or project
                    raise StorageError(
                        f"cannot create a GCS client for {uri}: {exc}; run `gcloud auth application-default login` "
                        "or set GOOGLE_APPLICATION_CREDENTIALS"
                    ) from None
        self.client = client
        self.bucket = client.bucket(bucket)
        self.deadline_s = STORAGE_DEADLINE_S if deadline_s is None else deadline_s
        self.down = False  # the last call failed: the next ones get STORAGE_DOWN_DEADLINE_S
        self._retries = {}
        for down in (False, True):
            retry = DEFAULT_RETRY.with_timeout(
                min(self.deadline_s, STORAGE_DOWN_DEADLINE_S) if down else self.deadline_s
            )
            # uploads are retried only when a generation precondition makes a repeat harmless (as GCS advises)
            self._retries[down] = (retry, ConditionalRetryPolicy(retry, is_generation_specified, ["query_params"]))

    @property
    def _retry(self) -> Any:
        return self._retries[self.down][0]

    @property
    def _upload_retry(self) -> Any:
        return self._retries[self.down][1]

    @property
    def _timeout(self) -> float:
        return min(STORAGE_REQUEST_TIMEOUT_S, self._retry.timeout)

    def _failed(self, verb: str, name: str, exc: BaseException) -> StorageError:
        from google.api_core.exceptions import RetryError

        bound = self._retry.timeout  # the bound this call ran under
        retried = isinstance(exc, (RetryError, TimeoutError, ConnectionError))
        if retried:  # the storage is not answering: the next calls get the short bound
            self.down = True
        why = f" (gave up after {bound:g} s)" if retried else ""
        return StorageError(
            f"cannot {verb} {self.uri}/{name}{why}: {type(exc).__name__}: {str(exc)[:300]}; "
            "check the bucket, your network and permissions"
        )

    def _blob_name(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def _upload(self, name: str, data: bytes, if_generation_match: int | None) -> str:
        from google.api_core.exceptions import PreconditionFailed

        blob = self.bucket.blob(self._blob_name(name))
        try:
            blob.upload_from_string(
                data,
                content_type="application/octet-stream",
                if_generation_match=if_generation_match,
                retry=self._upload_retry,
                timeout=self._timeout,
            )
        except PreconditionFailed:
            if if_generation_match == 0:
                raise ConflictError(
                    f"{self.uri}/{name} already exists and is written create-only; another "
                    "process wrote the same object (remove it only if that process is gone)"
                ) from None
            raise ConflictError(f"{self.uri}/{name} was changed by another process") from None
        except Exception as exc:
            raise self._failed("write", name, exc) from None
        self.down = False
        return str(blob.generation)

    def put(self, name: str, data: bytes, mode: WriteMode = "create") -> str:
        return self._upload(name, data, 0 if mode == "create" else None)

    def replace(self, name: str, data: bytes, generation: str) -> str:
        return self._upload(name, data, int(generation))

    def get(self, name: str) -> bytes:
        return self.read(name)[0]

    def read(self, name: str) -> tuple[bytes, str]:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            blob = self.bucket.get_blob(self._blob_name(name), retry=self._retry, timeout=self._timeout)
            self.down = False
            if blob is not None:
                gen = blob.generation  # (the download may reset it from its response headers)
                # the bytes of exactly the generation whose metadata was read
                return blob.download_as_bytes(if_generation_match=gen, retry=self._retry, timeout=self._timeout), str(
                    gen
                )
        except (NotFound, PreconditionFailed):
            pass  # deleted or rewritten between the two requests: report it as gone; the caller re-reads
        except Exception as exc:
            raise self._failed("read", name, exc) from None
        raise NotFoundError(f"{self.uri}/{name} does not exist; check the run URI")

    def read_tail(self, name: str, n: int) -> tuple[bytes, int]:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            blob = self.bucket.get_blob(self._blob_name(name), retry=self._retry, timeout=self._timeout)
            self.down = False
            if blob is not None:
                size, gen = int(blob.size or 0), blob.generation
                if size == 0:
                    return b"", 0
                return blob.download_as_bytes(
                    start=max(0, size - n),
                    end=size - 1,
                    if_generation_match=gen,
                    retry=self._retry,
                    timeout=self._timeout,
                ), size
        except (NotFound, PreconditionFailed):
            pass
        except Exception as exc:
            raise self._failed("read", name, exc) from None
        raise NotFoundError(f"{self.uri}/{name} does not exist; check the run URI")

    def list(self, prefix: str) -> list[str]:
        full = self._blob_name(prefix).rstrip("/") + "/"
        cut = len(self.prefix) + 1 if self.prefix else 0
        try:
            names = [
                b.name[cut:]
                for b in self.client.list_blobs(self.bucket, prefix=full, retry=self._retry, timeout=self._timeout)
            ]
        except Exception as exc:
            raise self._failed("list", prefix, exc) from None
        self.down = False
        return sorted(n for n in names if not n.rsplit("/", 1)[-1].startswith("."))

    def children(self, prefix: str) -> list[str]:
        full = (self._blob_name(prefix).rstrip("/") + "/") if (prefix or self.prefix) else ""
        try:
            it = self.client.list_blobs(
                self.bucket, prefix=full, delimiter="/", retry=self._retry, timeout=self._timeout
            )
            for _ in it:  # the prefixes are known once the pages are read
                pass
            dirs = [p[len(full) :].rstrip("/") for p in it.prefixes]
        except Exception as exc:
            raise self._failed("list", prefix, exc) from None
        return sorted(d for d in dirs if d and not d.startswith("."))

    def delete(self, name: str, generation: str | None = None) -> None:
        from google.api_core.exceptions import NotFound, PreconditionFailed

        try:
            self.bucket.blob(self._blob_name(name)).delete(
                if_generation_match=int(generation) if generation is not None else None,
                retry=self._retry,
                timeout=self._timeout,
            )
        except NotFound:
            pass
        except PreconditionFailed:
            raise ConflictError(f"{self.uri}/{name} was changed by another process; not deleted") from None
        except Exception as exc:
            raise self._failed("delete", name, exc) from None
