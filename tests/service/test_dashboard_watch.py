"""What an operator watches, asserted on the page rendered by headless Chromium: labelled axes
and a colour legend on the heatmaps, a tooltip per cell with the block, context, time bucket and
exact remaining budget, one line per context with the right last value, and the low-budget alert
banner appearing and disappearing as the threshold moves across a context's remaining budget.
Leaves a screenshot in a temporary folder (``blockbudget-dashboard/dashboard-watch.png``)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from blockbudget.service import create_app
from service.support import Seeded, seed, thread_server
from service.test_dashboard_browser import ARGS, CHROMIUM

SHOTS = Path(tempfile.gettempdir()) / "blockbudget-dashboard"
#: Charges (context, block index, ε) on the seeded flights stream (4 blocks of ε_g = 1).
CHARGES = (("team-a", 0, "0.5"), ("team-a", 1, "0.25"), ("team-b", 2, "1"))


def charged(tmp_path: Path) -> tuple[Seeded, Any, list[str]]:
    seeded = seed(tmp_path / "home")
    app = create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)
    blocks = [b.block_id for b in seeded.platform.store.blocks("flights")]
    with TestClient(app) as api:
        for ctx, i, eps in CHARGES:
            r = api.post(
                "/v1/streams/flights/charges",
                json={"blocks": [blocks[i]], "epsilon": eps, "context": ctx},
                headers=seeded.headers(seeded.admin),
            )
            assert r.status_code == 200, r.text
    return seeded, app, blocks


def set_threshold(page: Any, percent: str) -> None:
    page.locator("#alert-below").fill(percent)
    page.locator("#alert-below").dispatch_event("change")


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(),
    reason=f"no Chromium at {CHROMIUM}: run scripts/ensure-chromium.sh (apt-get install chromium)",
)
def test_axes_legend_tooltips_trend_and_alert(tmp_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    seeded, app, blocks = charged(tmp_path)
    # remaining after the charges, by hand: team-a 0.5, 0.75, 1, 1; team-b 1, 1, 0, 1
    expected_last = {"team-a": (0.5 + 0.75 + 1 + 1) / 4, "team-b": (1 + 1 + 0 + 1) / 4}
    shown_last = {"team-a": "81.3% left now", "team-b": "75.0% left now"}  # one decimal
    with thread_server(app) as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.goto(f"{url}/dashboard#key={seeded.admin}&stream=flights")
            page.wait_for_selector("body[data-loaded=true]", timeout=20_000)
            for ctx in ("team-a", "team-b"):
                heat = page.locator(f'.heat[data-context="{ctx}"] svg')
                # axes: the block names on one, readable UTC times on the other, both titled
                assert heat.locator("text.y-tick").all_text_contents() == blocks
                assert heat.locator("text.y-title").text_content() == "block"
                assert (heat.locator("text.x-title").text_content() or "").startswith(
                    "time (UTC, end of bucket)"
                )
                ticks = heat.locator("text.x-tick").all_text_contents()
                assert len(ticks) >= 2
                assert all(re.fullmatch(r"\d\d:\d\d:\d\d(\.\d)?", t) for t in ticks), ticks
                assert heat.locator("rect.cell[aria-label]").count() == 24 * len(blocks)
            legend = page.locator("#legend svg")
            assert "consumed fraction" in (legend.text_content() or "")
            for mark in ("0%", "50%", "100%", "retired"):
                assert mark in legend.locator("text").all_text_contents()
            assert "0%" in legend.get_attribute("aria-label")  # type: ignore[operator]
            # hover the last bucket of block 0 in team-a: 0.5 of ε_g = 1 spent
            cell = page.locator(
                f'.heat[data-context="team-a"] rect.cell[data-block="{blocks[0]}"]'
                '[data-bucket="23"]'
            )
            cell.hover()
            tip = page.locator("#tooltip")
            tip.wait_for(state="visible", timeout=5_000)
            text = tip.inner_text()
            assert f"block {blocks[0]}" in text and "context team-a" in text
            assert "remaining ε=0.5, δ=0.000001 (50.0% left, 50.0% consumed)" in text
            assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC – ", text), text
            assert cell.get_attribute("aria-label") == text
            assert cell.locator("title").text_content() == text
            # another cell: the tooltip follows
            page.locator(
                f'.heat[data-context="team-b"] rect.cell[data-block="{blocks[2]}"]'
                '[data-bucket="23"]'
            ).hover()
            assert f"block {blocks[2]} · context team-b" in tip.inner_text()
            assert "remaining ε=0, δ=0.000001 (0.0% left" in tip.inner_text()
            # the trend: one line per context, its last point the hand-computed mean
            series = page.locator("#trend path.series")
            assert series.count() == 2
            for ctx, value in expected_last.items():
                path = page.locator(f'#trend path.series[data-context="{ctx}"]')
                assert float(path.get_attribute("data-last") or "nan") == pytest.approx(value)
                label = page.locator(f'#trend text.series-label[data-context="{ctx}"]')
                assert shown_last[ctx] in (label.text_content() or "")
            assert "remaining budget (%)" in (page.locator("#trend").text_content() or "")
            # the default threshold (0.1): team-b's spent block 2 is flagged, team-a is not
            alert = page.locator("#alert")
            assert alert.is_visible()
            assert blocks[2] in alert.locator('li[data-context="team-b"]').inner_text()
            assert alert.locator('li[data-context="team-a"]').count() == 0
            SHOTS.mkdir(parents=True, exist_ok=True)
            cell.hover()
            page.screenshot(path=str(SHOTS / "dashboard-watch.png"), full_page=True)
            # an analyst bound to team-a (least remaining: 0.5) moves the threshold across it
            page.goto(f"{url}/dashboard#key={seeded.analyst}&stream=flights")
            page.reload()
            page.wait_for_selector("body[data-loaded=true]", timeout=20_000)
            assert page.locator("#alert-below").input_value() == "10"
            assert alert.is_hidden()
            set_threshold(page, "60")
            page.wait_for_selector('#alert li[data-context="team-a"]', timeout=10_000)
            item = alert.locator('li[data-context="team-a"]').inner_text()
            assert item.startswith("flights / team-a: 1 block(s), lowest 50.0% left")
            assert blocks[0] in item and blocks[1] not in item  # 0.75 left is not under 60%
            set_threshold(page, "80")
            page.wait_for_selector('#alert li:has-text("2 block(s)")', timeout=10_000)
            set_threshold(page, "40")
            alert.wait_for(state="hidden", timeout=10_000)
            assert page.locator("#trend path.series").count() == 1  # its one context
        finally:
            browser.close()
    assert (SHOTS / "dashboard-watch.png").stat().st_size > 10_000
    seeded.platform.close()
