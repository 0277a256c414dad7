"""Remote ``ingest``: a missing or unreadable file is one clear error (no traceback), a server's
refusal never names its temporary copy, and a Parquet upload leaves no temporary files."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pandas as pd

from .support import invoke, invoke_json


def test_remote_ingest_errors_are_clear(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from service.support import seed, thread_server

    from blockbudget.service import create_app

    seeded = seed(tmp_path / "server-home")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a temp copy would land
    with thread_server(create_app(seeded.platform, keys=seeded.keys, auth_cache_seconds=0)) as url:
        srv = ["--server", url, "--api-key", seeded.owner]
        code, doc = invoke_json("ingest", "flights", str(tmp_path / "missing.csv"), *srv)
        assert code == 2 and doc["error"]["type"] == "DataError", doc
        assert "missing.csv" in doc["error"]["message"]
        r = invoke("ingest", "flights", str(tmp_path / "missing.parquet"), *srv)
        assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
        assert "missing.parquet" in r.output
        bad = tmp_path / "bad.csv"
        bad.write_text("x,y\n1,2\n")  # no time column: the server refuses it
        code, doc = invoke_json("ingest", "flights", str(bad), *srv)
        msg = doc["error"]["message"]
        assert code == 2 and "upload.csv" not in msg and "/tmp" not in msg, msg
        assert "the uploaded rows" in msg, msg
        parquet = tmp_path / "day.parquet"
        rows = pd.read_csv(seeded.csv, parse_dates=["time"]).head(5)
        rows.assign(time=rows["time"] + pd.Timedelta(days=20)).to_parquet(parquet)
        code, doc = invoke_json("ingest", "flights", str(parquet), *srv)
        assert code == 0, doc
    assert list(scratch.iterdir()) == []  # no temporary directory left behind
