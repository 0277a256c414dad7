"""Ingest over HTTP: ``POST /v1/streams/{stream}/ingest`` (a stream's owners and admins).

The body is CSV (``text/csv``) or JSON records (``application/json``, :class:`IngestIn`). Every
ingest has an id: ``ingest_id`` (a JSON field, or the query parameter of the same name for
either body) or by default the content hash of the rows. A new ingest answers 201 with what it
did; a repeat of a committed ingest changes nothing and answers 200 with ``"repeat": true`` and
the first ingest's result (so a client may retry an ingest whose answer it lost); the same id
with other content is a 409. ``on_overlap`` (``refuse``, the default; ``skip-duplicates``;
``append``) says what happens to rows equal to rows the stream already holds under their block
key: a refusal is a 409 that counts them. The answer's ``overlap`` reports the rows whose block
key already had rows and the exact duplicates found.

The duplicate check tells its caller whether given rows are stored — row-level knowledge
outside any DP guarantee, which is why ingest needs ``own`` (granted to the data's custodians
only). To keep it visible and small: per-key duplicate counts (in the 409 and in ``overlap``)
go to admins only, an owner sees the total; every ingest that found duplicates is logged on
the ``blockbudget.admin`` logger (principal, stream, policy, counts; never values).
"""

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from fastapi import Depends, FastAPI, Query, Request, Response

from blockbudget.errors import DataError, DuplicateRowsError, InvalidRequestError
from blockbudget.platform import Platform
from blockbudget.service import schemas as sc
from blockbudget.service.access import Authenticator, require_stream
from blockbudget.service.admin_views import log_admin
from blockbudget.service.auth import Principal, Role
from blockbudget.service.failures import LEDGER_REFUSALS, concealing
from blockbudget.service.params import INGEST_ID_PATTERN, StreamPath
from blockbudget.store import IngestReport, OnOverlap

__all__ = ["ingest_out", "register_ingest_routes"]


def ingest_out(report: IngestReport, *, per_key: bool = True) -> sc.IngestOut:
    """The answer to an ingest (new or repeat); ``per_key`` False leaves out the per-key
    duplicate counts (``overlap.duplicates`` is None: an owner's answer)."""
    o = report.overlap
    return sc.IngestOut(
        rows=report.rows,
        new_blocks=list(report.new_blocks),
        appended_blocks=list(report.appended_blocks),
        late_rows=report.late_rows,
        dropped_rows=report.dropped_rows,
        sealed_blocks=list(report.sealed_blocks),
        ingest_id=report.ingest_id,
        content_hash=report.content_hash,
        repeat=report.repeat,
        ingested_at=report.ingested_at,
        overlap=sc.OverlapOut(
            policy=o.policy.value,
            rows=o.rows,
            keys=dict(o.keys),
            checked=o.checked,
            duplicate_rows=o.duplicate_rows,
            duplicates=dict(o.duplicates) if per_key else None,
            skipped_rows=o.skipped_rows,
        ),
    )


def _ingest_body() -> dict[str, Any]:
    """The OpenAPI form of the body the route reads by hand: CSV text or JSON records."""
    records = sc.IngestIn.model_json_schema(ref_template="#/components/schemas/{model}")
    records.pop("$defs", None)  # OnOverlap is in the components (the query parameter's type)
    return {
        "required": True,
        "content": {
            "text/csv": {"schema": {"type": "string", "minLength": 1}},
            "application/json": {"schema": records},
        },
    }


_INGEST_BODY = _ingest_body()


