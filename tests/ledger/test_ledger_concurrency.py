"""Many processes against one SQLite file (and one PostgreSQL database when configured):
8 spawned processes × 500 operations each (direct charges, reserves, draws on subsets of the
reservations, releases) over random overlapping subsets of 10 blocks (BASIC and RDP) in two
contexts, with capacities small enough that many requests are refused. Afterwards: no block
overspent in any context, the stored charged vectors equal the sums of the acknowledged
charges, nothing is left reserved, and verify() passes."""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from ledger_support import BACKENDS, POSTGRES_URL, postgres_schema
from ledger_workers import MP_BLOCKS, MP_CONTEXTS, mp_worker

from blockbudget.accounting import Accounting, add_vectors, make_filter
from blockbudget.budget import Budget
from blockbudget.ledger import EventKind, Ledger

PROCESSES = 8
OPS = 500

BASIC_CAP = Budget(epsilon=1.0)
RDP_CAP = Budget(epsilon=1.0, delta=1e-5)


def run_workers(url: str, tmp_path: Path, ledger: Ledger) -> list[dict[str, object]]:
    ctx = multiprocessing.get_context("spawn")
    outs = [tmp_path / f"worker{w}.json" for w in range(PROCESSES)]
    procs = [
        ctx.Process(target=mp_worker, args=(url, w, OPS, str(outs[w]))) for w in range(PROCESSES)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    assert [p.exitcode for p in procs] == [0] * PROCESSES
    return [json.loads(o.read_text()) for o in outs]


@pytest.mark.parametrize("backend_name", BACKENDS)
def test_many_processes_never_overspend(backend_name: str, tmp_path: Path) -> None:
    if backend_name == "sqlite":
        url = f"sqlite:///{tmp_path / 'mp.db'}"
        check(url, tmp_path, lambda: Ledger(url))
    else:
        assert POSTGRES_URL is not None
        with postgres_schema() as args:
            # libpq reads PGOPTIONS (here: the test's search_path) in every spawned child.
            old = os.environ.get("PGOPTIONS")
            os.environ["PGOPTIONS"] = args["options"]
            try:
                check(POSTGRES_URL, tmp_path, lambda: Ledger(POSTGRES_URL))
            finally:
                if old is None:
                    del os.environ["PGOPTIONS"]
                else:
                    os.environ["PGOPTIONS"] = old


def check(url: str, tmp_path: Path, open_ledger: Callable[[], Ledger]) -> None:
    ledger = open_ledger()
    for name in MP_CONTEXTS:
        ledger.add_context(name)
    basic, rdp = MP_BLOCKS[:5], MP_BLOCKS[5:]
    ledger.add_blocks(basic, stream="mp", capacity=BASIC_CAP, accounting=Accounting.BASIC)
    ledger.add_blocks(rdp, stream="mp", capacity=RDP_CAP, accounting=Accounting.RDP)
    results = run_workers(url, tmp_path, ledger)

    filters = {b: make_filter(Accounting.BASIC, capacity=BASIC_CAP) for b in basic}
    filters.update({b: make_filter(Accounting.RDP, capacity=RDP_CAP) for b in rdp})
    expected: dict[tuple[str, str], tuple[int, ...]] = {}
    acked_ids = []
    for res in results:
        for a in res["acked"]:  # type: ignore[attr-defined]
            acked_ids.append(a["id"])
            for b in a["blocks"]:
                f = filters[b]
                key = (b, a["ctx"])
                expected[key] = add_vectors(
                    expected.get(key, f.zero()), f.features(Budget(epsilon=a["eps"]))
                )
    refused = sum(int(r["refused"]) for r in results)  # type: ignore[call-overload]
    assert refused > 300, "capacities should be small enough that budgets run out"
    assert len(acked_ids) > 1000

    states = [s for name in MP_CONTEXTS for s in ledger.states(context=name)]
    assert len(states) == len(MP_BLOCKS) * 2
    exhausted = 0
    for s in states:
        f = filters[s.block]
        assert s.charged == expected.get((s.block, s.context), f.zero())
        assert s.reserved == f.zero()
        assert f.fits(add_vectors(s.charged, s.reserved))
        exhausted += s.remaining_fraction < 0.05
    assert exhausted >= 1
    charged_events = [e for e in ledger.events() if e.kind is EventKind.CHARGED]
    assert sorted(e.request_id or "" for e in charged_events) == sorted(acked_ids)
    report = ledger.verify()
    assert report.ok, report.problems[:5]
    ledger.dispose()
