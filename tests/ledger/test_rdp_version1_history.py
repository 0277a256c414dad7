"""An ``rdp`` (version 1) ledger written before the rule was capped at its proved bound.

Its history replays and verifies unchanged; a block spent beyond the proved capacities at every
order is reported as a note (not an overspend), admits nothing more, and retires.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blockbudget.accounting import Accounting, rdp
from blockbudget.accounting.renyi_capacity import mironov_capacities
from blockbudget.budget import ALPHAS, Budget, RdpCurve
from blockbudget.errors import BudgetExceededError
from blockbudget.ledger import Ledger

CAPACITY = Budget(epsilon=1, delta="1e-6")


def _heavy_at(order: float, value: str) -> RdpCurve:
    """A curve that spends ``value`` at ``order`` and an unaffordable amount elsewhere."""
    return RdpCurve([value if a == order else "1e6" for a in ALPHAS])


def test_history_within_the_proved_bound_verifies_without_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    # The version-1 code: the capacities were Mironov's, uncapped.
    monkeypatch.setattr(rdp, "proved_capacities", mironov_capacities)
    led = Ledger(url)
    led.add_context("team")
    led.add_blocks(["b"], stream="s", capacity=CAPACITY, accounting=Accounting.RDP)
    # all of version 1's capacity at α = 64 (0.7807); the proved one there is 0.8259
    legacy_64 = mironov_capacities(CAPACITY)[-1] / 10**18
    led.charge(["b"], _heavy_at(64.0, f"{legacy_64:.6f}"), context="team")
    led.close()
    monkeypatch.undo()

    led = Ledger(url)
    report = led.verify(full=True)
    assert report.ok and report.notes == ()
    led.close()


def test_a_block_over_the_proved_bound_admits_nothing_and_is_noted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (10, 1e-6): at α = 2.5 version 1 admits 0.7898; the proved rule nothing (share 1/70).
    capacity = Budget(epsilon=10, delta="1e-6")
    legacy = mironov_capacities(capacity)[ALPHAS.index(2.5)] / 10**18
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    monkeypatch.setattr(rdp, "proved_capacities", mironov_capacities)
    led = Ledger(url)
    led.add_context("team")
    led.add_blocks(["b"], stream="s", capacity=capacity, accounting=Accounting.RDP)
    led.charge(["b"], _heavy_at(2.5, f"{legacy * 0.99:.6f}"), context="team")
    led.close()
    monkeypatch.undo()

    led = Ledger(url)
    report = led.verify(full=True)
    assert report.ok, report.problems  # replayed bit for bit: not an overspend
    (note,) = report.notes
    assert "'b'" in note and "beyond the proved capacity" in note and "admits nothing" in note
    with pytest.raises(BudgetExceededError):
        led.charge(["b"], RdpCurve.from_pure_dp("1e-9"), context="team")
    retired = led.retire_exhausted("s", min_cost=Budget(epsilon="1e-9"))
    assert [b.block_id for b in retired] == ["b"]
    (note,) = led.verify(full=True).notes
    assert "it is retired" in note
    led.close()
