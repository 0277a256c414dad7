"""Queue task fingerprints keep every digit of the demand (no 28-digit collisions)."""

from __future__ import annotations

from blockbudget.budget import Budget
from blockbudget.service.queue_store import task_fingerprint


def _fp(epsilon: str, delta: str = "0") -> str:
    return task_fingerprint(
        stream="s",
        context="a",
        demand=Budget(epsilon=epsilon, delta=delta),
        selection={"last": 1},
        significance=None,
        timeout_seconds=None,
    )


def test_demands_differing_after_28_digits_have_different_fingerprints() -> None:
    assert _fp("0.10000000000000000000000000001") != _fp("0.10000000000000000000000000004")
    assert _fp("1", "1.0000000000000000000000000001e-6") != _fp(
        "1", "1.0000000000000000000000000004e-6"
    )


def test_equal_demands_have_equal_fingerprints() -> None:
    assert _fp("0.1") == _fp("0.10") and _fp("100") == _fp("1E+2") and _fp("0") == _fp("0.000")
