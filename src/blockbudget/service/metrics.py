"""Monitoring: ``GET /metrics`` in the Prometheus text format, and the per-request middleware
that feeds it and the request log (:mod:`blockbudget.service.request_log`).

Two kinds of numbers, two sources:

* **The ledger's** — budgets, blocks, reservations, ledger events, task queues — are read from
  the database at scrape time (:mod:`blockbudget.service.metrics_db`), so every server process,
  on every host, reports the same numbers.
* **The process's** — request counts, latency histograms, refusals, requests in flight, task
  leadership — are counted where the request is served. With several worker processes they go
  through ``prometheus_client``'s multiprocess mode: ``blockbudget serve`` points
  ``PROMETHEUS_MULTIPROC_DIR`` at an emptied folder before the workers start, each worker
  writes its own files there, and a scrape served by any worker adds them all up (a dead
  worker's counts stay; its in-flight and leadership gauges are dropped at the next scrape).
  Several hosts are summed in PromQL (``sum by (route)``).

Labels never carry a raw path, an id or data: routes are templates (``/v1/reservations/{rid}``),
refusal reasons are error class names, and the ledger's labels are stream and context names.

Who may scrape: an admin's API key, or the deployment's metrics token
(``serve --metrics-token``, env ``BLOCKBUDGET_METRICS_TOKEN``), sent as
``Authorization: Bearer …``. The budget metrics cover every stream and context, which an analyst
or owner may not see, so no other principal may read them.
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
import os
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import Response

from blockbudget.lowbudget import alert_threshold_from_env
from blockbudget.platform import Platform
from blockbudget.service.access import Authenticator, require_role
from blockbudget.service.metrics_db import (
    BudgetTracker,
    LedgerSnapshot,
    live_tasks,
    open_reservations,
)
from blockbudget.service.request_log import (
    ENV_REQUEST_LOG,
    LOGGER_NAME,
    configure_request_log,
    request_line,
    request_log_configured,
)

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry
    from prometheus_client.metrics_core import Metric

    from blockbudget.tasks.queue import TaskQueue

__all__ = [
    "ENV_METRICS_TOKEN",
    "LATENCY_BUCKETS",
    "MULTIPROC_ENV",
    "LedgerCollector",
    "prepare_multiprocess_dir",
    "refusal_reasons",
    "register_metrics",
]

#: The environment variable ``prometheus_client`` reads its multiprocess folder from.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

#: The metrics token (``serve --metrics-token``).
ENV_METRICS_TOKEN = "BLOCKBUDGET_METRICS_TOKEN"

#: Request latency histogram buckets, in seconds (a task's ``?wait=`` may hold a request 60 s).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


@functools.cache
def refusal_reasons() -> frozenset[str]:
    """The reasons a 409 is counted by: the class name of every error the service answers 409
    (:data:`blockbudget.service.access.CONFLICT_ERRORS` and their subclasses, e.g.
    ``DuplicateRowsError``); any other 409 counts as ``other`` (labels stay a bounded set)."""
    from blockbudget.service.access import CONFLICT_ERRORS

    names: set[str] = set()
    todo: list[type] = list(CONFLICT_ERRORS)
    while todo:
        cls = todo.pop()
        names.add(cls.__name__)
        todo.extend(cls.__subclasses__())
    return frozenset(names)


#: The HTTP methods a label may name; any other is ``other`` (labels stay a bounded set).
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

_DB_FILE = re.compile(r"^[a-z_]+_(\d+)\.db$")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def prepare_multiprocess_dir(path: str | Path | None = None) -> Path:
    """Make ``path`` (default: ``$PROMETHEUS_MULTIPROC_DIR``, else a new temporary folder) the
    empty multiprocess folder of a server about to start its workers, and export it.

    Counts of an earlier run are removed: they would otherwise be added to this run's.
    """
    if path is None:
        path = os.environ.get(MULTIPROC_ENV) or None
    if path is None:
        import tempfile

        path = tempfile.mkdtemp(prefix="blockbudget-metrics-")
    folder = Path(path)
    folder.mkdir(parents=True, exist_ok=True)
    for f in folder.iterdir():
        if _DB_FILE.match(f.name):
            f.unlink()
    os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def _multiprocess_dir() -> str | None:
    """The multiprocess folder when ``prometheus_client`` writes to one in this process."""
    from prometheus_client import values

    folder = os.environ.get(MULTIPROC_ENV)
    return folder if folder and values.ValueClass is not values.MutexValue else None


def _drop_dead_workers(folder: str) -> None:
    """Forget the live gauges of worker processes that no longer run."""
    from prometheus_client import multiprocess

    pids = {int(m.group(1)) for f in os.listdir(folder) if (m := _DB_FILE.match(f))}
    for pid in pids - {os.getpid()}:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            multiprocess.mark_process_dead(pid, folder)  # type: ignore[no-untyped-call]
        except PermissionError:  # alive, another user's
            pass


class _ProcessMetrics:
    """The metrics one server process counts (see the module docstring)."""

    def __init__(self, registry: CollectorRegistry | None) -> None:
        from prometheus_client import Counter, Gauge, Histogram

        self.requests = Counter(
            "blockbudget_http_requests",
            "HTTP requests answered, by method, route template and status.",
            ["method", "route", "status"],
            registry=registry,
        )
        self.latency = Histogram(
            "blockbudget_http_request_duration_seconds",
            "Time from a request's arrival to the end of its answer, by method and route.",
            ["method", "route"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.refusals = Counter(
            "blockbudget_refusals",
            "Refusals, by kind: 'request' — requests refused by the ledger's state (HTTP 409, "
            "and a --last selection no block can afford, 422 NothingAffordableError), by route "
            "and reason (error class); 'task' — tasks the stream's scheduler refused, counted "
            "by the process that decided them, by the submit route and reason 'refused'. A "
            "refusal changes nothing in the ledger, so it is counted here.",
            ["route", "reason", "kind"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "blockbudget_http_requests_in_progress",
            "Requests being served now.",
            registry=registry,
            multiprocess_mode="livesum",
        )
        self.leader = Gauge(
            "blockbudget_task_leader",
            "1 in the server process that decides the task queue (updated on each request it "
            "serves); summed, how many processes lead (should be 1 in a deployment).",
            registry=registry,
            multiprocess_mode="livesum",
        )


class LedgerCollector:
    """A ``prometheus_client`` collector of the ledger's numbers, read at collection time.

    Args:
        platform: the platform whose database is read.
        alert_below: the low-budget threshold (a fraction in [0, 1]).
    """

    def __init__(self, platform: Platform, *, alert_below: float) -> None:
        self.platform = platform
        self.engine = platform.database
        self.tracker = BudgetTracker(self.engine, alert_below=alert_below)

    def describe(self) -> list[Metric]:
        return []  # families depend on the data; nothing to check at registration

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        snap = self.tracker.snapshot()
        yield from _budget_families(snap, self.tracker.alert_below)
        blocks = GaugeMetricFamily(
            "blockbudget_blocks",
            "Blocks per stream and status: live, retiring (live, less than 0.1 left in every "
            "open context) and retired.",
            labels=["stream", "status"],
        )
        for (stream, status), n in sorted(snap.blocks.items()):
            blocks.add_metric([stream, status], n)
        yield blocks
        events = CounterMetricFamily(
            "blockbudget_ledger_events",
            "Audit events in the ledger by kind (charged, reserved, released, expired, retired, "
            "block_added, ...) and context ('' for events of no context).",
            labels=["kind", "context"],
        )
        for (kind, context), n in sorted(snap.events.items()):
            events.add_metric([kind, context], n)
        yield events
        yield GaugeMetricFamily(
            "blockbudget_audit_seq", "The audit log's last sequence number.", value=snap.seq
        )
        yield from _mark_families(self.platform)
        reserved = GaugeMetricFamily(
            "blockbudget_reservations_open", "Open reservations per context.", labels=["context"]
        )
        for context, n in sorted(open_reservations(self.engine).items()):
            reserved.add_metric([context], n)
        yield reserved
        queue = GaugeMetricFamily(
            "blockbudget_tasks",
            "Tasks in the queue per stream and state (waiting, running).",
            labels=["stream", "state"],
        )
        for (stream, state), n in sorted(live_tasks(self.engine).items()):
            queue.add_metric([stream, state], n)
        yield queue


def _mark_families(platform: Platform) -> Iterator[Metric]:
    """The audit log's high-water mark, judged at each scrape (a read of the block store)."""
    from prometheus_client.metrics_core import GaugeMetricFamily

    status = platform.mark_status(refresh=True)
    yield GaugeMetricFamily(
        "blockbudget_ledger_behind_mark",
        "1 while the servers refuse budgets because the database's audit log does not reach "
        "the high-water mark kept beside the block files (restored from an older backup, "
        "written to after such a restore, another database) or the mark cannot be read: every "
        "write answers 503 until `blockbudget db reconcile`; 0 otherwise.",
        value=1.0 if status is not None and status.refusing else 0.0,
    )
    if status is not None and status.mark is not None:
        yield GaugeMetricFamily(
            "blockbudget_audit_mark_seq",
            "The audit seq of the high-water mark kept beside the block files: it moves only "
            "forward, except when a reconciliation re-bases it on the restored log's head in a "
            "new epoch (blockbudget_audit_mark_epoch).",
            value=status.mark.seq,
        )
        yield GaugeMetricFamily(
            "blockbudget_audit_mark_epoch",
            "The high-water mark's epoch: 0 until the first `blockbudget db reconcile`, one more "
            "at each.",
            value=status.mark.epoch,
        )


