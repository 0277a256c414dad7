"""The live dashboard in a real browser: headless Chromium (Debian ``chromium``, driven by
playwright) loads the page from a running server for a seeded platform, shows every block with
its budget per context and the heatmaps, refreshes live after a new charge, loads nothing from
outside the service, and leaves a screenshot in ``results/service/dashboard.png``."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from blockbudget.service import Permission, create_app
from blockbudget.service.dashboard import STATIC_DIR
from service.support import seed, thread_server

CHROMIUM = os.environ.get("BLOCKBUDGET_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
RESULTS = Path(__file__).resolve().parents[2] / "results" / "service"


def _full_flights(path: Path) -> bytes:
    """One day of real flights with the columns the training pipelines read."""
    import pandas as pd

    from blockbudget.apps.flights.pipelines import PIPELINE_COLUMNS
    from blockbudget.data.flights import load_flights

    frame = load_flights(columns=list(PIPELINE_COLUMNS))
    t = frame["sched_dep_datetime"]
    keep = frame[(t >= pd.Timestamp(2013, 3, 1)) & (t < pd.Timestamp(2013, 3, 2))].copy()
    keep["time"] = keep["sched_dep_datetime"]
    path.parent.mkdir(parents=True, exist_ok=True)
    keep.to_csv(path, index=False)
    data = path.read_bytes()
    path.unlink()
    return data


def test_static_files_ship_in_the_package() -> None:
    names = {p.name for p in STATIC_DIR.iterdir()}
    assert {"dashboard.html", "dashboard.js", "dashboard.css", "charts.js"} <= names
    for path in STATIC_DIR.iterdir():  # no CDN, no foreign origin
        # the SVG namespace is a name, never fetched
        text = path.read_text().replace('"http://www.w3.org/2000/svg"', "")
        assert "http://" not in text and "https://" not in text and "//cdn" not in text, path


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install chromium)",
)
def test_dashboard_in_headless_chromium(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    # One backend (SQLite) is enough for the browser; the data path runs on both elsewhere.
    seeded = seed(tmp_path / "home")

    platform = seeded.platform
    app = create_app(platform, keys=seeded.keys, auth_cache_seconds=0)
    blocks = [b.block_id for b in platform.store.blocks("flights")]
    with TestClient(app) as api:
        h_a, h_root = seeded.headers(seeded.analyst), seeded.headers(seeded.admin)
        for eps, last in ((0.3, 4), (0.4, 2)):
            r = api.post(
                "/v1/streams/flights/queries/count",
                json={"epsilon": eps, "context": "team-a", "last": last},
                headers=h_a,
            )
            assert r.status_code == 200, r.text
        # Block 0 nearly spent in every context (retiring); block 1 spent and retired.
        for block, eps in ((blocks[0], 0.95), (blocks[1], 1.0)):
            for ctx, used in (("team-a", 0.3), ("team-b", 0.0)):
                r = api.post(
                    "/v1/streams/flights/charges",
                    json={"blocks": [block], "epsilon": round(eps - used, 6), "context": ctx},
                    headers=h_root,
                )
                assert r.status_code == 200, r.text
        r = api.post("/v1/streams/flights/retire", headers=h_root)
        assert r.json() == {"retired": [blocks[1]]}
        expected = {
            b["block_id"]: b for b in api.get("/v1/streams/flights/blocks", headers=h_root).json()
        }
    outside: list[str] = []
    with thread_server(app) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})

            def guard(route: object) -> None:
                req = route.request  # type: ignore[attr-defined]
                if not req.url.startswith(url):
                    outside.append(req.url)
                    route.abort()  # type: ignore[attr-defined]
                else:
                    route.continue_()  # type: ignore[attr-defined]

            page.route("**/*", guard)
            page.goto(f"{url}/dashboard#key={seeded.admin}&stream=flights")
            page.wait_for_selector("body[data-loaded=true]", timeout=20_000)
            rows = page.locator("#blocks tbody tr")
            assert rows.count() == len(blocks)
            for b in blocks:
                row = page.locator(f'#blocks tbody tr[data-block="{b}"]')
                assert row.count() == 1
                for ctx in ("team-a", "team-b"):
                    cell = row.locator(f'td[data-context="{ctx}"] .remaining')
                    assert cell.inner_text() == expected[b]["remaining_display"][ctx]
                assert str(expected[b]["rows"]) in row.inner_text()  # admins see row counts
            # one heatmap per context: a cell per block and time bucket (24 by default)
            for ctx in ("team-a", "team-b"):
                cells = page.locator(f'.heat[data-context="{ctx}"] svg rect.cell')
                assert cells.count() == 24 * len(blocks)
            assert "retiring" in page.locator("#summary").inner_text()
            retiring = page.locator("#retiring").inner_text()
            assert f"{blocks[0]} — under 10% left in every open context" in retiring
            for ctx in ("team-a", "team-b"):  # and per context, as every viewer of it sees it
                assert f"{blocks[0]} — under 10% left in {ctx}" in retiring
            assert (
                "1 in team-a, 1 in team-b, 1 in every open context"
                in page.locator("#summary").inner_text()
            )
            assert f"{blocks[1]} — retired" in retiring
            assert (
                "retired"
                in page.locator(f'#blocks tbody tr[data-block="{blocks[1]}"]').inner_text()
            )
            RESULTS.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(RESULTS / "dashboard.png"), full_page=True)
            # Live refresh: a new charge shows up without reloading the page.
            with TestClient(app) as api:
                r = api.post(
                    "/v1/streams/flights/charges",
                    json={"blocks": [blocks[-1]], "epsilon": 0.25, "context": "team-a"},
                    headers=h_a,
                )
                assert r.status_code == 200, r.text
                now = api.get("/v1/streams/flights/blocks", headers=h_root).json()[-1]
            cell = (
                f'#blocks tbody tr[data-block="{blocks[-1]}"] td[data-context="team-a"] .remaining'
            )
            page.wait_for_function(
                "([sel, text]) => document.querySelector(sel)?.textContent === text",
                arg=[cell, now["remaining_display"]["team-a"]],
                timeout=10_000,
            )
            # The pipeline queue: a privacy-adaptive job on a stream with the flights columns.
            with TestClient(app) as api:
                r = api.post("/v1/streams", headers=h_root, json={"name": "full", "epsilon": 4})
                assert r.status_code == 201
                r = api.post(
                    "/v1/streams/full/ingest",
                    headers={**h_root, "Content-Type": "text/csv"},
                    content=_full_flights(RESULTS.parent / "full-flights.csv"),
                )
                assert r.status_code == 201, r.text
                seeded.keys.grant("ana", "full", Permission.READ)
                r = api.post(
                    "/v1/streams/full/pipelines",
                    headers=h_a,
                    json={"kind": "average-speed", "target": 150, "context": "team-a"},
                )
                assert r.status_code == 201, r.text
                job = r.json()["id"]
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    state = api.get(f"/v1/pipelines/{job}", headers=h_a).json()
                    if state["state"] not in ("queued", "training"):
                        break
                    time.sleep(0.1)
            page.goto(f"{url}/dashboard#key={seeded.admin}&stream=full")
            page.reload()
            page.wait_for_selector("#extra-pipelines tr", timeout=20_000)
            table = page.locator("#extra-pipelines").inner_text()
            assert job in table and state["state"] in table
            outcomes = " ".join(a["outcome"] for a in state["attempts"])
            # each attempt's ACCEPT / REJECT / RETRY
            assert outcomes and outcomes in table, repr(state)
            page.screenshot(path=str(RESULTS / "dashboard-pipelines.png"), full_page=True)
            # The scheduler queue: an analyst's task, decided by the service's scheduler.
            with TestClient(app) as api:
                r = api.post(
                    "/v1/streams/flights/tasks",
                    headers=h_a,
                    json={"epsilon": 0.01, "context": "team-a", "last": 1},
                )
                assert r.status_code == 201, r.text
                task = r.json()
            # An analyst's view: its context only, no row counts, its own tasks.
            page.goto(f"{url}/dashboard#key={seeded.analyst}&stream=flights")
            page.reload()
            page.wait_for_selector("body[data-loaded=true]", timeout=20_000)
            queue_table = page.locator("#extra-scheduler_queue").inner_text()
            assert task["id"][:12] in queue_table and task["state"] in queue_table
            assert page.locator(".heat").count() == 1
            assert "rows" not in page.locator("#blocks thead").inner_text()
        finally:
            browser.close()
    assert not outside, outside
    assert (RESULTS / "dashboard.png").stat().st_size > 10_000
    seeded.platform.close()
