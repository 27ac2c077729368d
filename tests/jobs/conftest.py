"""Fixtures of the jobs tests: a real GCS emulator on 127.0.0.1 and run tables to write."""
from __future__ import annotations

import os
import socket

import pytest


@pytest.fixture(scope="session")
def gcs_emulator():
    """gcp-storage-emulator in memory with bucket `memloop-test`; sets STORAGE_EMULATOR_HOST."""
    from gcp_storage_emulator.server import create_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="memloop-test")
    server.start()
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{port}"
    yield "gs://memloop-test"
    if old is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = old
    server.stop()
