"""A real S3 API on 127.0.0.1 for the tiered storage tests: moto's server (``moto[server]``, the stand-in
s3fs's own tests use), which enforces conditional writes (If-None-Match / If-Match) and byte ranges.

The fixtures are registered in tests/conftest.py. ``s3_endpoint`` starts one server per test module in a thread of the test process (child processes reach
it over loopback too) and stops it when the module's tests are done. Each test gets a bucket of its own
(``remote_settings``), so tests never see each other's objects. Credentials are fixed test values set in
the environment for the module's lifetime (children inherit them); ~/.aws is never read.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest

_ENV = {"AWS_ACCESS_KEY_ID": "pylog-test", "AWS_SECRET_ACCESS_KEY": "pylog-test", "AWS_REGION": "us-east-1",
        "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull}


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    """``http://127.0.0.1:<port>`` of a moto S3 server running for this module's tests."""
    moto_server = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    saved = {k: os.environ.get(k) for k in _ENV}
    os.environ.update(_ENV)
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def remote_settings(s3_endpoint: str) -> dict[str, object]:
    """Remote storage settings naming a new, empty bucket (prefix ``store``) on the module's server."""
    bucket = f"pylog-{uuid.uuid4().hex[:16]}"
    raw_client(s3_endpoint).create_bucket(Bucket=bucket)
    return {"remote.storage.location": f"s3://{bucket}/store", "remote.storage.endpoint.url": s3_endpoint,
            "remote.storage.request.timeout.ms": 10_000, "remote.storage.max.attempts": 2}


def raw_client(endpoint: str):
    """A plain boto3 client on the server, for what a test does behind pylog's back (damage, races)."""
    boto3 = pytest.importorskip("boto3", reason="boto3 is in the test extra (and the s3 extra)")
    return boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
