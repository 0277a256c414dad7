"""DP queries: one declarative :class:`Query`, priced (a dry run) or run on a stream's blocks.

The Python API, the command line (``blockbudget query``) and the HTTP API
(``POST /v1/streams/{stream}/query``) all go through here, and the last two read the same JSON
form (:func:`from_dict`), so one validator and one implementation serve all three:

* :class:`Query` (:mod:`~blockbudget.query.spec`) — what to compute: filters, group-by over
  declared public domains, one statistic (count, sum, mean, variance, quantiles, histogram),
  its clipping bounds, its ε and its noise (:data:`Mechanism`: Laplace, or Gaussian with δ);
* :func:`check` (:mod:`~blockbudget.query.checks`) — refuses a query that does not fit the
  stream, before anything is reserved or sealed;
* :func:`price` — a dry run: blocks, cost per block, noise of every part, affordability;
  nothing reserved, sealed or charged;
* :func:`run` (:mod:`~blockbudget.query.execute`) — reserve (one grant), exact integer aggregates
  by the grant's engine, the cost drawn durably, then secure noise; a :class:`QueryResult`;
  with ``reservation=`` (or :func:`run_on` on a grant) it spends an existing reservation, e.g.
  a scheduler's grant, and reserves nothing.

Sensitivities, fixed-point sums and budget splits: :mod:`blockbudget.query.parts`; the answer's
post-processing and intervals: :mod:`blockbudget.query.answers`. See docs/queries.md.

Example:
    >>> from blockbudget.query import Query, from_dict, to_dict
    >>> q = Query.mean("dep_delay", epsilon=0.5, lower=-60, upper=300).where("dest", "==", "BOS")
    >>> from_dict(to_dict(q)) == q
    True
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blockbudget.engine.plan import GroupKey, Op, Predicate
    from blockbudget.query.checks import Pricing, check, check_grant, check_schema
    from blockbudget.query.execute import (
        aggregate,
        close_if_spent,
        covered,
        open_grant,
        open_reserved,
        prepare_on,
        price,
        release,
        run,
        run_on,
        spend,
    )
    from blockbudget.query.jsonform import from_dict, to_dict
    from blockbudget.query.result import CONFIDENCE, DryRun, GroupAnswer, QueryResult
    from blockbudget.query.spec import Mechanism, Query, Statistic

#: Names loaded on first use (PEP 562), and the module each comes from: importing the package
#: (e.g. for :mod:`blockbudget.query.catalog`, which the CLI reads) loads nothing else.
_LAZY = {
    "GroupKey": "blockbudget.engine.plan",
    "Op": "blockbudget.engine.plan",
    "Predicate": "blockbudget.engine.plan",
    "Pricing": "blockbudget.query.checks",
    "check": "blockbudget.query.checks",
    "check_grant": "blockbudget.query.checks",
    "check_schema": "blockbudget.query.checks",
    **dict.fromkeys(
        (
            "aggregate",
            "close_if_spent",
            "covered",
            "open_grant",
            "open_reserved",
            "prepare_on",
            "price",
            "release",
            "run",
            "run_on",
            "spend",
        ),
        "blockbudget.query.execute",
    ),
    "from_dict": "blockbudget.query.jsonform",
    "to_dict": "blockbudget.query.jsonform",
    "CONFIDENCE": "blockbudget.query.result",
    "DryRun": "blockbudget.query.result",
    "GroupAnswer": "blockbudget.query.result",
    "QueryResult": "blockbudget.query.result",
    "Mechanism": "blockbudget.query.spec",
    "Query": "blockbudget.query.spec",
    "Statistic": "blockbudget.query.spec",
}


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'blockbudget.query' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "CONFIDENCE",
    "DryRun",
    "GroupAnswer",
    "GroupKey",
    "Mechanism",
    "Op",
    "Predicate",
    "Pricing",
    "Query",
    "QueryResult",
    "Statistic",
    "aggregate",
    "check",
    "check_grant",
    "check_schema",
    "close_if_spent",
    "covered",
    "from_dict",
    "open_grant",
    "open_reserved",
    "prepare_on",
    "price",
    "release",
    "run",
    "run_on",
    "spend",
    "to_dict",
]
