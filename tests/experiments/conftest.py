"""One ``--quick`` run of each experiment per test session, shared by the tests that read it.

The figure tests check the matplotlib objects and the result tests check rows, notes and CSV
files; running every experiment once for both keeps the suite's time flat. Figures are captured
before ``savefig`` (``test_common.py`` checks that :meth:`ExperimentContext.save_figure` writes
a PNG).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from experiment_support import RUNS, QuickRun, run_quick


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], QuickRun]:
    """``quick_run(name)``: the session's seed-0 quick run of ``name`` (run on first use)."""
    done: dict[str, QuickRun] = {}

    def get(name: str) -> QuickRun:
        if name not in done:
            out = tmp_path_factory.mktemp(name)
            done[name] = run_quick(name, out, runs=RUNS.get(name))
        return done[name]

    return get
