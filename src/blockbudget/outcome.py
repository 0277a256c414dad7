"""What a validator decides about a trained model — a value type both the validators
(:mod:`blockbudget.training.validation`) and the schedulers that react to it
(:mod:`blockbudget.scheduling.sage`) import, so neither depends on the other.

Sage (Lécuyer et al., SOSP 2019) §3.3: an SLAed validator ACCEPTs a model that meets its target
with probability ≥ 1 − η, REJECTs one that cannot, and asks to RETRY with more data or budget
otherwise. PrivateKube encodes the three as 1 / −1 / 0.

Example:
    >>> from blockbudget.outcome import Outcome
    >>> Outcome("retry") is Outcome.RETRY
    True
"""

from __future__ import annotations

from enum import Enum

__all__ = ["Outcome"]


class Outcome(Enum):
    """What a validator decides (Sage §3.3; PrivateKube encodes them 1 / −1 / 0)."""

    ACCEPT = "accept"
    REJECT = "reject"
    RETRY = "retry"
