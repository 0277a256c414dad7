"""The ledger benchmark runs in its --quick form and prints well-formed JSON lines."""

from __future__ import annotations

from pathlib import Path

from bench_support import run_quick


def test_quick_benchmark_prints_json_lines(tmp_path: Path) -> None:
    lines = run_quick("ledger.py", "--dir", str(tmp_path))
    rows = [x for x in lines if x["bench"] == "ledger_charge"]
    assert {(r["accounting"], r["blocks_per_charge"]) for r in rows} == {
        (acc, n) for acc in ("basic", "rdp") for n in (1, 10, 100)
    }
    for r in rows:
        assert {"ledger_per_s", "raw_per_s", "ratio", "charges", "nproc", "python"} <= r.keys()
        assert r["ledger_per_s"] > 0 and r["raw_per_s"] > 0
        assert r["ratio_min"] <= r["ratio"] <= r["ratio_max"]
        # one round in --quick: the paired ratio is the ratio of the two rates
        assert abs(r["ratio_of_medians"] - r["ledger_per_s"] / r["raw_per_s"]) < 0.01
        assert abs(r["ratio"] - r["ratio_of_medians"]) < 0.01
    summary = [x for x in lines if x["bench"] == "summary"]
    assert len(summary) == 1 and summary[0]["quick"] is True
    assert summary[0]["min_single_block_ratio"] == min(
        r["ratio"] for r in rows if r["blocks_per_charge"] == 1
    )
    assert list(tmp_path.iterdir()) == []  # the databases are cleaned up
