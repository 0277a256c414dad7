"""The HTTP API's contract around its routes: the refusals every operation declares, the
answer to a request that no route takes, and the API docs, served from the package.

* :data:`ERRORS` is the one declaration of the refusals (status, the :class:`ErrorOut` body,
  when): :func:`create_app` gives it to every operation, so the OpenAPI schema lists each
  status code the service may answer.
* :func:`add_http_error_handler` answers Starlette's own refusals (an unknown path 404, a
  method the path does not take 405, a body that cannot be read at all 400) with the same
  ``{"error", "detail"}`` body as every other refusal, and a 405's ``Allow`` lists every method
  the path supports — Starlette names only the first route that matched the path.
* :func:`name_bounds` gives the OpenAPI names to the bounds pydantic leaves under its own
  (``ge``, ``le``, ``gt``, ``lt``) where a validator wraps the type (an optional count, the items
  of a list of numbers): the schema states every bound that validation enforces.
* :func:`add_docs_routes` serves ``/docs`` (Swagger UI) and ``/redoc`` from the assets the
  ``fastapi-offline`` package ships: no page loads anything from outside the service, so the
  docs work on an air-gapped network.
"""

from __future__ import annotations

from http import HTTPStatus
from importlib.resources import files
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match, Route

from blockbudget.service.schema_fields import ErrorOut

#: Every refusal an operation may answer, with the one body model all refusals share.
ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"model": ErrorOut, "description": "a body that cannot be read as text at all"},
    401: {"model": ErrorOut, "description": "no, malformed, unknown or revoked API key"},
    403: {"model": ErrorOut, "description": "role, stream ACL or context binding refuses"},
    404: {"model": ErrorOut, "description": "unknown stream, block or reservation"},
    409: {"model": ErrorOut, "description": "budget exceeded, retired, reservation state"},
    422: {"model": ErrorOut, "description": "malformed request"},
    503: {
        "model": ErrorOut,
        "description": "budgets refused: the database is behind the audit log's high-water "
        "mark (run `blockbudget db reconcile`), or the mark cannot be read",
    },
}

#: Where the docs' assets are served (inside the service: no CDN).
DOCS_ASSETS = "/docs/assets"


def allowed_methods(request: Request) -> list[str]:
    """Every method a route of ``request``'s app takes at ``request``'s path, sorted.

    Args:
        request: the request (its path is matched against every route, whatever its method).
    """
    methods: set[str] = set()
    for route in request.app.router.routes:
        if isinstance(route, Route) and route.methods:
            match, _ = route.matches(request.scope)
            if match is not Match.NONE:
                methods |= route.methods
    return sorted(methods)


def add_http_error_handler(app: FastAPI) -> None:
    """Answer Starlette's refusals with the service's refusal body; a 405 lists in ``Allow``
    every method the path supports.

    Args:
        app: the application.
    """

    @app.exception_handler(StarletteHTTPException)
    async def on_http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
        phrase = HTTPStatus(exc.status_code).phrase if exc.status_code in _STATUSES else "HTTP"
        return JSONResponse(
            {"error": phrase.replace(" ", "").replace("-", ""), "detail": str(exc.detail)},
            status_code=exc.status_code,
            headers=headers or None,
        )


_STATUSES = frozenset(s.value for s in HTTPStatus)


#: pydantic's names of bounds → JSON Schema's.
_BOUNDS = {"ge": "minimum", "le": "maximum", "gt": "exclusiveMinimum", "lt": "exclusiveMaximum"}


def _named(node: Any) -> None:
    """Rename, in place, every bound under pydantic's name in ``node`` and below (a bound's
    value is a number; a property called ``ge`` holds a schema, and is left alone)."""
    if isinstance(node, dict):
        for key in [k for k, v in node.items() if k in _BOUNDS and isinstance(v, int | float)]:
            node[_BOUNDS[key]] = node.pop(key)
        for value in node.values():
            _named(value)
    elif isinstance(node, list):
        for value in node:
            _named(value)


def name_bounds(app: FastAPI) -> None:
    """Make ``app``'s OpenAPI schema name every bound as JSON Schema does (see the module
    docstring).

    Args:
        app: the application (its ``openapi`` is wrapped; the schema is still built once).
    """
    build = app.openapi

    def openapi() -> dict[str, Any]:
        schema = build()
        _named(schema)
        return schema

    app.openapi = openapi  # type: ignore[method-assign]


def add_docs_routes(app: FastAPI) -> None:
    """Serve Swagger UI at ``/docs`` and ReDoc at ``/redoc`` from the package's assets; the
    app must be created with ``docs_url=None, redoc_url=None``.

    Args:
        app: the application.
    """
    assets = files("fastapi_offline").joinpath("static")
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(assets)), name="docs-assets")
    openapi_url = app.openapi_url or "/openapi.json"

    def where(request: Request) -> tuple[str, str]:
        """The schema's URL and the assets' prefix, under the app's root path."""
        root = request.scope.get("root_path", "")
        return f"{root}{openapi_url}", f"{root}{DOCS_ASSETS}"

    @app.get("/docs", include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        schema, assets = where(request)
        return get_swagger_ui_html(
            openapi_url=schema,
            title=f"{app.title} — API",
            swagger_js_url=f"{assets}/swagger-ui-bundle.js",
            swagger_css_url=f"{assets}/swagger-ui.css",
            swagger_favicon_url=f"{assets}/favicon.png",
            # No online validator badge (it would send the schema's URL outside).
            swagger_ui_parameters={"validatorUrl": None},
        )

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        schema, assets = where(request)
        return get_redoc_html(
            openapi_url=schema,
            title=f"{app.title} — API",
            redoc_js_url=f"{assets}/redoc.standalone.js",
            redoc_favicon_url=f"{assets}/favicon.png",
            with_google_fonts=False,
        )


__all__ = [
    "DOCS_ASSETS",
    "ERRORS",
    "add_docs_routes",
    "add_http_error_handler",
    "allowed_methods",
    "name_bounds",
]