def register_ingest_routes(
    app: FastAPI, *, platform: Platform, authenticate: Authenticator
) -> None:
    """Add ``POST /v1/streams/{stream}/ingest`` to ``app``."""
    Auth = Annotated[Principal, Depends(authenticate)]

    @app.post(
        "/v1/streams/{stream}/ingest",
        tags=["streams"],
        status_code=201,
        responses={200: {"model": sc.IngestOut, "description": "a repeat: nothing changed"}},
        openapi_extra={"requestBody": _INGEST_BODY},
    )
    async def ingest(
        me: Auth,
        stream: StreamPath,
        request: Request,
        response: Response,
        ingest_id: Annotated[
            str | None, Query(min_length=1, max_length=128, pattern=INGEST_ID_PATTERN)
        ] = None,
        on_overlap: Annotated[OnOverlap | None, Query()] = None,
    ) -> sc.IngestOut:
        require_stream(me, stream, own=True)
        kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
        raw = await request.body()
        admin = me.role is Role.ADMIN
        try:
            report = await anyio.to_thread.run_sync(
                _ingest, platform, stream, kind, raw, ingest_id, on_overlap
            )
        except DuplicateRowsError as exc:
            _log_duplicates(me, stream, "refuse", exc.duplicates)
            raise _refusal(stream, exc.duplicates, per_key=admin) from None
        if report.repeat:
            response.status_code = 200
        elif report.overlap.duplicate_rows:
            _log_duplicates(me, stream, report.overlap.policy.value, report.overlap.duplicates)
        return ingest_out(report, per_key=admin)


def _log_duplicates(me: Principal, stream: str, policy: str, found: Mapping[str, int]) -> None:
    """Make duplicate checks visible to admins: who tested which stream, how many rows."""
    log_admin(
        me.name,
        "ingest-found-duplicates",
        stream,
        on_overlap=policy,
        duplicate_rows=sum(found.values()),
        per_key=dict(sorted(found.items())),
    )


def _refusal(stream: str, found: dict[str, int], *, per_key: bool) -> DuplicateRowsError:
    """The 409 of a refused duplicate: the total, and per block key for an admin only."""
    where = f", per block key: {dict(sorted(found.items()))}" if per_key else ""
    return DuplicateRowsError(
        f"{sum(found.values())} of the uploaded rows repeat rows stream {stream!r} already "
        f"holds (every column equal){where}; nothing was ingested (on_overlap refuse). Ingest "
        "with on_overlap skip-duplicates to leave them out, or append to store them again",
        duplicates=found if per_key else None,
    )


def _ingest(
    platform: Platform,
    stream: str,
    kind: str,
    raw: bytes,
    ingest_id: str | None,
    on_overlap: OnOverlap | None,
) -> IngestReport:
    import pandas as pd
    import pydantic

    platform.stream(stream)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "upload.csv"
        if kind in ("text/csv", "application/csv"):
            path.write_bytes(raw)
        elif kind == "application/json":
            try:
                body = sc.IngestIn.model_validate_json(raw)
            except pydantic.ValidationError as exc:
                raise InvalidRequestError(f"ingest body: {exc.errors()[:3]}") from None
            ingest_id = _one("ingest_id", ingest_id, body.ingest_id)
            on_overlap = _one("on_overlap", on_overlap, body.on_overlap)
            pd.DataFrame.from_records(body.records).to_csv(path, index=False)
        else:
            raise InvalidRequestError(
                f"ingest takes text/csv or application/json records, not {kind or 'nothing'!r}"
            )
        # The rows are the caller's own; stored rows are read only to find duplicates, and
        # a failure there must not show their text.
        with concealing("ingest", passing=(*LEDGER_REFUSALS, DataError, InvalidRequestError)):
            try:
                return platform.ingest(
                    stream,
                    path,
                    format="csv",
                    ingest_id=ingest_id,
                    on_overlap=on_overlap or OnOverlap.REFUSE,
                )
            except (DataError, InvalidRequestError) as exc:
                raise _without_path(exc, path) from None


def _without_path(exc: DataError | InvalidRequestError, path: Path) -> Exception:
    """``exc`` with the server's temporary copy of the upload named as "the uploaded rows" (a
    client never sees the server's file paths)."""
    text = str(exc)
    told = text.replace(f"file {str(path)!r}", "the uploaded rows").replace(
        str(path), "the uploaded rows"
    )
    return exc if told == text else type(exc)(told)


def _one(name: str, query: Any, body: Any) -> Any:
    """A parameter given in the query or the JSON body (refused when both differ)."""
    if query is not None and body is not None and query != body:
        raise InvalidRequestError(
            f"{name} given twice with different values: {query!r} (query) and {body!r} (body)"
        )
    return body if body is not None else query
