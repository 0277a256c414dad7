"""The overlap-check benchmark runs in its --quick form and prints well-formed JSON lines."""

from __future__ import annotations

from bench_support import run_quick


def test_quick_benchmark_prints_json_lines() -> None:
    lines = run_quick("ingest_overlap.py")
    assert [(r["op"], r["blocks"], r["input_rows"]) for r in lines] == [
        ("ingest_overlap", 10, 200),
        ("ingest_overlap", 200, 200),
    ]
    for row in lines:
        assert row["append_seconds"] > 0 and row["check_seconds"] > 0
        assert abs(row["ratio"] - row["check_seconds"] / row["append_seconds"]) < 0.01
