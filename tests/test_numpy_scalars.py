"""Every numeric DP parameter takes a NumPy scalar as the Python number it holds (issue 30,
item 5): ``DPISeries(epsilon=numpy.float64(2.0), …)`` was refused as "cannot be computed in
finite arithmetic" (``repr`` of a ``numpy.float64`` is ``np.float64(2.0)``, which no decimal
parser reads), and ``numpy.float32`` / ``numpy.int64`` were "not a number". A NumPy boolean
is still refused, as a Python one is."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import numpy as np
import pytest
from mechanisms.fakes import FakeSource, NoNoise

from blockbudget.accounting import Accounting
from blockbudget.budget import Budget, RdpCurve
from blockbudget.decimals import plain_number, shortest_decimal, to_decimal
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.mechanisms import gaussian_mechanism, laplace_mechanism
from blockbudget.query import Query, to_dict
from blockbudget.streaming.accountant import StreamAccountant
from blockbudget.streaming.config import DPIConfig
from blockbudget.streaming.series import DPISeries

#: (NumPy scalar, the Python number it holds)
SCALARS = [
    (np.float64(2.0), 2.0),
    (np.float32(0.5), 0.5),
    (np.float32(0.1), float(np.float32(0.1))),  # its exact binary value, 0.10000000149…
    (np.int64(2), 2),
]
IDS = ["float64", "float32", "float32-inexact", "int64"]


@pytest.mark.parametrize(("value", "plain"), SCALARS, ids=IDS)
def test_the_shared_parsing_reads_numpy_scalars(value: Any, plain: float) -> None:
    assert plain_number(value) == plain and type(plain_number(value)) is type(plain)
    assert to_decimal(value, name="epsilon") == to_decimal(plain, name="epsilon")
    assert shortest_decimal(value) == shortest_decimal(plain)
    with pytest.raises(InvalidBudgetError, match="boolean"):
        to_decimal(np.True_, name="epsilon")


@pytest.mark.parametrize(("value", "plain"), SCALARS, ids=IDS)
def test_budgets(value: Any, plain: float) -> None:
    assert Budget(epsilon=value) == Budget(epsilon=plain)
    assert Budget(epsilon=1, delta=value / 10) == Budget(epsilon=1, delta=plain_number(value / 10))
    assert RdpCurve.gaussian(sigma=value, sensitivity=1.0) == RdpCurve.gaussian(
        sigma=plain, sensitivity=1.0
    )
    # a tiny Δ/σ is priced in decimal, from the numbers' decimal forms
    tiny = RdpCurve.gaussian(sigma=value * np.float64(1e200), sensitivity=np.float64(1.0))
    assert tiny == RdpCurve.gaussian(sigma=plain * 1e200, sensitivity=1.0)
    with pytest.raises(InvalidBudgetError):
        Budget(epsilon=np.True_)


@pytest.mark.parametrize(("value", "plain"), SCALARS, ids=IDS)
def test_the_dpi_series(value: Any, plain: float) -> None:
    """The issue's example: numpy.float64(2.0) is the series of 2.0, term for term."""
    got = DPISeries(epsilon=value, mu=value / 4, zeta=value / 8, sensitivity=value)
    want = DPISeries(epsilon=plain, mu=plain / 4, zeta=plain / 8, sensitivity=plain)
    assert (got.total, got.scale, got.ratio) == (want.total, want.scale, want.ratio)
    assert [got.exact_term(t) for t in (1, 2, 100)] == [want.exact_term(t) for t in (1, 2, 100)]
    assert type(got.epsilon) is type(plain) and got == want  # stored as the Python number
    with pytest.raises(InvalidRequestError, match="must be a number"):
        DPISeries(epsilon=np.True_, mu=0.5, zeta=0.5)
    config = DPIConfig(epsilon=value, mu=value / 4)
    assert config == DPIConfig(epsilon=plain, mu=plain / 4)
    assert StreamAccountant.units(np.float64(0.25)) == StreamAccountant.units(0.25)


@pytest.mark.parametrize(("value", "plain"), SCALARS, ids=IDS)
def test_queries(value: Any, plain: float) -> None:
    assert Query.count(epsilon=value) == Query.count(epsilon=plain)
    got = Query.sum("x", epsilon=value, lower=-value, upper=value)
    assert got == Query.sum("x", epsilon=plain, lower=-plain, upper=plain)
    json.dumps(to_dict(got))  # a float32 would not serialize; the query holds Python numbers
    q = Query.quantiles(
        "x", [np.float64(0.5), np.float32(0.25)], epsilon=value, lower=0, upper=value, bins=8
    )
    assert q.probabilities == (0.5, 0.25) and q.bins == 8
    assert Query.count(epsilon=1.0, delta=value / 1e9, mechanism="gaussian") == Query.count(
        epsilon=1.0, delta=plain_number(value / 1e9), mechanism="gaussian"
    )
    with pytest.raises(InvalidRequestError, match="must be a number"):
        Query.count(epsilon=np.True_)


@pytest.mark.parametrize(("value", "plain"), SCALARS, ids=IDS)
def test_mechanisms(value: Any, plain: float) -> None:
    for rule in (Accounting.BASIC, Accounting.RDP):
        got, want = FakeSource(rule=rule), FakeSource(rule=rule)
        a = laplace_mechanism(got, 3.0, epsilon=value, sensitivity=value, noise=NoNoise())
        b = laplace_mechanism(want, 3.0, epsilon=plain, sensitivity=plain, noise=NoNoise())
        assert a.cost == b.cost and got.draws == want.draws and a.value == 3.0
    got, want = FakeSource(), FakeSource()
    delta = np.float64(1e-6)
    a = gaussian_mechanism(got, 1.0, epsilon=value, delta=delta, sensitivity=value, noise=NoNoise())
    b = gaussian_mechanism(want, 1.0, epsilon=plain, delta=1e-6, sensitivity=plain, noise=NoNoise())
    assert a.cost == b.cost and a.perturbations == b.perturbations
    with pytest.raises(InvalidBudgetError):
        laplace_mechanism(FakeSource(), 1.0, epsilon=1.0, sensitivity=np.True_)


def test_a_float32_is_its_exact_value() -> None:
    """A float32 means its binary value (as ``float()`` gives it), not the shorter text NumPy
    prints for it: a charge of numpy.float32(0.1) is 0.10000000149011612, never less."""
    assert to_decimal(np.float32(0.1), name="epsilon") == Decimal("0.10000000149011612")
