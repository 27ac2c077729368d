"""Real servers for tests on 127.0.0.1 (a free port, in a thread): an ASGI app under uvicorn, or a raw TCP handler."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any, Callable, Iterator


@contextlib.contextmanager
def serve_app(app: Any, config: Any = None) -> Iterator[str]:
    """Run `app` under uvicorn on 127.0.0.1 (a free port) in a thread; yields the base URL. `config`:
    a function (app, host, port) -> uvicorn.Config, e.g. `memloop.engine.serve.server.uvicorn_config`."""
    import uvicorn

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(
        config(app, "127.0.0.1", port)
        if config is not None
        else uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
    )
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


@contextlib.contextmanager
def serve_socket(handle: Callable[[socket.socket], None]) -> Iterator[str]:
    """A raw TCP server on 127.0.0.1 (a free port) in a thread, `handle(conn)` answering each connection
    on a thread of its own with whatever bytes it likes (what no HTTP framework would send: headers a
    byte at a time). A client that hangs up ends its handler. Yields the base URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def one(conn: socket.socket) -> None:
        with conn:
            try:
                handle(conn)
            except OSError:  # the client hung up
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        listener.close()
