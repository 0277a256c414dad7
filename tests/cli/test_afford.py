"""``afford``: the largest ε a selection can still afford, exact against hand computations, and
exactly tight — a request of the answer fits, one 1e-18 larger is refused."""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import pytest

from blockbudget.accounting import StrongFilter
from blockbudget.affordance import AffordFor
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import BudgetExceededError, RetiredBlockError, UnknownContextError
from blockbudget.platform import Last

from .support import POLICY, ids, invoke, invoke_json, ledger_snapshot, make_home

ONE_UNIT = Decimal("1e-18")


def _tight(p, stream: str, blocks: list[str], cost_ok, cost_over) -> None:  # type: ignore[no-untyped-def]
    """``cost_over`` is refused on ``blocks`` in context a (nothing changes), ``cost_ok`` fits."""
    before = ledger_snapshot(p)
    with pytest.raises(BudgetExceededError):
        p.ledger.reserve(blocks, cost_over, context="a")
    assert ledger_snapshot(p) == before
    p.ledger.reserve(blocks, cost_ok, context="a")


def test_basic_is_what_is_left_on_the_most_spent_block(tmp_path: Path) -> None:
    p = make_home(tmp_path / "h")
    b = ids(p, "b")
    p.ledger.charge([b[0]], Budget(epsilon="0.3"), context="a")
    p.ledger.charge([b[1]], Budget(epsilon="0.25", delta="0.0000004"), context="a")
    p.ledger.charge(b, Budget(epsilon="0.5"), context="z")  # another context: not counted
    a = p.afford("b", Last(3), context="a")
    assert a.epsilon == Decimal("0.7") and a.binding == (b[0],)  # 1 − 0.3 (Sage Thm 4.3)
    assert a.blocks == tuple(b) and a.to_json()["epsilon"] == "0.7"
    # At δ = 6e-7 block 1 (4e-7 of 1e-6 spent) still fits; at 6.000000000000000001e-7 nothing.
    assert p.afford("b", b, context="a", delta="0.0000006").epsilon == Decimal("0.7")
    assert p.afford("b", b, context="a", delta="0.000000600000000001").epsilon is None
    assert p.afford("b", b[1:], context="a").epsilon == Decimal("0.75")
    _tight(p, "b", b, Budget(epsilon="0.7"), Budget(epsilon=Decimal("0.7") + ONE_UNIT))
    assert p.afford("b", b, context="a").epsilon == 0


def test_strong_is_tight_and_agrees_with_the_filters_bisection(tmp_path: Path) -> None:
    p = make_home(tmp_path / "h")
    s = ids(p, "s")
    p.ledger.charge([s[2]], Budget(epsilon="0.01"), context="a")
    eps = p.afford("s", s, context="a").epsilon
    assert eps is not None
    f = StrongFilter(capacity=POLICY)
    used = f.features(Budget(epsilon="0.01"))
    # The float bisection of StrongFilter.max_next_epsilon (Rogers et al. 2016, Thm 5.1) agrees.
    assert abs(float(eps) - f.max_next_epsilon(used)) < 1e-9
    assert p.afford("s", s, context="a").binding == (s[2],)
    _tight(p, "s", s, Budget(epsilon=eps), Budget(epsilon=eps + ONE_UNIT))


def test_rdp_pure_and_gaussian_against_the_order_capacities(tmp_path: Path) -> None:
    p = make_home(tmp_path / "h")
    r = ids(p, "r")
    # By hand: an (ε, 0) budget costs min(ε, α ε²/2) per order and fits while some order keeps
    # it under ε_g − ln(1/δ_g)/(α−1); with ε_g = 1, δ_g = 1e-6 the largest is order 64's
    # capacity itself, 1 − ln(1e6)/63 (its α ε²/2 is larger there).
    caps = {a: 1 - math.log(1e6) / (a - 1) for a in ALPHAS}
    by_hand = max(max(c, math.sqrt(2 * c / a)) for a, c in caps.items() if c > 0)
    a = p.afford("r", Last(3), context="a")
    assert a.epsilon is not None and abs(float(a.epsilon) - by_hand) < 1e-15
    assert a.epsilon == Decimal("0.780706181619614696")  # capacity rounded down to 1e-18
    # Gaussian: the smallest σ/Δ with α/(2z²) ≤ cap_α at some order.
    z_by_hand = min(math.sqrt(al / (2 * c)) for al, c in caps.items() if c > 0)
    g = p.afford("r", r, context="a", kind=AffordFor.GAUSSIAN)
    assert g.noise_multiplier is not None
    assert abs(g.noise_multiplier / z_by_hand - 1) < 1e-9
    _tight(
        p,
        "r",
        r,
        RdpCurve.gaussian(sigma=g.noise_multiplier),
        RdpCurve.gaussian(sigma=g.noise_multiplier * (1 - 1e-9)),
    )
    p2 = make_home(tmp_path / "h2")
    r2 = ids(p2, "r")
    eps = p2.afford("r", r2, context="a").epsilon
    assert eps is not None
    _tight(p2, "r", r2, Budget(epsilon=eps), Budget(epsilon=eps + ONE_UNIT))


def test_refusals(tmp_path: Path) -> None:
    p = make_home(tmp_path / "h")
    b = ids(p, "b")
    with pytest.raises(UnknownContextError, match="blockbudget context add NAME"):
        p.afford("b", b, context="nobody")
    with pytest.raises(Exception, match="streams whose rule prices the noise"):
        p.afford("b", b, context="a", kind=AffordFor.GAUSSIAN)
    p.ledger.retire([b[0]], reason="test")
    with pytest.raises(RetiredBlockError):
        p.afford("b", b, context="a")
    assert p.afford("b", Last(3), context="a").blocks == tuple(b[1:])  # live blocks only


def test_cli_afford_local_prints_and_json(tmp_path: Path) -> None:
    home = tmp_path / "h"
    p = make_home(home)
    b = ids(p, "b")
    p.ledger.charge([b[2]], Budget(epsilon="0.125"), context="a")
    p.close()
    base = ["afford", "b", "--context", "a", "--home", str(home)]
    code, doc = invoke_json(*base, "--last", "2")
    assert code == 0 and doc["epsilon"] == "0.875" and doc["blocks"] == b[1:]
    assert doc["binding"] == [b[2]] and doc["delta"] == "0" and doc["kind"] == "budget"
    r = invoke(*base, "--block", b[0], "--block", b[1])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "the largest ε one can still request at δ=0 is 1" in text
    assert f"blocks asked about (2): {b[0]}, {b[1]}" in text
    r = invoke(*base)
    assert r.exit_code == 2 and "exactly one of --block" in " ".join(r.output.split())