def _budget_families(snap: LedgerSnapshot, alert_below: float) -> Iterator[Metric]:
    from prometheus_client.metrics_core import GaugeMetricFamily

    labels = ["stream", "context"]
    lo = GaugeMetricFamily(
        "blockbudget_block_remaining_fraction_min",
        "The smallest remaining budget fraction among a stream's live blocks in a context.",
        labels=labels,
    )
    mean = GaugeMetricFamily(
        "blockbudget_block_remaining_fraction_avg",
        "The mean remaining budget fraction of a stream's live blocks in a context.",
        labels=labels,
    )
    eps = GaugeMetricFamily(
        "blockbudget_block_remaining_epsilon_min",
        "The epsilon one more charge may take on the most-spent live block of a stream in a "
        "context (basic and strong accounting; RDP streams have none).",
        labels=labels,
    )
    live = GaugeMetricFamily(
        "blockbudget_context_live_blocks",
        "Live blocks of a stream counted in a context (every open context counts all of them).",
        labels=labels,
    )
    low = GaugeMetricFamily(
        "blockbudget_low_budget_blocks",
        "Live blocks of a stream whose remaining fraction in a context is below the alert "
        "threshold (blockbudget_low_budget_threshold).",
        labels=labels,
    )
    for (stream, context), s in sorted(snap.budgets.items()):
        lo.add_metric([stream, context], s.min_fraction)
        mean.add_metric([stream, context], s.mean_fraction)
        live.add_metric([stream, context], s.blocks)
        low.add_metric([stream, context], snap.low.get((stream, context), 0))
        if s.min_epsilon is not None:
            eps.add_metric([stream, context], s.min_epsilon)
    yield from (lo, mean, eps, live, low)
    yield GaugeMetricFamily(
        "blockbudget_low_budget_threshold",
        "The remaining fraction under which a block counts as low on budget.",
        value=alert_below,
    )


