"""The structured request log: one JSON line per HTTP request on the logger
``blockbudget.requests``.

A line holds the time (ISO 8601 UTC), the method, the route *template* (``/v1/streams/{stream}/
query``, never the raw path), the status, the latency in milliseconds, the authenticated
principal's name (null before authentication) and the request id the response carries in its
``X-Request-ID`` header. Nothing else: no path, no query string, no body, no header — so no query
literals, no data values and no API keys can reach it.

Where it goes is server configuration (``serve --request-log``, env ``BLOCKBUDGET_REQUEST_LOG``):
``-`` (the default) is standard error, ``off`` turns it off, anything else is a file the
lines are appended to. An operator who wants it elsewhere attaches a handler to the logger.

Example:
    >>> line = request_line(method="GET", route="/v1/streams/{stream}", status=200,
    ...                     latency_ms=1.25, principal="ana", request_id="r1", ts=0.0)
    >>> line
    '{"latency_ms":1.25,"method":"GET","principal":"ana","request_id":"r1","route":"/v1/streams/{stream}","status":200,"time":"1970-01-01T00:00:00.000Z"}'
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

__all__ = [
    "ENV_REQUEST_LOG",
    "LOGGER_NAME",
    "configure_request_log",
    "request_line",
    "request_log_configured",
]

#: The logger every request line goes to.
LOGGER_NAME = "blockbudget.requests"

#: Environment variable naming the request log's target (``-``, ``off`` or a file path).
ENV_REQUEST_LOG = "BLOCKBUDGET_REQUEST_LOG"

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def request_line(
    *,
    method: str,
    route: str,
    status: int,
    latency_ms: float,
    principal: str | None,
    request_id: str,
    ts: float | None = None,
) -> str:
    """One request as a JSON line (sorted keys; see the module docstring)."""
    now = time.time() if ts is None else ts
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"
    return _ENCODER.encode(
        {
            "time": stamp,
            "method": method,
            "route": route,
            "status": status,
            "latency_ms": round(latency_ms, 3),
            "principal": principal,
            "request_id": request_id,
        }
    )


#: Marks the handler this module installed, so that configuring again replaces it.
_MARK = "_blockbudget_request_log"


def configure_request_log(target: str | Path | None) -> logging.Logger:
    """Point the request logger at ``target`` (``None`` or ``-``: standard error; ``off``: no
    output; otherwise a file, appended to). Replaces what an earlier call installed and leaves
    other handlers alone; the logger does not propagate (the lines are not the server log).

    Returns:
        The ``blockbudget.requests`` logger.
    """
    logger = logging.getLogger(LOGGER_NAME)
    for h in list(logger.handlers):
        if getattr(h, _MARK, False):
            logger.removeHandler(h)
            h.close()
    logger.propagate = False
    text = "-" if target is None else str(target)
    if text == "off":
        logger.setLevel(logging.CRITICAL + 1)
        return logger
    logger.setLevel(logging.INFO)
    # The process's own standard error, not whatever ``sys.stderr`` is swapped for later (a
    # CLI runner capturing a command's output must not capture a server thread's requests).
    handler: logging.Handler = (
        logging.StreamHandler(sys.__stderr__ or sys.stderr)
        if text == "-"
        else logging.FileHandler(text, encoding="utf-8")
    )
    handler.setFormatter(logging.Formatter("%(message)s"))
    setattr(handler, _MARK, True)
    logger.addHandler(handler)
    return logger


def request_log_configured() -> bool:
    """Whether :func:`configure_request_log` has run in this process."""
    logger = logging.getLogger(LOGGER_NAME)
    return logger.level > logging.INFO or any(getattr(h, _MARK, False) for h in logger.handlers)
