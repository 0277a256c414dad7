"""benchmarks/eligibility.py --quick runs; restricted tasks are served and stay in their blocks."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_eligibility_benchmark_quick() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "eligibility.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
        cwd=ROOT,
    )
    rows = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    runs = {(r["scheduler"], r["tasks_may_use"]): r for r in rows if r["bench"] == "eligibility"}
    names = {name for name, _ in runs}
    assert {"fcfs", "online-threshold", "mixed-threshold", "sage-block-conserve"} <= names
    for name in names:
        assert runs[(name, "newest-10")]["allocated"] > 0
        assert runs[(name, "any")]["tasks"] == runs[(name, "newest-10")]["tasks"] == 300
