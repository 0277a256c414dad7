"""Running a benchmark's ``--quick`` form from a test: one helper for every benchmark test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def run_quick(
    script: str, *args: str, env: Mapping[str, str] | None = None, timeout: int = 300
) -> list[dict[str, Any]]:
    """Run ``benchmarks/<script> --quick *args`` with this interpreter (the source tree first on
    ``PYTHONPATH``) and return the JSON lines it printed; a non-zero exit fails the test."""
    path = [str(ROOT / "src"), *sys.path]
    full = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(path)}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--quick", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=True,
        env=full,
    )
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
