"""``blockbudget serve --data-root s3://…``: a real server process whose block files live on a
local S3 server (moto on 127.0.0.1) ingests a CSV and answers a DP query exactly (huge ε)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pyarrow.fs as pafs

from service.support import exact_counts, flights_csv, free_port, wait_ready

BIG = 100_000.0  # Laplace scale 1e-5: the count is exact to 0.01


def test_serve_with_an_s3_data_root_answers_a_query(s3_root: str, tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    csv = flights_csv(tmp_path / "flights.csv", days=2)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "blockbudget.cli", "serve", "--home", str(home)]
    proc = subprocess.Popen(
        [*command, "--port", str(port), "--data-root", s3_root],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"shown once\): (\S+)", line)
        assert match, line
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, timeout=60)
        h = {"Authorization": f"Bearer {match.group(1)}"}
        with httpx.Client(base_url=url, headers=h, timeout=30) as client:
            assert client.post("/v1/contexts", json={"name": "team"}).status_code == 201
            r = client.post("/v1/streams", json={"name": "flights", "epsilon": 1_000_000})
            assert r.status_code == 201, r.text
            r = client.post(
                "/v1/streams/flights/ingest",
                headers={"Content-Type": "text/csv"},
                content=csv.read_bytes(),
            )
            assert r.status_code == 201, r.text
            r = client.post(
                "/v1/streams/flights/queries/count",
                json={"epsilon": BIG, "context": "team", "last": 2},
            )
            assert r.status_code == 200, r.text
            assert abs(r.json()["value"] - sum(exact_counts(csv).values())) < 0.01
    finally:
        proc.terminate()
        proc.wait(timeout=15)
    fs, base = pafs.FileSystem.from_uri(s3_root)
    infos = fs.get_file_info(pafs.FileSelector(base, recursive=True))
    parts = [i.path for i in infos if i.path.endswith(".parquet")]
    assert len(parts) == 2 and all("/flights/2013-01-0" in p for p in parts)
    assert not (home / "blocks").exists() or not any((home / "blocks").rglob("*.parquet"))
