"""A DP release imports only the parts of OpenDP it uses: never ``opendp.prelude``'s extras
(scikit-learn, polars), which cost seconds of CPU and ~150 MiB in every process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

SCRIPT = textwrap.dedent(
    """
    import json, sys
    from datetime import timedelta
    import pyarrow as pa
    from blockbudget.budget import Budget
    from blockbudget.mechanisms import statistics as stats
    from blockbudget.platform import Last, Platform
    from blockbudget.store import Blocking, Unit

    p = Platform(sys.argv[1])
    p.add_context("c")
    p.create_stream("s", policy=Budget(epsilon=1),
                    blocking=Blocking(unit=Unit.TIME, column="t", window=timedelta(days=1)))
    p.ingest("s", pa.table({"t": pa.array([0, 86_400_000_000], pa.timestamp("us", "UTC"))}))
    with p.request("s", blocks=Last(2), budget=Budget(epsilon=0.5), context="c") as g:
        out = stats.dp_count(g, g.data, epsilon=0.5)
    heavy = sorted({m.split(".")[0] for m in sys.modules} & {"sklearn", "polars", "opendp"})
    print(json.dumps({"secure": out.secure_noise, "loaded": heavy,
                      "prelude": "opendp.prelude" in sys.modules}))
    """
)


def test_dp_count_does_not_import_sklearn(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "home")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {"secure": True, "loaded": ["opendp"], "prelude": False}
