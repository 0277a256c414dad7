"""Request metrics with several server processes: two uvicorn processes share one multiprocess
folder, and a scrape of either reports the requests both served; a dead worker's counts stay and
its live gauges go."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from subprocess import Popen

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from blockbudget.service.metrics import prepare_multiprocess_dir
from service.support import free_port, seed, wait_ready

FACTORY = "blockbudget.service.server:app_from_env"


@contextmanager
def servers(home: Path, env: dict[str, str], n: int) -> Iterator[list[tuple[str, Popen[bytes]]]]:
    """``n`` uvicorn processes on the service factory, started together."""
    out = []
    try:
        for _ in range(n):
            port = free_port()
            command = [sys.executable, "-m", "uvicorn", "--factory", FACTORY, "--port", str(port)]
            proc = Popen(
                [*command, "--log-level", "warning"], env={**env, "BLOCKBUDGET_HOME": str(home)}
            )
            out.append((f"http://127.0.0.1:{port}", proc))
        for url, _ in out:
            wait_ready(url, timeout=60)
        yield out
    finally:
        for _, proc in out:
            proc.terminate()
        for _, proc in out:
            proc.wait(timeout=15)


def healthz_count(text: str) -> float:
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "blockbudget_http_requests_total" and s.labels == {
                "method": "GET",
                "route": "/healthz",
                "status": "200",
            }:
                return s.value
    return 0.0


def test_one_scrape_counts_the_requests_of_every_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    seeded = seed(home, group_commit=False)
    seeded.platform.close()
    folder = tmp_path / "prometheus"
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(folder))  # restored afterwards
    prepare_multiprocess_dir()  # what serve does before its workers start
    env = {**os.environ, "BLOCKBUDGET_REQUEST_LOG": "off", "BLOCKBUDGET_GROUP_COMMIT": "0"}
    auth = seeded.headers(seeded.admin)
    with servers(home, env, 2) as [(a, _), (b, proc_b)]:
        base = healthz_count(httpx.get(f"{a}/metrics", headers=auth, timeout=30).text)
        assert base >= 2  # each server's readiness probe
        for _ in range(3):
            assert httpx.get(f"{a}/healthz").status_code == 200
        for _ in range(5):
            assert httpx.get(f"{b}/healthz").status_code == 200
        for url in (a, b):
            r = httpx.get(f"{url}/metrics", headers=auth, timeout=30)
            assert r.status_code == 200, r.text
            assert healthz_count(r.text) == base + 8
        live_b = folder / f"gauge_livesum_{proc_b.pid}.db"
        assert live_b.exists()
        proc_b.terminate()
        proc_b.wait(timeout=15)
        r = httpx.get(f"{a}/metrics", headers=auth, timeout=30)
        assert healthz_count(r.text) == base + 8  # a dead worker's counts stay
        assert not live_b.exists()  # its in-flight and leader gauges are gone
        assert "blockbudget_http_requests_in_progress 1.0" in r.text  # the scrape itself


def test_a_server_start_empties_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR", raising=False)
    folder = tmp_path / "prom"
    folder.mkdir()
    (folder / "counter_4242.db").write_bytes(b"old")
    (folder / "histogram_4242.db").write_bytes(b"old")
    (folder / "notes.txt").write_text("an operator's file")
    try:
        assert prepare_multiprocess_dir(folder) == folder
        assert os.environ["PROMETHEUS_MULTIPROC_DIR"] == str(folder)
        assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]
        fresh = prepare_multiprocess_dir(None)  # the variable names it now
        assert fresh == folder
    finally:
        os.environ.pop("PROMETHEUS_MULTIPROC_DIR", None)
