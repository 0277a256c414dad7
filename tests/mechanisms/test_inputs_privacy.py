"""Input errors never quote a private record."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from blockbudget.errors import DataError
from blockbudget.mechanisms import statistics as stats

from .fakes import FakeSource


@pytest.mark.parametrize(
    "values",
    [
        pd.Series(["2024-01-01 20:24:53 secret-visit", "x"]),
        np.array(["patient-4711", "3"], dtype=object),
        ["alice@example.com", 2.0],
    ],
)
def test_unreadable_values_are_refused_without_quoting_them(values: object) -> None:
    source = FakeSource()
    with pytest.raises(DataError) as info:
        stats.dp_sum(source, values, epsilon=1.0, lower=0.0, upper=1.0)  # type: ignore[arg-type]
    message = str(info.value)
    for secret in ("secret-visit", "patient-4711", "alice@example.com", "20:24:53"):
        assert secret not in message
    assert "must contain numbers" in message
    assert source.draws == []  # refused before any draw
