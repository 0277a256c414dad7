"""benchmarks/service.py runs in its --quick form: JSON lines for the raw baseline and for 1, 16
and 64 HTTP clients, with the overspend check passing after every run."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "service.py"


def test_quick_service_benchmark(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--requests", "32", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.strip()]
    raw = [x for x in lines if x["bench"] == "raw_txn"]
    assert len(raw) == 8 and all(x["backend"] == "sqlite" and x["tx_per_s"] > 0 for x in raw)
    assert [x["when"] for x in raw] == ["before", "after"] * 4
    http = [x for x in lines if x["bench"] == "http_charge"]
    batch = [x for x in lines if x["bench"] == "http_charge_batch"]
    runs = [x for x in lines if x["bench"] in ("http_charge", "http_charge_batch")]
    # each configuration's ratio uses the higher raw rate measured right before and after it
    for k, x in enumerate(runs):
        before, after = raw[2 * k]["tx_per_s"], raw[2 * k + 1]["tx_per_s"]
        assert (x["raw_before"], x["raw_after"]) == (before, after)
        assert x["raw_tx_per_s"] == max(before, after)
    assert [x["clients"] for x in http] == [1, 16, 64]
    assert len(batch) == 1 and batch[0]["clients"] == 64 and batch[0]["failed"] == 0
    assert batch[0]["overspend_blocks"] == 0 and batch[0]["verify_ok"] is True
    total = 0
    for x in http:
        total += x["charges"]
        assert x["failed"] == 0 and x["charges_per_s"] > 0
        assert 0 < x["p50_ms"] <= x["p99_ms"]
        assert abs(x["ratio_vs_raw"] - x["charges_per_s"] / x["raw_tx_per_s"]) < 0.01
        assert x["overspend_blocks"] == 0 and x["verify_ok"] is True
    # every acknowledged charge is one audit event (after the setup's events)
    assert http[-1]["events"] - http[0]["events"] == total - http[0]["charges"]
    summary = lines[-1]
    assert summary["bench"] == "summary" and summary["quick"] is True
    assert summary["overspend_blocks"] == 0 and summary["all_verified"] is True
    assert summary["ratio_vs_raw_at_64_clients"]["sqlite"] == http[-1]["ratio_vs_raw"]
    assert list(tmp_path.iterdir()) == []  # scratch removed
