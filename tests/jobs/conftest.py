"""Fixtures of the jobs tests: a GCS server on 127.0.0.1 that enforces preconditions as GCS does."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session")
def gcs_server():
    """The GCS fake of gcs_fake.py (gcp-storage-emulator plus generation preconditions) in memory with
    bucket `memloop-test`; sets STORAGE_EMULATOR_HOST."""
    from tests.jobs.gcs_fake import PreconditionGCS

    server = PreconditionGCS("memloop-test")
    server.start()
    old = os.environ.get("STORAGE_EMULATOR_HOST")
    os.environ["STORAGE_EMULATOR_HOST"] = f"http://127.0.0.1:{server.port}"
    yield server
    if old is None:
        os.environ.pop("STORAGE_EMULATOR_HOST", None)
    else:
        os.environ["STORAGE_EMULATOR_HOST"] = old
    server.stop()


@pytest.fixture(scope="session")
def gcs_emulator(gcs_server) -> str:
    """The bucket URI of the GCS fake."""
    return "gs://memloop-test"


@pytest.fixture(scope="session")
def view_run(ray_local, tmp_path_factory) -> str:
    """The URI of a real run on the scripted model for the viewer's tests (tests/jobs/view_run.py)."""
    from tests.jobs.view_run import make_view_run

    return make_view_run(tmp_path_factory.mktemp("view") / "runs")


@pytest.fixture(scope="session")
def second_run(view_run) -> str:
    """A second, smaller run in the same folder as `view_run` (the runs list's tests: a folder of two runs)."""
    from pathlib import Path

    from tests.jobs.view_run import make_second_run

    return make_second_run(Path(view_run).parent)
