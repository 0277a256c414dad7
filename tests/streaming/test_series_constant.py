"""DPISeries / DPIConfig refuse a series constant C = Δ_Q/(μζ) floats cannot represent."""

from __future__ import annotations

import pytest

from blockbudget.errors import InvalidRequestError
from blockbudget.streaming import DPIConfig
from blockbudget.streaming.series import DPISeries, series_constant

_EXTREME = [(1e-300, 1e-10), (1e-160, 1e-150), (1e300, 1e10), (1e-320, 1.0)]


@pytest.mark.parametrize(("mu", "zeta"), _EXTREME)
def test_series_with_unrepresentable_constant_is_refused(mu: float, zeta: float) -> None:
    with pytest.raises(InvalidRequestError, match="mu·zeta"):
        DPISeries(epsilon=1.0, mu=mu, zeta=zeta)


@pytest.mark.parametrize(("mu", "zeta"), _EXTREME)
def test_config_with_unrepresentable_constant_is_refused(mu: float, zeta: float) -> None:
    with pytest.raises(InvalidRequestError, match="mu·zeta"):
        DPIConfig(epsilon=1.0, mu=mu, zeta=zeta)


def test_representable_extremes_still_sum_within_epsilon() -> None:
    assert series_constant(sensitivity=2.0, mu=0.5, zeta=0.2) == pytest.approx(20.0)
    for mu, zeta in [(1e200, 1e100), (1e-150, 1e-150), (0.5, 0.2)]:
        series = DPISeries(epsilon=1.0, mu=mu, zeta=zeta)
        assert 0.0 <= series.total <= 1.0
        assert 0.0 <= series.term(1) <= 1.0
