"""benchmarks/metrics_scrape.py runs in its --quick form: one JSON line per round, a growing
history under a live set of constant size, and every figure measured."""

from __future__ import annotations

from pathlib import Path

from bench_support import run_quick


def test_quick_metrics_benchmark(tmp_path: Path) -> None:
    lines = run_quick("metrics_scrape.py", "--dir", str(tmp_path))
    assert [x["round"] for x in lines] == [1, 2]
    assert all(x["bench"] == "metrics_scrape" and x["live_blocks"] == 40 for x in lines)
    assert lines[1]["events"] > lines[0]["events"] > 150
    assert lines[1]["retired_blocks"] > lines[0]["retired_blocks"] > 0
    for x in lines:
        assert min(x["first_s"], x["idle_s"], x["incremental_s"], x["http_s"]) > 0
        assert x["http_bytes"] > 1000
