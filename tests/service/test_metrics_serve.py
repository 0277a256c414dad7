"""``blockbudget serve --workers 2`` end to end: the metrics folder is emptied and shared by both
workers, the metrics token scrapes, every request is counted whichever worker served it, and the
request log goes to the file named."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from service.support import free_port, wait_ready

TOKEN = "metrics-token-for-the-test"


def test_serve_with_two_workers(tmp_path: Path) -> None:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    (folder / "counter_999999.db").write_bytes(b"not a metrics file")  # a previous run's
    log = tmp_path / "requests.jsonl"
    exe = Path(sys.executable).with_name("blockbudget")
    port = free_port()
    env = {
        **os.environ,
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
        "BLOCKBUDGET_METRICS_TOKEN": TOKEN,
    }
    command = [str(exe), "serve", "--home", str(tmp_path / "h"), "--port", str(port)]
    proc = subprocess.Popen(
        [*command, "--workers", "2", "--request-log", str(log)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=120)
        with httpx.Client(base_url=url, timeout=30) as http:
            for _ in range(20):
                assert http.get("/healthz").status_code == 200
            assert http.get("/metrics").status_code == 401
            r = http.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 200, r.text
        healthz = [
            s.value
            for fam in text_string_to_metric_families(r.text)
            for s in fam.samples
            if s.name == "blockbudget_http_requests_total" and s.labels.get("route") == "/healthz"
        ]
        assert healthz == [21.0]  # the readiness probe and ours, across both workers
        assert not (folder / "counter_999999.db").exists()
        assert any(re.fullmatch(r"counter_\d+\.db", f.name) for f in folder.iterdir())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    lines = [json.loads(x) for x in log.read_text(encoding="utf-8").splitlines()]
    assert [x["route"] for x in lines].count("/healthz") == 21
    assert TOKEN not in log.read_text(encoding="utf-8")