class _Observer:
    """The ASGI middleware: counts, times and logs every HTTP request."""

    def __init__(
        self, app: ASGIApp, *, metrics: _ProcessMetrics, is_leader: Callable[[], bool]
    ) -> None:
        self.app = app
        self.metrics = metrics
        self.is_leader = is_leader
        self.log = logging.getLogger(LOGGER_NAME)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        rid = uuid.uuid4().hex
        status = 500
        refusal: list[bytes] = []

        async def observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (b"x-request-id", rid.encode())]
            elif message["type"] == "http.response.body" and status in _REFUSAL_STATUSES:
                refusal.append(bytes(message.get("body", b"")))
            await send(message)

        m = self.metrics
        m.in_flight.inc()
        try:
            await self.app(scope, receive, observed)
        finally:
            m.in_flight.dec()
            elapsed = time.perf_counter() - started
            route = _route_of(scope)
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"  # a client chooses the method
            m.requests.labels(method, route, str(status)).inc()
            m.latency.labels(method, route).observe(elapsed)
            if status in _REFUSAL_STATUSES:
                reason = _reason(b"".join(refusal), status)
                if reason is not None:
                    m.refusals.labels(route, reason, "request").inc()
            m.leader.set(1.0 if self.is_leader() else 0.0)
            if self.log.isEnabledFor(logging.INFO):
                principal = scope.get("state", {}).get("principal")
                self.log.info(
                    request_line(
                        method=method,
                        route=route,
                        status=status,
                        latency_ms=elapsed * 1000.0,
                        principal=getattr(principal, "name", None),
                        request_id=rid,
                    )
                )


def _route_of(scope: Scope) -> str:
    """The template of the route that served ``scope`` (never the raw path)."""
    route = scope.get("route")
    path = getattr(route, "path_format", None) or getattr(route, "path", None)
    if isinstance(path, str):
        return path
    if scope.get("root_path", "").endswith("/static") or str(scope.get("path", "")).startswith(
        "/static/"
    ):
        return "/static"
    return "unmatched"


#: The statuses a refusal may be answered with: every 409, and 422 for the budget refusals
#: of :data:`BUDGET_422` (a ``--last`` selection no block can afford).
_REFUSAL_STATUSES = frozenset({409, 422})
#: The errors answered 422 that are refusals of budget (not malformed requests).
BUDGET_422 = frozenset({"NothingAffordableError"})
#: The route a task's refusal is counted under (``kind="task"``).
TASK_ROUTE = "/v1/streams/{stream}/tasks"


