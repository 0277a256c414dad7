"""Request fingerprints keep every digit of a cost: two different costs never collide."""

from __future__ import annotations

from decimal import Decimal

import pytest

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve, normalize_exactly
from blockbudget.errors import RequestIdConflictError
from blockbudget.ledger import Ledger
from blockbudget.ledger.requests import cost_key
from blockbudget.ledger.types import decimal_text


def test_a_request_id_reused_with_a_cost_differing_in_the_29th_digit_conflicts(
    ledger: Ledger,
) -> None:
    ledger.add_blocks(
        ["b"], stream="s", capacity=Budget(epsilon="1e11"), accounting=Accounting.BASIC
    )
    first = Budget(epsilon="12345678901.000000000000000001")
    other = Budget(epsilon="12345678901.000000000000000004")
    ledger.charge(["b"], first, context="ml", request_id="R")
    with pytest.raises(RequestIdConflictError):
        ledger.charge(["b"], other, context="ml", request_id="R")
    assert ledger.charge(["b"], first, context="ml", request_id="R").cost == first  # replay
    assert ledger.state("b", "ml").charged == (12345678901000000000000000001, 0)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("0.10000000000000000000000000001", "0.10000000000000000000000000004"),
        ("12345678901.000000000000000001", "12345678901.000000000000000004"),
        ("1e30", "999999999999999999999999999999.9"),
    ],
)
def test_different_values_have_different_texts(a: str, b: str) -> None:
    assert decimal_text(Decimal(a)) != decimal_text(Decimal(b))
    assert cost_key(Budget(epsilon=a)) != cost_key(Budget(epsilon=b))
    curve_a = RdpCurve([a] * 12)
    assert cost_key(curve_a) != cost_key(RdpCurve([b] * 12))


@pytest.mark.parametrize(
    ("a", "b"),
    [("0.1", "0.10"), ("100", "1E+2"), ("0", "-0"), ("0", "0E-9"), ("1e-7", "0.0000001")],
)
def test_equal_values_have_equal_texts(a: str, b: str) -> None:
    assert decimal_text(Decimal(a)) == decimal_text(Decimal(b))
    assert normalize_exactly(Decimal(a)).as_tuple() == normalize_exactly(Decimal(b)).as_tuple()


@pytest.mark.parametrize("text", ["0.1", "100", "1e-7", "1.5e-300", "123456789.123456789"])
def test_texts_of_short_values_are_unchanged(text: str) -> None:
    # Fingerprints of requests stored before stay valid for values of at most 28 digits.
    assert decimal_text(Decimal(text)) == format(Decimal(text).normalize(), "f")
