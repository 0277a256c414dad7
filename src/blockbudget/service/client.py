"""A small HTTP client of the service, used by the CLI's ``--server`` mode.

Every method is one request; a refusal raises :class:`ServiceError` carrying the HTTP status,
the server's error class and its message (nothing was charged — the server guarantees it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from blockbudget.errors import BlockBudgetError


class ServiceError(BlockBudgetError):
    """The service refused a request (401/403/404/409/422) or failed (5xx).

    Attributes:
        status: the HTTP status.
        error: the server's error class name (e.g. ``BudgetExceededError``).
    """

    def __init__(
        self, status: int, error: str, detail: str, refusal: dict[str, Any] | None = None
    ) -> None:
        super().__init__(f"HTTP {status} {error}: {detail}")
        self.status = status
        self.error = error
        self.detail = detail
        #: a budget refusal's exact remaining budget and shortfall, when the server sent them
        self.refusal = refusal


class ServiceClient:
    """Talks to a running ``blockbudget serve``.

    Args:
        url: the server's base URL, e.g. ``http://127.0.0.1:8000``.
        api_key: the caller's API key.
        timeout: seconds per request.
    """

    def __init__(self, url: str, api_key: str, *, timeout: float = 60.0) -> None:
        self._http = httpx.Client(
            base_url=url.rstrip("/"),
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=timeout,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; the decoded JSON answer, or :class:`ServiceError`."""
        try:
            res = self._http.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ServiceError(0, type(exc).__name__, f"cannot reach the server: {exc}") from exc
        if res.status_code >= 400:
            refusal = None
            try:
                body = res.json()
                error, detail = str(body.get("error", "")), str(body.get("detail", body))
                refusal = body.get("refusal")
            except (ValueError, AttributeError):
                error, detail = "", res.text[:500]
            raise ServiceError(res.status_code, error or res.reason_phrase, detail, refusal)
        return res.json()

    # --- the CLI's commands ------------------------------------------------------------------

    def whoami(self) -> dict[str, Any]:
        return dict(self.call("GET", "/v1/whoami"))

    def create_stream(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.call("POST", "/v1/streams", json=body))

    def streams(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/v1/streams"))

    def add_context(self, name: str, description: str) -> dict[str, Any]:
        return dict(
            self.call("POST", "/v1/contexts", json={"name": name, "description": description})
        )

    def close_context(self, name: str) -> dict[str, Any]:
        return dict(self.call("POST", f"/v1/contexts/{name}/close"))

    def contexts(self) -> list[dict[str, Any]]:
        return list(self.call("GET", "/v1/contexts"))

    def ingest_csv(
        self,
        stream: str,
        path: Path | bytes,
        *,
        ingest_id: str | None = None,
        on_overlap: str | None = None,
    ) -> dict[str, Any]:
        """Upload a CSV file, or CSV bytes (201: ingested; 200 with ``repeat``: ingested
        before)."""
        params = {"ingest_id": ingest_id, "on_overlap": on_overlap}
        return dict(
            self.call(
                "POST",
                f"/v1/streams/{stream}/ingest",
                content=path if isinstance(path, bytes) else path.read_bytes(),
                headers={"Content-Type": "text/csv"},
                params={k: v for k, v in params.items() if v is not None},
            )
        )

    def blocks(self, stream: str, contexts: list[str] | None = None) -> list[dict[str, Any]]:
        params = [("context", c) for c in contexts or []]
        return list(self.call("GET", f"/v1/streams/{stream}/blocks", params=params))

    def query(self, stream: str, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """The legacy flat-body query route (count, sum, mean, histogram)."""
        return dict(self.call("POST", f"/v1/streams/{stream}/queries/{kind}", json=body))

    def run_query(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        """Run a query given in its JSON form (``{"query": ..., "context", "blocks"|"last"}``)."""
        return dict(self.call("POST", f"/v1/streams/{stream}/query", json=body))

    def price(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        """Price a query (a dry run; nothing reserved, sealed or charged)."""
        return dict(self.call("POST", f"/v1/streams/{stream}/query/price", json=body))

    def charge(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self.call("POST", f"/v1/streams/{stream}/charges", json=body))

    def add_principal(self, name: str, role: str, contexts: list[str]) -> dict[str, Any]:
        return dict(
            self.call(
                "POST", "/v1/principals", json={"name": name, "role": role, "contexts": contexts}
            )
        )

    def grant(self, name: str, stream: str, permission: str) -> dict[str, Any]:
        return dict(
            self.call(
                "PUT", f"/v1/principals/{name}/streams/{stream}", json={"permission": permission}
            )
        )

    def verify(self, *, full: bool = False) -> dict[str, Any]:
        return dict(self.call("GET", "/v1/audit/verify" + ("?full=true" if full else "")))

    def events(self, after_seq: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        return list(
            self.call("GET", "/v1/audit/events", params={"after_seq": after_seq, "limit": limit})
        )

    # --- tasks ----------------------------------------------------------------------------------

    def submit_task(self, stream: str, body: dict[str, Any]) -> dict[str, Any]:
        """Submit a task (``POST /v1/streams/{stream}/tasks``; body as docs/service.md)."""
        return dict(self.call("POST", f"/v1/streams/{stream}/tasks", json=body))

    def tasks(
        self, stream: str | None = None, state: str | None = None, kind: str | None = None
    ) -> dict[str, Any]:
        """The caller's tasks (an admin's key: everyone's) and the scheduler's name."""
        given = (("stream", stream), ("state", state), ("kind", kind))
        return dict(self.call("GET", "/v1/tasks", params={k: v for k, v in given if v}))

    def task(self, task_id: str, *, wait: float = 0.0) -> dict[str, Any]:
        """One task (with ``why`` while waiting, ``result`` once done); ``wait`` seconds (at most
        60 per request) until it is neither waiting nor running."""
        params = {"wait": wait} if wait > 0 else {}
        return dict(self.call("GET", f"/v1/tasks/{task_id}", params=params))

    def wait_task(self, task_id: str, timeout: float) -> dict[str, Any]:
        """The task once neither waiting nor running, or as it is after ``timeout`` seconds."""
        import time

        end = time.monotonic() + timeout
        while True:
            left = end - time.monotonic()
            task = self.task(task_id, wait=min(max(left, 0.0), 60.0))
            if task["state"] not in ("waiting", "running") or left <= 0:
                return task

    def cancel_task(self, task_id: str) -> dict[str, Any]:
        return dict(self.call("POST", f"/v1/tasks/{task_id}/cancel"))

    def scheduler(self, stream: str) -> dict[str, Any]:
        return dict(self.call("GET", f"/v1/streams/{stream}/scheduler"))

    def set_scheduler(self, stream: str, spec: str) -> dict[str, Any]:
        return dict(self.call("PUT", f"/v1/streams/{stream}/scheduler", json={"spec": spec}))
