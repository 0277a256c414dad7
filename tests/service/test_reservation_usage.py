"""What a reservation drew and has left, per block, in each accounting's terms (exact)."""

from __future__ import annotations

from decimal import Decimal

from blockbudget.accounting import BasicFilter, RdpFilter, StrongFilter
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.service.reservation_usage import block_usage, usage_json

CAP = Budget(epsilon=Decimal(1), delta=Decimal("1e-6"))


def _minus(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def test_basic_and_strong_show_epsilon_and_delta() -> None:
    cost = Budget(epsilon=Decimal("0.5"), delta=Decimal("1e-7"))
    draw = Budget(epsilon=Decimal("0.125"), delta=Decimal(0))
    for f in (BasicFilter(capacity=CAP), StrongFilter(capacity=CAP)):
        left = _minus(f.features(cost), f.features(draw))
        out = block_usage(cost, left, is_open=True, filter_=f)
        assert out == {
            "drawn": {"epsilon": "0.125", "delta": "0"},
            "left": {"epsilon": "0.375", "delta": "1E-7"},
        }, f


def test_rdp_shows_one_value_per_order() -> None:
    f = RdpFilter(capacity=CAP)
    cost = Budget(epsilon=Decimal("0.5"), delta=Decimal(0))
    draw = RdpCurve.from_pure_dp(Decimal("0.25"))
    left = _minus(f.features(cost), f.features(draw))
    out = block_usage(cost, left, is_open=True, filter_=f)
    assert len(out["drawn"]["rdp"]) == len(ALPHAS) == len(out["left"]["rdp"])
    full = RdpCurve.from_pure_dp(Decimal("0.5")).epsilons
    for d, rest, whole in zip(out["drawn"]["rdp"], out["left"]["rdp"], full, strict=True):
        assert Decimal(d) + Decimal(rest) >= whole  # fixed point, rounded up per order
        assert Decimal(d) + Decimal(rest) - whole < Decimal("1e-17")


def test_a_closed_reservation_has_nothing_left_and_no_known_draw() -> None:
    cost = Budget(epsilon=Decimal("0.5"), delta=Decimal(0))
    out = usage_json(
        cost, (("s/1", (0, 0)), ("s/2", (0, 0))), is_open=False, filter_=BasicFilter(capacity=CAP)
    )
    assert out == [
        {"block": b, "drawn": None, "left": {"epsilon": "0", "delta": "0"}} for b in ("s/1", "s/2")
    ]
