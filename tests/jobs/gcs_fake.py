"""A GCS fake on 127.0.0.1 that enforces generation preconditions as GCS does.

gcp-storage-emulator speaks the JSON and upload APIs that google-cloud-storage uses but ignores
`ifGenerationMatch` and friends, so a create-only upload over an existing object succeeds there and
fails with HTTP 412 on real GCS. This server is the emulator with one handler in front of it: before
an upload, a delete or a read, it compares the request's preconditions with the object's current
generation and metageneration and answers 412 `conditionNotMet` when one does not hold, exactly as
GCS does (a missing object has generation 0, so `ifGenerationMatch=0` means "create only").
Everything else is the emulator's own behaviour. For fault injection, `PreconditionGCS.fault` (when
set) sees every request's method and path first; when it returns True the request gets a 503
`backendError`, as GCS answers during an outage (the client retries it until its deadline).
"""

from __future__ import annotations

import io
import json
import re
import threading
from http import server as http_server
from typing import Any, Callable

from gcp_storage_emulator import server as emu
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import buckets

_UPLOAD = re.compile(r"^(?:/upload)?(?:/storage/v1)?/b/(?P<bucket>[-.\w]+)/o$")
_OBJECT = re.compile(r"^(?:/download)?(?:/storage/v1)?/b/(?P<bucket>[-.\w]+)/o/(?P<object>.*[^/])$")
_PRECONDITIONS = ("ifGenerationMatch", "ifGenerationNotMatch", "ifMetagenerationMatch", "ifMetagenerationNotMatch")


class PreconditionHandler(emu.RequestHandler):
    """The emulator's request handler, with GCS's generation preconditions checked first."""

    def _peek_body(self) -> bytes | None:
        """Read the request body and put it back, so the emulator's router reads it again."""
        raw = emu._read_raw_data(self)
        if raw is not None:  # a chunked body is put back with its length
            del self.headers["Content-Length"], self.headers["Transfer-Encoding"]
            self.headers["Content-Length"] = str(len(raw))
        self.rfile = io.BytesIO(raw or b"")
        return raw

    def _target(self, method: str) -> tuple[str, str] | None:
        """(bucket, object name) the request writes, deletes or reads, when it names one."""
        req = emu.Request(self, method)
        path, query = req.path, req.query
        m = _UPLOAD.fullmatch(path)
        if m and method in (emu.POST, emu.PUT):
            upload_id = query.get("upload_id", [None])[0]
            if upload_id is not None:  # a resumable session: the name was given when it started
                obj = self.storage.resumable.get(upload_id) or {}
                return (m["bucket"], obj["name"]) if obj.get("name") else None
            if "name" in query:
                return m["bucket"], query["name"][0]
            data = req.data  # reads the body (put back by _peek_body)
            if isinstance(data, dict):
                name = (data.get("meta") or {}).get("name") if "meta" in data else data.get("name")
                if name:
                    return m["bucket"], name
            return None
        m = _OBJECT.fullmatch(path)
        if m and method in (emu.GET, emu.DELETE) and not path.endswith(("/acl", "/restore", "/compose")):
            return m["bucket"], emu.unquote(m["object"])
        return None

    def _check(self, method: str) -> bool:
        """True when the request may go on; otherwise a 412 (or 304) has been sent."""
        query = emu.parse_qs(emu.urlparse(self.path).query)
        conditions = {k: int(query[k][0]) for k in _PRECONDITIONS if k in query}
        raw = self._peek_body() if method in (emu.POST, emu.PUT) else None
        if not conditions:
            return True
        target = self._target(method)
        if raw is not None:
            self.rfile = io.BytesIO(raw)  # _target may have consumed it
        if target is None:
            return True
        try:
            obj: dict[str, Any] | None = self.storage.get_file_obj(*target)
        except NotFound:
            obj = None
        if obj is None and method in (emu.GET, emu.DELETE):
            return True  # the emulator answers 404, as GCS does
        gen = int(obj["generation"]) if obj else 0
        meta = int(obj["metageneration"]) if obj else None
        failed = (
            ("ifGenerationMatch" in conditions and conditions["ifGenerationMatch"] != gen)
            or ("ifMetagenerationMatch" in conditions and conditions["ifMetagenerationMatch"] != meta)
            or ("ifMetagenerationNotMatch" in conditions and conditions["ifMetagenerationNotMatch"] == meta)
        )
        not_modified = "ifGenerationNotMatch" in conditions and conditions["ifGenerationNotMatch"] == gen
        if not (failed or not_modified):
            return True
        if not_modified and not failed and method == emu.GET:
            self._reply(304, b"")
        else:
            self.server_fake.rejected.append((method, target[1], conditions))
            body = {
                "error": {
                    "code": 412,
                    "message": "At least one of the pre-conditions you specified did not hold.",
                    "errors": [
                        {
                            "domain": "global",
                            "reason": "conditionNotMet",
                            "locationType": "header",
                            "location": "If-Match",
                            "message": "At least one of the pre-conditions you specified did not hold.",
                        }
                    ],
                }
            }
            self._reply(412, json.dumps(body).encode())
        return False

    def _reply(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json; charset=UTF-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _down(self, method: str) -> bool:
        """True when the fault hook says this request fails (a 503 has been sent)."""
        fault = self.server_fake.fault
        if fault is None or not fault(method, self.path):
            return False
        emu._read_raw_data(self)  # drain the body, or the client sees a reset instead of the answer
        self.server_fake.refused += 1
        body = {
            "error": {
                "code": 503,
                "message": "Backend Error",
                "errors": [{"domain": "global", "reason": "backendError", "message": "Backend Error"}],
            }
        }
        self._reply(503, json.dumps(body).encode())
        return True

    def do_GET(self) -> None:
        if not self._down(emu.GET) and self._check(emu.GET):
            super().do_GET()

    def do_POST(self) -> None:
        if not self._down(emu.POST) and self._check(emu.POST):
            super().do_POST()

    def do_PUT(self) -> None:
        if not self._down(emu.PUT) and self._check(emu.PUT):
            super().do_PUT()

    def do_DELETE(self) -> None:
        if not self._down(emu.DELETE) and self._check(emu.DELETE):
            super().do_DELETE()


class PreconditionGCS:
    """The fake server: in-memory storage with one bucket, on 127.0.0.1:`port` (0: a free port)."""

    def __init__(self, bucket: str, port: int = 0) -> None:
        self.storage = emu.Storage(use_memory_fs=True)
        buckets.create_bucket(bucket, self.storage)
        self.rejected: list[tuple[str, str, dict[str, int]]] = []  # the requests answered 412
        self.fault: Callable[[str, str], bool] | None = None  # (method, path) -> answer 503
        self.refused = 0  # requests answered 503 by `fault`
        self._httpd = http_server.HTTPServer(("127.0.0.1", port), self._handler)
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def _handler(self, *args: Any) -> PreconditionHandler:
        # BaseHTTPRequestHandler serves the request inside __init__, so the fake is attached first
        h = PreconditionHandler.__new__(PreconditionHandler)
        h.server_fake = self
        PreconditionHandler.__init__(h, self.storage, *args)
        return h

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
