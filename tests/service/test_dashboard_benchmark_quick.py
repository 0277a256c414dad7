"""benchmarks/dashboard.py runs in its --quick form: one JSON line per size of unrelated
history, each reading exactly the watched stream's events (8 blocks added, 64 charges) through
the index while the audit log grows, and a summary line. No timing is asserted."""

from __future__ import annotations

from pathlib import Path

from bench_support import run_quick


def test_quick_dashboard_benchmark(tmp_path: Path) -> None:
    lines = run_quick("dashboard.py", "--dir", str(tmp_path))
    rows = [x for x in lines if x["bench"] == "dashboard_history"]
    assert [x["unrelated_events"] for x in rows] == [0, 200, 800]
    assert all(x["watched_events"] == 8 + 64 for x in rows)
    # the log holds the watched stream's 72 events, 16 other blocks, 1 context and the others
    assert [x["log_events"] for x in rows] == [72 + 16 + 1 + n for n in (0, 200, 800)]
    assert all(x["index_ms"] > 0 and x["full_scan_ms"] > 0 for x in rows)
    summary = lines[-1]
    assert summary["bench"] == "summary" and summary["quick"] is True
    assert list(tmp_path.iterdir()) == []  # scratch removed
