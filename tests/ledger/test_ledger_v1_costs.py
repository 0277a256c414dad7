"""A ledger written before costs carried a version still verifies and reads bit for bit.

``tests/fixtures/v1_rdp_ledger.db`` was written by commit aed7be4 (see
``tests/fixtures/make_v1_rdp_ledger.py``): its RDP costs are stored as ``{"rdp": [...]}``, with
no ``v``, ``kind`` or ``alphas``. They are read on the frozen grid of that version
(:data:`~blockbudget.budget.ALPHAS_V1`); a curve stored on another grid is refused in words.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from blockbudget.accounting import add_vectors, get_rule, make_filter
from blockbudget.budget import ALPHAS, ALPHAS_V1, Budget, RdpCurve, cost_from_json
from blockbudget.errors import InvalidBudgetError
from blockbudget.ledger import EventKind, Ledger

FIXTURE = Path(__file__).parent.parent / "fixtures" / "v1_rdp_ledger.db"
CAPACITY = Budget(epsilon=3, delta="1e-5")


@pytest.fixture
def old_db(tmp_path: Path) -> Path:
    path = tmp_path / "ledger.db"
    shutil.copyfile(FIXTURE, path)
    return path


def _reservation_id(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        (rid,) = conn.execute("SELECT reservation_id FROM ledger_reservations").fetchone()
    return str(rid)


def test_the_fixture_holds_v1_rdp_costs() -> None:
    with sqlite3.connect(FIXTURE) as conn:
        payloads = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM ledger_audit")]
    rdp = [p["cost"] for p in payloads if "cost" in p and "rdp" in p["cost"]]
    assert len(rdp) == 3 and all(set(c) == {"rdp"} for c in rdp)  # no v, kind, alphas
    assert ALPHAS == ALPHAS_V1  # the grid has not moved: the v1 curves read on today's grid


def test_a_v1_ledger_verifies_and_reads_bit_for_bit(old_db: Path) -> None:
    ledger = Ledger(f"sqlite:///{old_db}")
    try:
        report = ledger.verify(full=True)
        assert report.ok, report.problems
        assert report.events == 7 and report.blocks == 2
        f = make_filter("rdp", capacity=CAPACITY)
        gauss, pure = RdpCurve.gaussian(sigma=2.0), Budget(epsilon="0.1")
        lap4, lap8 = RdpCurve.laplace(scale=4.0), RdpCurve.laplace(scale=8.0)
        charged = [e for e in ledger.events() if e.kind is EventKind.CHARGED]
        costs = [cost_from_json(json.loads(e.payload_json)["cost"]) for e in charged]
        assert costs == [gauss, pure, lap8]  # exactly today's curves, read from v1 text
        res = ledger.reservation(_reservation_id(old_db))
        assert res.cost == lap4
        assert get_rule("rdp").cost_from_json(res.cost.to_json()) == lap4  # v2 round trip
        one, two = ledger.state("r/1", "ops"), ledger.state("r/2", "ops")
        assert one.charged == add_vectors(f.features(gauss), f.features(pure))
        assert two.charged == add_vectors(f.features(pure), f.features(lap8))
        # the old log keeps growing in today's form, and the mixed log verifies
        ledger.charge(["r/2"], RdpCurve.gaussian(sigma=4.0), context="ops", request_id="new")
        last = ledger.events()[-1]
        assert json.loads(last.payload_json)["cost"]["kind"] == "rdp"
        assert ledger.verify(full=True).ok
    finally:
        ledger.close()


def test_a_curve_on_another_grid_is_refused_in_words(old_db: Path) -> None:
    other = {"v": 2, "kind": "rdp", "alphas": [2, 4], "rdp": ["0.1", "0.2"]}
    with pytest.raises(InvalidBudgetError, match=r"order grid \[2, 4\] cannot be read"):
        cost_from_json(other)
    with pytest.raises(InvalidBudgetError, match=r"order grid \[2, 4\] cannot be read"):
        get_rule("rdp").cost_from_json(other)
    rid = _reservation_id(old_db)
    with sqlite3.connect(old_db) as conn:  # a row written by a build on another grid
        conn.execute("UPDATE ledger_reservations SET cost = ?", (json.dumps(other),))
    ledger = Ledger(f"sqlite:///{old_db}")
    try:
        with pytest.raises(InvalidBudgetError, match=r"order grid \[2, 4\] cannot be read"):
            ledger.reservation(rid)
    finally:
        ledger.close()
