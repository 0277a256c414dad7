"""``Platform.request`` takes the per-row cost and applies group privacy itself: on a user-level
stream with ``rows_per_user = k`` it reserves ``group_cost(budget, k)`` — exactly what its draws
of ``budget`` are charged — and a refused request reserves and charges nothing."""

from __future__ import annotations

import math
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pandas as pd
import pytest
from userids_support import make_known

from blockbudget import Budget
from blockbudget.errors import BudgetExceededError, InvalidBudgetError, NothingAffordableError
from blockbudget.grant import group_cost
from blockbudget.platform import Last, Platform
from blockbudget.store import Blocking, LatePolicy

BLOCK = "visits/u000000-000099"


@pytest.fixture
def users(tmp_path: Path) -> Iterator[Platform]:
    """A user stream with k = 3 rows per user, (ε_g, δ_g) = (1.5, 1e-6), one block."""
    p = Platform(tmp_path / "h", engine="arrow")
    p.add_context("a")
    p.create_stream(
        "visits",
        policy=Budget(epsilon="1.5", delta=1e-6),
        blocking=Blocking.by_user("uid", ids_per_block=100, rows_per_user=3),
        late_policy=LatePolicy.DROP,
    )
    p.ingest("visits", pd.DataFrame({"uid": [1, 1, 2, 3], "v": [1.0, 2.0, 3.0, 4.0]}))
    make_known(p, "visits")  # in a context of its own, closed: "a" keeps its full budget
    yield p
    p.close()


def test_group_size_is_rows_per_user_on_a_user_stream_only(users: Platform, tmp_path: Path) -> None:
    assert users.group_size("visits") == 3
    users.create_stream("t", policy=Budget(epsilon=1), blocking=Blocking.by_time("ts"))
    assert users.group_size("t") == 1


def test_request_reserves_k_times_the_per_row_cost(users: Platform) -> None:
    per_row = Budget(epsilon="0.25", delta=1e-8)
    f = users.filter("visits")
    with users.request("visits", blocks=Last(1), budget=per_row, context="a") as g:
        held = g.reservation.cost
        assert held == group_cost(per_row, 3, accounting="basic") and isinstance(held, Budget)
        assert held.epsilon == Decimal("0.75")  # 3 × 0.25, exact
        assert math.isclose(float(held.delta), 3 * math.exp(2 * 0.25) * 1e-8, rel_tol=1e-9)
        assert users.ledger.state(BLOCK, "a").reserved == f.features(held)
        g.draw(per_row, label="one draw of the per-row cost")  # charged the group cost …
        assert g.spent == held  # … which is all the request reserved
    state = users.ledger.state(BLOCK, "a")
    assert state.charged == f.features(held) and not any(state.reserved)
    assert users.verify().ok


def test_the_largest_per_row_cost_that_fits_and_a_refusal_that_charges_nothing(
    users: Platform,
) -> None:
    with pytest.raises(BudgetExceededError):  # 3 × 0.51 = 1.53 > ε_g = 1.5
        users.request("visits", blocks=[BLOCK], budget=Budget(epsilon="0.51"), context="a")
    with pytest.raises(NothingAffordableError, match=r"ε=1\.53"):  # Last(n) sizes the group
        users.request("visits", blocks=Last(1), budget=Budget(epsilon="0.51"), context="a")
    state = users.ledger.state(BLOCK, "a")
    assert not any(state.charged) and not any(state.reserved)
    with users.request("visits", blocks=[BLOCK], budget=Budget(epsilon="0.5"), context="a") as g:
        assert g.reservation.cost == Budget(epsilon="1.5")  # 3 × 0.5 = ε_g exactly
    with pytest.raises(InvalidBudgetError):  # δ's group cost 3·e^{2ε}·δ reaches 1: refused
        users.request("visits", blocks=[BLOCK], budget=Budget(epsilon=1, delta=0.1), context="a")
    assert not any(users.ledger.state(BLOCK, "a").charged)
    assert [r.state.value for r in users.reservations(context="a")] == ["closed"]
