"""A local S3-compatible server for the tests: moto in server mode on 127.0.0.1.

The ``s3_root`` fixture (registered in ``tests/conftest.py``) starts one server per test session
on a free port, creates a fresh bucket per test and yields a data root URI that pyarrow's
``FileSystem.from_uri`` (and so ``Platform(data_root=...)`` and ``blockbudget serve``)
understands, e.g. ``s3://bb-1a2b/blocks?endpoint_override=127.0.0.1:40123&scheme=http``.
Credentials are dummy values set in the environment; nothing leaves the machine.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

_DUMMY_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_REGION": "us-east-1",
}


@dataclass(frozen=True)
class S3Server:
    """A running moto server."""

    host: str
    port: int

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.endpoint}"

    def root(self, bucket: str, prefix: str = "blocks") -> str:
        """A data root URI for ``bucket/prefix`` on this server."""
        return f"s3://{bucket}/{prefix}?endpoint_override={self.endpoint}&scheme=http"

    def create_bucket(self) -> str:
        """A new empty bucket (its name)."""
        import boto3

        name = f"bb-{uuid.uuid4().hex[:12]}"
        client = boto3.client("s3", endpoint_url=self.url, region_name="us-east-1")
        client.create_bucket(Bucket=name)
        return name


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """One moto S3 server on 127.0.0.1 for the whole session."""
    pytest.importorskip("moto.server", reason="moto[server] is installed by `make test`")
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in _DUMMY_ENV}
    os.environ.update(_DUMMY_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=_free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield S3Server(host=host, port=port)
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_root(s3_server: S3Server) -> str:
    """A data root URI in a fresh bucket on the session's S3 server."""
    return s3_server.root(s3_server.create_bucket())
