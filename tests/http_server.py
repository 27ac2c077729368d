"""A real HTTP server for tests: an ASGI app under uvicorn on 127.0.0.1, a free port, in a thread."""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Iterator


@contextlib.contextmanager
def serve_app(app: Any, config: Any = None) -> Iterator[str]:
    """Run `app` under uvicorn on 127.0.0.1 (a free port) in a thread; yields the base URL. `config`:
    a function (app, host, port) -> uvicorn.Config, e.g. `memloop.engine.serve.server.uvicorn_config`."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(config(app, "127.0.0.1", port) if config is not None
                            else uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    assert server.started, "the test server did not start within 30 s"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