def _reason(body: bytes, status: int = 409) -> str | None:
    """The reason label of a refusal answered ``status`` with ``body``: for a 409, its error
    class when known (else ``other``); for a 422, the class when it is a budget refusal
    (:data:`BUDGET_422`), else None (a malformed request is not counted)."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if status != 409:
        return error if isinstance(error, str) and error in BUDGET_422 else None
    return error if isinstance(error, str) and error in refusal_reasons() else "other"


def register_metrics(
    app: FastAPI,
    *,
    platform: Platform | None = None,
    authenticate: Authenticator | None = None,
    tasks: TaskQueue | None = None,
    token: str | None = None,
    alert_below: float | None = None,
    request_log: str | None = None,
) -> None:
    """Add ``GET /metrics`` and the request middleware (metrics and request log) to ``app``.

    Args:
        app: the application.
        platform: the platform whose database the ledger metrics read (default:
            ``app.state.platform``).
        authenticate: the app's authenticator, for admins' keys (default:
            ``app.state.authenticate``).
        tasks: the task queue, whose leadership the ``blockbudget_task_leader`` gauge shows
            (default: ``app.state.tasks``, if any).
        token: the metrics token (default: env ``BLOCKBUDGET_METRICS_TOKEN``; none: admin
            keys only).
        alert_below: the low-budget threshold (default: env ``BLOCKBUDGET_ALERT_BELOW``, else
            0.1; :func:`blockbudget.lowbudget.alert_threshold_from_env`).
        request_log: where request lines go (default: env ``BLOCKBUDGET_REQUEST_LOG``; else
            as configured already in this process, or standard error; see
            :func:`~blockbudget.service.request_log.configure_request_log`).

    Example:
        >>> import tempfile
        >>> from fastapi.testclient import TestClient
        >>> from blockbudget.platform import Platform
        >>> from blockbudget.service import create_app
        >>> app = create_app(Platform(tempfile.mkdtemp()))  # calls register_metrics
        >>> TestClient(app).get("/metrics").status_code  # no admin key, no token
        401
    """
    from prometheus_client import CollectorRegistry
    from prometheus_client.exposition import choose_encoder

    platform = platform if platform is not None else app.state.platform
    auth: Authenticator = authenticate if authenticate is not None else app.state.authenticate
    tasks = tasks if tasks is not None else getattr(app.state, "tasks", None)
    secret = token if token is not None else os.environ.get(ENV_METRICS_TOKEN) or None
    below = alert_threshold_from_env() if alert_below is None else alert_below
    target = request_log if request_log is not None else os.environ.get(ENV_REQUEST_LOG)
    if target is not None or not request_log_configured():
        configure_request_log(target)
    folder = _multiprocess_dir()
    own = None if folder is not None else CollectorRegistry()
    process = _ProcessMetrics(own)
    ledger = LedgerCollector(platform, alert_below=below)
    if own is not None:
        own.register(ledger)

    def is_leader() -> bool:
        return bool(tasks is not None and tasks.leading)

    app.add_middleware(_Observer, metrics=process, is_leader=is_leader)
    if tasks is not None:  # a task the scheduler refuses, counted where it was decided
        refused = process.refusals.labels(TASK_ROUTE, "refused", "task")
        tasks.rows.on_refused.append(lambda _task_id: refused.inc())

    def render(encode: Callable[[CollectorRegistry], bytes]) -> bytes:
        process.leader.set(1.0 if is_leader() else 0.0)
        if own is not None:
            return encode(own)
        from prometheus_client import multiprocess

        assert folder is not None
        _drop_dead_workers(folder)
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=folder)  # type: ignore[no-untyped-call]
        registry.register(ledger)
        return encode(registry)

    @app.get("/metrics", tags=["service"], response_class=Response)
    async def metrics(request: Request) -> Response:
        """Prometheus metrics (an admin's key, or the metrics token as a bearer token), in the
        text format the scraper's ``Accept`` header asks for (OpenMetrics or Prometheus text)."""
        if not _token_matches(request, secret):
            require_role(await auth(request))
        encode, content_type = choose_encoder(request.headers.get("accept", ""))
        body = await anyio.to_thread.run_sync(render, encode)
        return Response(body, headers={"Content-Type": content_type})


def _token_matches(request: Request, secret: str | None) -> bool:
    if not secret:
        return False
    auth = request.headers.get("authorization", "")
    given = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
    return hmac.compare_digest(given.encode(), secret.encode())
