"""benchmarks/watermark.py runs in its --quick form: per round and policy a JSON line, and per
policy and operation the paired ratio to the platform without a mark."""

from __future__ import annotations

from pathlib import Path

from bench_support import run_quick


def test_quick_watermark_benchmark(tmp_path: Path) -> None:
    lines = run_quick("watermark.py", "--dir", str(tmp_path))
    rounds = [x for x in lines if x["bench"] == "watermark_round"]
    assert {(x["op"], x["policy"]) for x in rounds} == {
        (op, policy) for op in ("query", "charge") for policy in ("off", "charge", "commit", "100")
    }
    assert len(rounds) == 2 * 2 * 4 and all(x["median_ms"] > 0 for x in rounds)
    rows = {(x["op"], x["policy"]): x for x in lines if x["bench"] == "watermark"}
    assert len(rows) == 8
    for (_, policy), x in rows.items():
        assert x["ratio_min"] <= x["ratio"] <= x["ratio_max"] and x["quick"] is True
        if policy == "off":
            assert x["ratio"] == 1.0 and x["marks_written"] == 0
    # every charge writes a mark under 'charge' and 'commit'; '100' batches them
    assert rows[("query", "charge")]["marks_written"] >= 2 * 10 * 2
    assert rows[("query", "commit")]["marks_written"] > rows[("query", "charge")]["marks_written"]
    assert rows[("query", "100")]["marks_written"] < rows[("query", "charge")]["marks_written"]
    assert list(tmp_path.iterdir()) == []  # the homes are cleaned up
