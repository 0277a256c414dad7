"""No text of an exception raised while touching data reaches a principal: a cell value quoted
by a failure raised while a pipeline or a query touches rows shows up in the server log, never
in a response — not to the analyst, not to the data's owner — and the failure carries a stable
code."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from fastapi.testclient import TestClient

from blockbudget.apps.flights.pipelines import PIPELINE_COLUMNS
from blockbudget.data.flights import load_flights
from blockbudget.errors import DataError
from blockbudget.service import Permission, create_app
from service.support import Seeded

MARKER = "LEAKMARKER-7f3a"


def _flights_with_marker(path: Path) -> bytes:
    """One day of real flights whose ``distance`` column holds one text cell: MARKER."""
    frame = load_flights(columns=list(PIPELINE_COLUMNS))
    t = frame["sched_dep_datetime"]
    lo = pd.Timestamp(2013, 2, 1)
    day = frame[(t >= lo) & (t < lo + pd.Timedelta(days=1))].copy()
    day["time"] = day["sched_dep_datetime"]
    day["distance"] = day["distance"].astype(object)
    day.iloc[5, day.columns.get_loc("distance")] = MARKER
    day.to_csv(path, index=False)
    return path.read_bytes()


def _settle(client: TestClient, headers: dict[str, str], job: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        body: dict[str, Any] = client.get(f"/v1/pipelines/{job}", headers=headers).json()
        if body["state"] not in ("queued", "training") or time.monotonic() > deadline:
            return body
        time.sleep(0.05)


def test_a_cell_value_in_a_failing_pipeline_or_query_reaches_no_response(
    seeded: Seeded,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.ERROR, logger="blockbudget.service")
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    ha, ho = seeded.headers(seeded.analyst), seeded.headers(seeded.owner)
    seen: list[str] = []  # every response body either principal received
    with TestClient(app, raise_server_exceptions=False) as client:

        def call(method: str, path: str, headers: dict[str, str], **kw: Any) -> Any:
            r = client.request(method, path, headers=headers, **kw)
            seen.append(r.text)
            return r

        r = call("POST", "/v1/streams", ho, json={"name": "leaky", "epsilon": 8.0})
        assert r.status_code == 201, r.text
        r = call(
            "POST",
            "/v1/streams/leaky/ingest",
            {**ho, "Content-Type": "text/csv"},
            content=_flights_with_marker(tmp_path / "leaky.csv"),
        )
        assert r.status_code == 201, r.text
        seen.pop()  # the owner's own upload echoed back would be fine; it is not the point
        seeded.keys.grant("ana", "leaky", Permission.READ)
        seeded.keys.set_contexts("olga", ("team-a",))
        job = {"kind": "average-speed", "target": 150.0, "context": "team-a"}
        ids = []
        for h in (ha, ho):
            r = call("POST", "/v1/streams/leaky/pipelines", h, json=job)
            assert r.status_code == 201, r.text
            ids.append((h, r.json()["id"]))
        for h, job_id in ids:  # preprocessing is total: the text cell's row is dropped
            body = _settle(client, h, job_id)
            assert body["state"] != "failed", body
            call("GET", f"/v1/pipelines/{job_id}", h)

        # A pipeline that does fail while touching rows (here a conversion quoting the cell,
        # as pandas does) carries a stable code and our message, never the exception's text.
        def quote_cell(*_: Any, **__: Any) -> Any:
            raise ValueError(f"could not convert string to float: {MARKER!r}")

        with monkeypatch.context() as patch:
            patch.setattr("blockbudget.apps.flights.features.numeric", quote_cell)
            failing = []
            for h in (ha, ho):
                r = call("POST", "/v1/streams/leaky/pipelines", h, json=job)
                assert r.status_code == 201, r.text
                failing.append((h, r.json()["id"]))
            for h, job_id in failing:
                body = _settle(client, h, job_id)
                assert body["state"] == "failed", body
                assert MARKER not in str(body["error"]), body
                assert body["error"]["code"] == "pipeline_failed_data", body
                assert "server log" in body["error"]["message"]
                call("GET", f"/v1/pipelines/{job_id}", h)
        for h in (ha, ho):
            call("GET", "/v1/pipelines", h)
            call("GET", "/v1/dashboard?stream=leaky", h)
            call("GET", "/v1/streams/leaky/blocks?context=team-a", h)
            for kind in ("count", "sum", "mean", "histogram"):
                q = {"epsilon": 0.1, "context": "team-a", "last": 1, "column": "distance"}
                call(
                    "POST",
                    f"/v1/streams/leaky/queries/{kind}",
                    h,
                    json={**q, "lower": 0, "upper": 5000, "categories": ["17", "200"]},
                )

        # A query whose statistic chokes on a cell (as a NumPy conversion wrapped in a
        # DataError does) answers with a stable code, not the text.
        def choke(*_: Any, **__: Any) -> Any:
            raise DataError(
                f"values must be numeric: could not convert string to float: {MARKER!r}"
            )

        monkeypatch.setattr("blockbudget.service.queries.aggregate", choke)
        for h in (ha, ho):
            r = call(
                "POST",
                "/v1/streams/leaky/queries/mean",
                h,
                json={
                    "epsilon": 0.1,
                    "context": "team-a",
                    "last": 1,
                    "column": "air_time",
                    "lower": 0,
                    "upper": 500,
                },
            )
            assert r.status_code == 422 and r.json()["code"] == "query_failed_data", r.text

        # Any other unexpected exception: a 500 with a stable code, nothing of its text.
        def crash(*_: Any, **__: Any) -> Any:
            raise RuntimeError(f"broken near {MARKER}")

        monkeypatch.setattr("blockbudget.service.queries.aggregate", crash)
        monkeypatch.setattr("blockbudget.platform.Platform.blocks", crash)
        for h in (ha, ho):
            r = call("GET", "/v1/streams/leaky/blocks", h)
            assert r.status_code == 500 and r.json()["code"] == "internal_error", r.text
            r = call(
                "POST",
                "/v1/streams/leaky/queries/count",
                h,
                json={"epsilon": 0.1, "context": "team-a", "last": 1},
            )
            assert r.status_code == 422 and r.json()["code"] == "query_failed_data", r.text
    leaks = [text for text in seen if MARKER in text]
    assert not leaks, leaks
    assert MARKER in caplog.text  # the operator has the cause
