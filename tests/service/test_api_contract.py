"""The HTTP contract around the routes: the API docs work without the internet (``/docs`` and
``/redoc`` load every asset from the service itself, and those assets are served); a method a
path does not take is a 405 whose ``Allow`` lists every method the path supports; Starlette's
own refusals have the service's refusal body."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from blockbudget.platform import Platform
from blockbudget.service import create_app

#: A URL the page would fetch: a src/href attribute, or a quoted string handed to the UI.
ASSET = re.compile(
    r"""(?:src|href|spec-url)\s*=\s*["']([^"']+)["']|(?:url|Url)\s*:\s*["']([^"']+)["']"""
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    with tempfile.TemporaryDirectory() as home:
        platform = Platform(Path(home))
        with TestClient(create_app(platform)) as c:
            yield c
        platform.close()


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_load_nothing_from_outside_the_service(client: TestClient, page: str) -> None:
    r = client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert not re.search(r"https?://", r.text), "an absolute URL in the page"
    assets = [a or b for a, b in ASSET.findall(r.text)]
    assert "/openapi.json" in assets
    scripts = [a for a in assets if a.endswith(".js")]
    assert scripts, r.text  # the UI's script is named, and served here
    for asset in assets:
        assert asset.startswith("/"), asset
        answer = client.get(asset)
        assert answer.status_code == 200, asset
        assert answer.content, asset


def test_the_swagger_ui_assets_are_served(client: TestClient) -> None:
    js = client.get("/docs/assets/swagger-ui-bundle.js")
    css = client.get("/docs/assets/swagger-ui.css")
    assert js.status_code == css.status_code == 200
    assert "javascript" in js.headers["content-type"] and len(js.content) > 100_000
    assert css.headers["content-type"].startswith("text/css")


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("OPTIONS", "/v1/contexts", "GET, POST"),
        ("PATCH", "/v1/streams/flights/afford", "GET, POST"),
        ("PUT", "/v1/principals/ana", "DELETE, GET"),
        ("DELETE", "/v1/streams", "GET, POST"),
        ("POST", "/healthz", "GET"),
    ],
)
def test_a_405_allows_every_method_of_the_path(
    client: TestClient, method: str, path: str, allow: str
) -> None:
    r = client.request(method, path)
    assert r.status_code == 405
    assert r.headers["allow"] == allow
    assert r.json() == {"error": "MethodNotAllowed", "detail": "Method Not Allowed"}


def test_an_unknown_path_has_the_refusal_body(client: TestClient) -> None:
    r = client.get("/v1/no-such-thing")
    assert r.status_code == 404
    assert r.json() == {"error": "NotFound", "detail": "Not Found"}
