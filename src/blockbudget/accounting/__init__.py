"""Accounting: the registered accounting rules and their per-block filters. Pure math, no state.

Each rule module registers its rule when imported (:func:`register_rule`) and
:data:`~blockbudget.accounting.rule.RULE_MODULES` lists the modules, so a new rule is one module
plus its name there. See :mod:`blockbudget.accounting.rule` for the contract.
"""

from blockbudget.accounting.basic import BasicFilter
from blockbudget.accounting.filters import Filter, add_vectors, sub_vectors
from blockbudget.accounting.gdp import GaussianDp, GdpFilter
from blockbudget.accounting.rdp import RdpFilter
from blockbudget.accounting.rule import (
    Accounting,
    AccountingRule,
    Combine,
    Noise,
    NoisePart,
    Release,
    get_rule,
    register_rule,
    rule_names,
    rules,
)
from blockbudget.accounting.strong import StrongFilter
from blockbudget.accounting.whitehouse import WhitehouseFilter
from blockbudget.budget import Budget


def make_filter(accounting: str, *, capacity: Budget, slack_delta: float | None = None) -> Filter:
    """The filter of rule ``accounting`` for one block (``get_rule(accounting).filter(...)``).

    Raises:
        InvalidRequestError: an unknown rule. InvalidBudgetError: an unusable capacity.
    """
    return get_rule(accounting).filter(capacity=capacity, slack_delta=slack_delta)


__all__ = [
    "Accounting",
    "AccountingRule",
    "BasicFilter",
    "Combine",
    "Filter",
    "GaussianDp",
    "GdpFilter",
    "Noise",
    "NoisePart",
    "RdpFilter",
    "Release",
    "StrongFilter",
    "WhitehouseFilter",
    "add_vectors",
    "get_rule",
    "make_filter",
    "register_rule",
    "rule_names",
    "rules",
    "sub_vectors",
]
