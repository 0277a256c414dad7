"""Low budget, defined once: when a block counts as *retiring* and when it raises a *low-budget
alert*. Every view uses these predicates — the service's blocks route and dashboard, the CLI's
``data blocks`` (local or remote) and the metrics — so they report the same numbers for the
same data.

* A block is **low** in a context when its remaining fraction there (what
  :meth:`blockbudget.platform.Platform.blocks` reports: after charges *and* open reservations)
  is strictly less than a threshold. Alerts are per (stream, context, block), on live blocks.
* A block is **retiring in a context** when it is live and low there (below
  :data:`RETIRING_BELOW`): :func:`is_retiring_in`. This is what every view counts, per
  (stream, context) — the service's blocks route and dashboard for every role, the CLI's blocks
  table — so an admin, an owner and an analyst looking at the same context see the same number,
  and a viewer learns nothing of contexts it cannot see.
* A block is **retiring** (with no context) when it is live and low in *every open context*
  (:func:`is_retiring`) — the contexts :meth:`~blockbudget.platform.Platform.retire_exhausted`
  considers by default, so it is about to retire. It depends on every open context, so it is
  shown only to those who see them all (admins, and owners bound to every open context); the
  ``blockbudget_blocks{status="retiring"}`` metric (admins only) counts it.

The threshold of alerts is server configuration (``blockbudget server serve --alert-below``,
environment :data:`ALERT_ENV`, default :data:`DEFAULT_ALERT_BELOW`).

Example:
    >>> is_low(0.05, below=0.1), is_low(0.1, below=0.1)
    (True, False)
    >>> is_retiring({"a": 0.05, "b": 0.0}, retired=False)
    True
    >>> is_retiring({"a": 0.05, "b": 0.5}, retired=False)  # context b can still spend it
    False
    >>> is_retiring({}, retired=False)  # no open context: nothing will retire it
    False
    >>> is_retiring_in(0.05, retired=False), is_retiring_in(0.5, retired=False)
    (True, False)
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidRequestError

#: A live block is retiring when less than this fraction is left in every open context.
RETIRING_BELOW = 0.1

#: The default low-budget alert threshold (a fraction of a block's budget).
DEFAULT_ALERT_BELOW = 0.1

#: The environment variable that sets the server's alert threshold.
ALERT_ENV = "BLOCKBUDGET_ALERT_BELOW"


def check_threshold(value: float) -> float:
    """``value`` if it is a fraction in [0, 1].

    Raises:
        InvalidRequestError: ``value`` is not a finite number in [0, 1].

    Example:
        >>> check_threshold(0.25)
        0.25
    """
    value = plain_number(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRequestError(f"an alert threshold must be a number in [0, 1], got {value!r}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise InvalidRequestError(f"an alert threshold must be in [0, 1], got {value!r}")
    return float(value)


def alert_threshold_from_env(environ: Mapping[str, str] | None = None) -> float:
    """The alert threshold the environment sets (:data:`ALERT_ENV`), else the default.

    Raises:
        InvalidRequestError: the variable is set but is not a fraction in [0, 1].

    Example:
        >>> alert_threshold_from_env({}), alert_threshold_from_env({ALERT_ENV: "0.25"})
        (0.1, 0.25)
    """
    env = os.environ if environ is None else environ
    text = env.get(ALERT_ENV, "").strip()
    if not text:
        return DEFAULT_ALERT_BELOW
    try:
        value = float(text)
    except ValueError:
        raise InvalidRequestError(
            f"{ALERT_ENV} must be a fraction in [0, 1], got {text!r}"
        ) from None
    return check_threshold(value)


def is_low(fraction: float, *, below: float) -> bool:
    """Whether a remaining ``fraction`` is under the threshold ``below`` (strictly)."""
    return fraction < below


def is_retiring_in(fraction: float, *, retired: bool, below: float = RETIRING_BELOW) -> bool:
    """Whether a block with this remaining ``fraction`` in one context is retiring there: live
    and low in that context."""
    return not retired and is_low(fraction, below=below)


def is_retiring(
    fractions: Mapping[str, float], *, retired: bool, below: float = RETIRING_BELOW
) -> bool:
    """Whether a block with these remaining fractions, one per *open* context, is retiring:
    live, at least one open context, and low in every one of them."""
    return (
        not retired and bool(fractions) and all(is_low(f, below=below) for f in fractions.values())
    )
