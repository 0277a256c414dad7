"""How many identical charges one block admits under each accounting rule, and what fraction
of the tight count that is.

One empty block at (ε_g, δ_g), ε_g ∈ {1, 10}, δ_g = 1e-6; a stream of identical charges of one
*kind*; per rule, the largest n the block's filter (``get_rule(r).filter``) accepts, and
``fraction`` = n / ``tight``, where ``tight`` is the most charges any sound accounting could
admit, as far as we can compute it. Printed as JSON lines, one per (ε_g, kind, parameter,
rule), with the timings of the counts.

Kinds, and their tight count:

* ``gaussian`` — N(0, σ²) on an L2 sensitivity 1, σ ∈ {10, 100}. n of them compose to exactly
  (√n/σ)-GDP and that conversion to (ε, δ) is exact (Dong, Roth & Su 2022, Thm 2.7, Cor. 3.3,
  Cor. 2.13), so tight = ⌊μ_g²σ²⌋, μ_g from the ``gdp`` filter's capacity: exact. (The row also
  gives ``tight_pld``, the same count by the pessimistic PLD, as a check on the PLD counts.)
* ``laplace`` — Laplace(b) on an L1 sensitivity 1, ε_i = 1/b ∈ {0.1, 0.01}. tight = the largest
  n whose n-fold Laplace(b) has PLD ε(δ_g) ≤ ε_g (dp_accounting's ``PLDAccountant``,
  add/remove neighbours, ``LaplaceDpEvent(b)`` composed n times, value discretisation
  :data:`PLD_INTERVAL`).
* ``dpsgd`` — 10 steps of DP-SGD a charge, Poisson rate q = 0.01, noise multiplier σ = 1.5.
  tight = the largest n whose 10n steps have PLD ε(δ_g) ≤ ε_g (``PoissonSampledDpEvent`` of a
  ``GaussianDpEvent``, as :func:`blockbudget.training.dpsgd.pld_epsilon` builds it, at
  :data:`PLD_INTERVAL`); ``tight_pld_epsilon`` is the same count by ``pld_epsilon`` itself,
  whose coarser 1e-3 discretisation admits 1 fewer at ε_g = 1 and 0.3 % fewer at ε_g = 10.
* ``mixed`` — pairs of one Gaussian (σ = 10) and one Laplace (ε_i = 0.1); n counts pairs.
  tight = PLD of n Gaussians and n Laplaces (discretisation :data:`PLD_INTERVAL`).

The PLD counts are **lower bounds on the truly tight count**: dp_accounting's pessimistic PLD
(connect-the-dots discretisation, Doroshenko et al., PETS 2022) gives an *upper* bound on the
exact ε(δ_g), so the largest n it accepts is at most the largest n the exact privacy curve
accepts. A fraction is therefore an upper bound on the rule's true fraction. A fraction above
1 would mean a rule admitting more than the pessimistic PLD allows: sound only if the PLD's
discretisation loses more than the rule does, and otherwise a bug in the rule; the tests check
that no rule does. At :data:`PLD_INTERVAL` the counts here do not move when the interval is
divided by 10, except DP-SGD's (see above).

How each rule prices one charge (or one pair: the features of its two charges summed):

* ``gdp``, ``rdp``, ``rdp2`` — by the noise, through ``get_rule(r).price(Release(...))``:
  gdp charges μ = 1/σ for a Gaussian and μ(ε_i) for a Laplace (the tight μ of a pure ε-DP
  mechanism), rdp/rdp2 the Gaussian and Laplace RDP curves (Mironov 2017, Prop. 6–7); for
  DP-SGD rdp/rdp2 charge the 10-step subsampled-Gaussian curve (:func:`sgd_curve`), which the
  gdp filter refuses (its row has ``charges`` null and ``refused``: an RDP curve implies no GDP
  bound).
* ``basic``, ``strong``, ``whitehouse`` — (ε, δ) points. A Laplace costs (ε_i, 0). A Gaussian
  costs (ε_i, δ_i) with ε_i the analytic Gaussian's ε at δ_i (Balle & Wang 2018, Thm 8), and a
  DP-SGD charge (ε_i, δ_i) with ε_i the pessimistic PLD ε of its 10 steps at δ_i; for n charges
  δ_i = ⌊(δ_g − δ′)/n⌋ (the charges' whole δ share split evenly; δ′ = 0 for basic, the filter's
  slack otherwise; pure charges take no share). For strong and whitehouse δ′ is the best of
  :data:`SLACKS`·δ_g (the row gives every count, ``charges_by_slack``, and the count at the
  default δ_g/2; ties go to the default, then to the smallest fraction).

Reference rows (``"reference": true``; not rules, never admissible as they stand), one of each
per (ε_g, kind, parameter), to say where ``rdp2``'s gap to the tight count goes:

* ``cks-whole-delta`` — rdp2's exists-α filter (its features, its decimal arithmetic) with the
  Canonne–Kamath–Steinke conversion at the *whole* δ_g at every order of
  :data:`~blockbudget.budget.ALPHAS`, no union bound: what rdp2 would admit if the multi-order
  rule needed none. No proof covers it; the difference to rdp2 is exactly the union bound's cost.
* ``best-fixed-order`` — max over the orders α of ALPHAS of the largest n with
  n·ε(α) ≤ c(α), c(α) = ε_g − (ln(1/δ_g) − ln α)/(α−1) − ln(1 − 1/α) (CKS Prop. 12 with the
  whole δ_g at that one order; the last term is + ln(α/(α−1)), a gain, as in
  ``renyi_capacity``'s code). Sound only for an order fixed before the first charge, i.e. by
  an oracle that knows the workload. For identical charges the exists-α rule admits n iff
  some order does, so this equals ``cks-whole-delta``; it is computed independently (float
  RDP curves, float capacity) as a check on both.
* ``best-real-order`` — the same with α over the reals in (1, :data:`REAL_ORDER_MAX`]
  (:data:`REAL_ORDERS` log-spaced orders from :data:`REAL_ORDER_MIN`, below which c(α) < −1000
  at these budgets, plus ALPHAS, then :data:`REFINE` more between the best one's neighbours):
  the best any RDP accounting on any grid could do with this conversion, so its gap to
  ``tight`` is that of RDP with the CKS conversion itself (no union bound, no grid).

Their curves are float: Gaussian α/(2σ²); Laplace Mironov 2017, Prop. 6, in the log1p form
(:func:`laplace_rdp`); DP-SGD the Poisson-subsampled Gaussian's ln A_α by quadrature
(:func:`subsampled_gaussian_log_a`); mixed the sum. Each row gives ``curve_check``, the largest
relative difference between that float curve and the curve rdp2 charges, on ALPHAS. Counts are
exact for the float numbers (:func:`count_within`).

Identical charges: the feature vector of n charges is exactly n times one charge's (integer
fixed-point units), and every filter's fit test is monotone in it, so the count is found by
doubling then bisection (:func:`largest_fitting`). Where δ_i depends on n, ε_i grows as n grows,
so the test stays monotone.

    PYTHONPATH=src python benchmarks/filter_capacity.py [--quick]

``--quick`` (run by the tests): ε_g = 1, σ = 100, ε_i = 0.1, the DP-SGD and mixed kinds, slack
δ_g/2 only.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np

from blockbudget.accounting import Noise, NoisePart, Release, get_rule
from blockbudget.accounting.filters import Filter
from blockbudget.accounting.renyi_capacity import cks_capacities
from blockbudget.budget import ALPHAS, UNIT, Budget, Cost, RdpCurve, from_units, units_down
from blockbudget.errors import InvalidBudgetError
from blockbudget.mechanisms.calibration import analytic_gaussian_delta

DELTA_G = Decimal("1e-6")
EPSILONS_G = (1, 10)
SIGMAS = (10, 100)
LAPLACE_EPSILONS = (Decimal("0.1"), Decimal("0.01"))
#: DP-SGD: Poisson rate, noise multiplier, steps per charge.
SGD_Q, SGD_SIGMA, SGD_STEPS = 0.01, 1.5, 10
#: The mixed kind's pair: a Gaussian of this σ and a Laplace of this ε_i.
MIXED_SIGMA, MIXED_EPSILON = 10, Decimal("0.1")
RULES = ("basic", "strong", "whitehouse", "rdp", "rdp2", "gdp")
SLACK_RULES = ("strong", "whitehouse")
DEFAULT_SLACK = Decimal("0.5")
#: Slack fractions δ'/δ_g tried for strong and whitehouse; 1 (δ'' = 0: pure charges only) is
#: whitehouse's alone, as strong needs δ̃ < δ_g.
SLACKS = tuple(Decimal(s) for s in ("0.05", "0.1", "0.25", "0.5", "0.75", "0.9", "0.99", "1"))
#: PLD value discretisation of the tight counts (connect-the-dots: for Laplace and mixed the ε
#: at 1e-4 is within 3e-6 of 1e-5's at every count here; DP-SGD's is up to 0.017 below 1e-3's).
PLD_INTERVAL = 1e-4
MAX_CHARGES = 1 << 24
#: The reference rows (not rules: see the module docstring).
REFERENCES = ("cks-whole-delta", "best-fixed-order", "best-real-order")
#: best-real-order: log-spaced orders in [REAL_ORDER_MIN, REAL_ORDER_MAX] (ALPHAS added), then
#: REFINE evenly spaced ones between the best order's two neighbours.
REAL_ORDER_MIN, REAL_ORDER_MAX, REAL_ORDERS, REFINE = 1.01, 1024.0, 2000, 200


# --- searching -------------------------------------------------------------------------------


def largest_fitting(fits: Callable[[int], bool]) -> int:
    """The largest n in [0, MAX_CHARGES] with fits(n), for a monotone fits (fits(0) holds)."""
    lo, hi = 0, 1
    while hi <= MAX_CHARGES and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, MAX_CHARGES + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def scaled(n: int, step: Sequence[int]) -> tuple[int, ...]:
    return tuple(n * x for x in step)


def summed(f: Filter, costs: Sequence[Cost]) -> tuple[int, ...]:
    """The features of several charges (each priced on its own), summed."""
    out = f.zero()
    for cost in costs:
        out = tuple(a + b for a, b in zip(out, f.features(cost), strict=True))
    return out


# --- (ε, δ) prices -------------------------------------------------------------------------


@functools.cache
def gaussian_epsilon(sigma: float, delta: float) -> float:
    """The smallest ε (up to a relative 1e-9, rounded up) at which N(0, σ²) on a sensitivity-1
    query is (ε, δ)-DP (Balle & Wang 2018, Thm 8): δ(ε) decreases in ε; bisection."""
    lo, hi = 0.0, 1.0
    while analytic_gaussian_delta(sigma=sigma, epsilon=hi) > delta:
        lo, hi = hi, hi * 2
    for _ in range(200):
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        if analytic_gaussian_delta(sigma=sigma, epsilon=mid) > delta:
            lo = mid
        else:
            hi = mid
    return math.nextafter(hi * (1 + 1e-9), math.inf)


@functools.lru_cache(maxsize=1)
def sgd_charge_pld() -> Any:
    """The pessimistic PLD accountant of one DP-SGD charge (10 steps), as ``pld_epsilon``
    builds it; ``get_epsilon`` does not change it, so one serves every δ_i."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    from blockbudget.training.dpsgd import PLD_DISCRETIZATION

    accountant = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=PLD_DISCRETIZATION,
    )
    event = dp_accounting.PoissonSampledDpEvent(SGD_Q, dp_accounting.GaussianDpEvent(SGD_SIGMA))
    accountant.compose(event, SGD_STEPS)
    return accountant


@functools.cache
def sgd_epsilon(delta: float) -> float:
    """The pessimistic PLD ε of one DP-SGD charge at δ (``pld_epsilon(1.5, 0.01, 10, δ)``)."""
    return float(sgd_charge_pld().get_epsilon(delta))


# --- float RDP curves at real orders (the reference rows) ----------------------------------


def gaussian_rdp(sigma: float, alphas: np.ndarray) -> np.ndarray:
    """α/(2σ²): N(0, σ²) on a sensitivity-1 query (Mironov 2017, Prop. 7)."""
    return alphas / (2.0 * sigma * sigma)


def laplace_rdp(scale: float, alphas: np.ndarray) -> np.ndarray:
    """Laplace(b) on an L1 sensitivity 1, t = 1/b (Mironov 2017, Prop. 6):
    ε(α) = (1/(α−1))·ln(α/(2α−1)·e^{(α−1)t} + (α−1)/(2α−1)·e^{−αt})
         = t + log1p((α−1)/(2α−1)·expm1(−(2α−1)t))/(α−1),
    which neither overflows at large α nor loses the small argument of the logarithm; the
    cancellation against t costs a relative ~1e-16/(α·t) of ε(α) ≈ α·t²/2 at small t."""
    t = 1.0 / scale
    a = np.asarray(alphas, dtype=np.float64)
    inner = np.log1p((a - 1.0) / (2.0 * a - 1.0) * np.expm1(-(2.0 * a - 1.0) * t))
    return np.minimum(t + inner / (a - 1.0), t)  # RDP of an ε-DP mechanism is at most ε


#: Quadrature step of :func:`subsampled_gaussian_log_a`, per σ.
_QUAD_STEPS_PER_SIGMA = 16


def subsampled_gaussian_log_a(q: float, sigma: float, alphas: np.ndarray) -> np.ndarray:
    """ln A_α, A_α = E_{z~N(0, σ²)}[((1 − q) + q·e^{(2z−1)/(2σ²)})^α], for one Poisson-
    subsampled Gaussian step at each real order α > 1 (Mironov, Talwar & Zhang 2019, Thm 4).

    The trapezoid rule on z ∈ [−40σ, α + 40σ] (the integrand peaks near z = 0 and z = α, and
    its log is smooth, so the rule converges geometrically) at step σ/16 (σ/8 gives the same
    ln A_α on ALPHAS to 1e-13 relative): where A_α − 1 < e − 1
    it sums expm1(α·ln(...))·φ(z) so that ln A_α keeps its relative accuracy however small it
    is; elsewhere a log-sum-exp. Agrees with ``sgd_curve`` (an upper bound within ~1e-12) to
    a relative 1e-8 on ALPHAS: each row checks (``curve_check``).
    """
    log_q, log_1mq = math.log(q), math.log1p(-q)
    s2 = sigma * sigma
    out = np.empty(len(alphas))
    for i, alpha in enumerate(np.asarray(alphas, dtype=np.float64).tolist()):
        lo, hi = -40.0 * sigma, alpha + 40.0 * sigma
        z = np.linspace(lo, hi, int((hi - lo) / sigma * _QUAD_STEPS_PER_SIGMA) + 1)
        dz = float(z[1] - z[0])
        log_mix = np.logaddexp(log_1mq, log_q + (2.0 * z - 1.0) / (2.0 * s2))
        log_phi = -0.5 * z * z / s2 - math.log(sigma * math.sqrt(2.0 * math.pi))
        f = alpha * log_mix + log_phi
        top = float(f.max())
        log_a = top + math.log(float(np.sum(np.exp(f - top))) * dz)
        if log_a < 1.0:
            with np.errstate(over="ignore"):
                a_minus_1 = float(np.sum(np.expm1(alpha * log_mix) * np.exp(log_phi))) * dz
            log_a = math.log1p(a_minus_1)
        out[i] = log_a
    return out


def dpsgd_rdp(alphas: np.ndarray) -> np.ndarray:
    """One DP-SGD charge: SGD_STEPS·ln A_α/(α − 1)."""
    a = np.asarray(alphas, dtype=np.float64)
    return SGD_STEPS * subsampled_gaussian_log_a(SGD_Q, SGD_SIGMA, a) / (a - 1.0)


def cks_capacity(epsilon_g: int, alphas: np.ndarray) -> np.ndarray:
    """ε_g − (ln(1/δ_g) − ln α)/(α−1) − ln(1 − 1/α), capped at ε_g: the Canonne, Kamath &
    Steinke (2020, Prop. 12) budget of one order holding the whole δ_g, in float (the same
    formula as ``renyi_capacity._conversion_terms`` with one share)."""
    a = np.asarray(alphas, dtype=np.float64)
    term = (-math.log(float(DELTA_G)) - np.log(a)) / (a - 1.0) - np.log(a / (a - 1.0))
    return float(epsilon_g) - np.maximum(term, 0.0)


def count_within(cap: float, cost: float) -> int:
    """The largest n in [0, MAX_CHARGES] with n·cost ≤ cap in float (0 if even 0 does not fit,
    i.e. cap < 0 — such an order admits nothing)."""
    if not cap >= 0.0:
        return 0
    if cost <= 0.0:
        return MAX_CHARGES
    if not math.isfinite(cost):
        return 0
    n = min(int(cap / cost), MAX_CHARGES)
    while n < MAX_CHARGES and (n + 1) * cost <= cap:
        n += 1
    while n > 0 and n * cost > cap:
        n -= 1
    return n


def best_order(
    epsilon_g: int, curve: Callable[[np.ndarray], np.ndarray], alphas: np.ndarray
) -> tuple[int, float]:
    """The largest count over these orders and the (first) order that reaches it; the curve is
    evaluated only where the capacity is positive."""
    caps = cks_capacity(epsilon_g, alphas)
    live = caps > 0
    if not live.any():
        return 0, float(alphas[0])
    costs = np.full(len(alphas), np.inf)
    costs[live] = curve(alphas[live])
    counts = [count_within(c, e) for c, e in zip(caps.tolist(), costs.tolist(), strict=True)]
    i = max(range(len(counts)), key=lambda j: (counts[j], -j))
    return counts[i], float(alphas[i])


def real_orders() -> np.ndarray:
    grid = np.geomspace(REAL_ORDER_MIN, REAL_ORDER_MAX, REAL_ORDERS)
    return np.unique(np.concatenate([grid, np.array(ALPHAS, dtype=np.float64)]))


# --- kinds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    """One kind of charge: its parameters, how each rule prices it, and its tight count.

    ``noise_costs`` is the costs of one charge under a noise-pricing rule (rdp, rdp2, gdp);
    ``dp_costs(δ_i)`` its (ε, δ) costs when its δ-using parts get δ_i each (``needs_delta``:
    whether any does); ``tight(ε_g)`` the tight count and how it was found; ``rdp_float`` the
    RDP of one charge at real orders, in float (the reference rows).
    """

    name: str
    params: dict[str, Any]
    noise_costs: Callable[[str], list[Cost]]
    dp_costs: Callable[[Decimal], list[Budget]]
    needs_delta: bool
    tight: Callable[[int], dict[str, Any]]
    rdp_float: Callable[[np.ndarray], np.ndarray]


def release_cost(rule: str, parts: Sequence[tuple[Noise, float]], epsilon: float) -> Cost:
    """What ``rule`` charges for a release of these noise parts (sensitivity 1)."""
    release = Release.of(
        epsilon=epsilon,
        delta=0 if all(n is Noise.LAPLACE for n, _ in parts) else DELTA_G,
        parts=tuple(NoisePart(noise, scale, 1.0) for noise, scale in parts),
    )
    return get_rule(rule).price(release)


def pld_epsilon_of(events: Sequence[tuple[Any, int]], delta: float) -> float:
    """The pessimistic PLD ε(δ) of dp_accounting events, each composed its count of times
    (add/remove neighbours, :data:`PLD_INTERVAL`)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(
        dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE,
        value_discretization_interval=PLD_INTERVAL,
    )
    for event, count in events:
        accountant.compose(event, count)
    return float(accountant.get_epsilon(delta))


def pld_count(epsilon_g: int, eps_of_n: Callable[[int], float]) -> dict[str, Any]:
    """The largest n whose PLD ε(δ_g) ≤ ε_g, with its cost."""
    calls = 0

    def fits(n: int) -> bool:
        nonlocal calls
        if n == 0:
            return True
        calls += 1
        return eps_of_n(n) <= epsilon_g

    start = time.perf_counter()
    n = largest_fitting(fits)
    seconds = time.perf_counter() - start
    return {"tight": n, "pld_calls": calls, "pld_seconds": round(seconds, 3)}


def gdp_cap_units(epsilon_g: int) -> int:
    f = get_rule("gdp").filter(capacity=capacity(epsilon_g))
    caps = f.capacity_units()
    assert caps is not None
    return caps[0]


def capacity(epsilon_g: int) -> Budget:
    return Budget(epsilon=epsilon_g, delta=DELTA_G)


def gaussian_kind(sigma: int) -> Kind:
    import dp_accounting

    def tight(epsilon_g: int) -> dict[str, Any]:
        start = time.perf_counter()
        exact = gdp_cap_units(epsilon_g) * sigma * sigma // UNIT  # ⌊μ_g² σ²⌋
        seconds = time.perf_counter() - start
        pld = pld_count(
            epsilon_g,
            lambda n: pld_epsilon_of([(dp_accounting.GaussianDpEvent(sigma), n)], float(DELTA_G)),
        )
        return {
            "tight": exact,
            "tight_method": "gdp-exact",
            "tight_seconds": round(seconds, 3),
            "tight_pld": pld["tight"],
            "pld_seconds": pld["pld_seconds"],
        }

    eps_decl = gaussian_epsilon(float(sigma), float(DELTA_G))
    return Kind(
        name="gaussian",
        params={"sigma": sigma},
        noise_costs=lambda rule: [release_cost(rule, [(Noise.GAUSSIAN, float(sigma))], eps_decl)],
        dp_costs=lambda d: [Budget(epsilon=gaussian_epsilon(float(sigma), float(d)), delta=d)],
        needs_delta=True,
        tight=tight,
        rdp_float=lambda a: gaussian_rdp(float(sigma), a),
    )


def laplace_kind(epsilon_i: Decimal) -> Kind:
    import dp_accounting

    scale = float(1 / epsilon_i)

    def tight(epsilon_g: int) -> dict[str, Any]:
        found = pld_count(
            epsilon_g,
            lambda n: pld_epsilon_of([(dp_accounting.LaplaceDpEvent(scale), n)], float(DELTA_G)),
        )
        return {**found, "tight_method": "pld-pessimistic", "tight_seconds": found["pld_seconds"]}

    return Kind(
        name="laplace",
        params={"epsilon_i": float(epsilon_i), "scale": scale},
        noise_costs=lambda rule: [release_cost(rule, [(Noise.LAPLACE, scale)], float(epsilon_i))],
        dp_costs=lambda d: [Budget(epsilon=epsilon_i, delta=0)],
        needs_delta=False,
        tight=tight,
        rdp_float=lambda a: laplace_rdp(scale, a),
    )


@functools.lru_cache(maxsize=1)
def sgd_curve() -> tuple[Cost, str]:
    """The RDP curve of one DP-SGD charge (10 steps) and where it came from:
    ``blockbudget.training.sgd_curve`` where that module exists (the same values as Opacus' to
    ~1e-9 relative, never below the exact curve, and 1000× faster), else
    :meth:`SgdPlan.rdp_curve <blockbudget.training.dpsgd.SgdPlan.rdp_curve>` (Opacus)."""
    try:
        module = importlib.import_module("blockbudget.training.sgd_curve")
    except ImportError:
        from blockbudget.training.dpsgd import SgdPlan

        plan = SgdPlan(noise_multiplier=SGD_SIGMA, sample_rate=SGD_Q, steps=SGD_STEPS)
        return plan.rdp_curve(), "SgdPlan.rdp_curve"
    curve: Cost = module.subsampled_gaussian_curve(
        sample_rate=SGD_Q, noise_multiplier=SGD_SIGMA, steps=SGD_STEPS
    )
    return curve, "sgd_curve.subsampled_gaussian_curve"


def dpsgd_kind() -> Kind:
    import dp_accounting

    from blockbudget.training.dpsgd import PLD_DISCRETIZATION, pld_epsilon

    curve, source = sgd_curve()
    step = dp_accounting.PoissonSampledDpEvent(SGD_Q, dp_accounting.GaussianDpEvent(SGD_SIGMA))

    def tight(epsilon_g: int) -> dict[str, Any]:
        found = pld_count(
            epsilon_g,
            lambda n: pld_epsilon_of([(step, SGD_STEPS * n)], float(DELTA_G)),
        )
        coarse = pld_count(  # the platform's own pld_epsilon, at its coarser discretisation
            epsilon_g, lambda n: pld_epsilon(SGD_SIGMA, SGD_Q, SGD_STEPS * n, float(DELTA_G))
        )
        return {
            **found,
            "tight_method": "pld-pessimistic",
            "tight_seconds": found["pld_seconds"],
            "tight_pld_epsilon": coarse["tight"],
            "pld_epsilon_interval": PLD_DISCRETIZATION,
        }

    return Kind(
        name="dpsgd",
        params={
            "sample_rate": SGD_Q,
            "noise_multiplier": SGD_SIGMA,
            "steps_per_charge": SGD_STEPS,
            "curve_source": source,
        },
        noise_costs=lambda rule: [curve],  # gdp's filter refuses an RDP curve
        dp_costs=lambda d: [Budget(epsilon=sgd_epsilon(float(d)), delta=d)],
        needs_delta=True,
        tight=tight,
        rdp_float=dpsgd_rdp,
    )


def mixed_kind() -> Kind:
    import dp_accounting

    scale = float(1 / MIXED_EPSILON)
    sigma = float(MIXED_SIGMA)
    eps_decl = gaussian_epsilon(sigma, float(DELTA_G))

    def tight(epsilon_g: int) -> dict[str, Any]:
        found = pld_count(
            epsilon_g,
            lambda n: pld_epsilon_of(
                [
                    (dp_accounting.GaussianDpEvent(sigma), n),
                    (dp_accounting.LaplaceDpEvent(scale), n),
                ],
                float(DELTA_G),
            ),
        )
        return {**found, "tight_method": "pld-pessimistic", "tight_seconds": found["pld_seconds"]}

    return Kind(
        name="mixed",
        params={"sigma": MIXED_SIGMA, "epsilon_i": float(MIXED_EPSILON)},
        noise_costs=lambda rule: [
            release_cost(rule, [(Noise.GAUSSIAN, sigma)], eps_decl),
            release_cost(rule, [(Noise.LAPLACE, scale)], float(MIXED_EPSILON)),
        ],
        dp_costs=lambda d: [
            Budget(epsilon=gaussian_epsilon(sigma, float(d)), delta=d),
            Budget(epsilon=MIXED_EPSILON, delta=0),
        ],
        needs_delta=True,
        tight=tight,
        rdp_float=lambda a: gaussian_rdp(sigma, a) + laplace_rdp(scale, a),
    )


# --- counting ------------------------------------------------------------------------------


def noise_count(rule: str, kind: Kind, epsilon_g: int) -> int:
    f = get_rule(rule).filter(capacity=capacity(epsilon_g))
    step = summed(f, kind.noise_costs(rule))
    return largest_fitting(lambda n: f.fits(scaled(n, step)))


def dp_count(f: Filter, kind: Kind, share_units: int) -> int:
    """The largest n such that n charges fit, each δ-using part priced at δ_i = ⌊share/n⌋."""
    if not kind.needs_delta:
        step = summed(f, kind.dp_costs(Decimal(0)))
        return largest_fitting(lambda n: f.fits(scaled(n, step)))

    def fits(n: int) -> bool:
        if n == 0:
            return True
        delta_units = share_units // n
        if delta_units == 0:
            return False
        return f.fits(scaled(n, summed(f, kind.dp_costs(from_units(delta_units)))))

    return largest_fitting(fits)


def fraction(n: int, tight: int) -> float | None:
    return None if tight == 0 else round(n / tight, 4)


def rule_row(
    rule: str, kind: Kind, epsilon_g: int, tight: int, slacks: Sequence[Decimal]
) -> dict[str, Any]:
    start = time.perf_counter()
    out: dict[str, Any] = {}
    try:
        if rule == "basic":
            f = get_rule(rule).filter(capacity=capacity(epsilon_g))
            n = dp_count(f, kind, units_down(DELTA_G))
            out = {"charges": n, "slack_fraction": 0}
        elif rule in SLACK_RULES:
            counts: dict[str, int] = {}
            for frac in slacks:
                if frac >= 1 and rule == "strong":
                    continue
                slack = DELTA_G * frac
                f = get_rule(rule).filter(capacity=capacity(epsilon_g), slack_delta=float(slack))
                counts[str(frac)] = dp_count(f, kind, units_down(DELTA_G - slack))
            best = max(counts, key=lambda k: (counts[k], Decimal(k) == DEFAULT_SLACK))
            default = counts.get(str(DEFAULT_SLACK))
            out = {
                "charges": counts[best],
                "slack_fraction": float(best),
                "charges_at_default_slack": default,
                "fraction_at_default_slack": None if default is None else fraction(default, tight),
                "charges_by_slack": counts,
            }
        else:
            out = {"charges": noise_count(rule, kind, epsilon_g)}
    except InvalidBudgetError as err:
        out = {"charges": None, "refused": str(err)}
    seconds = time.perf_counter() - start
    n = out["charges"]
    return {
        "rule": rule,
        "charges": n,
        "tight": tight,
        "fraction": None if n is None else fraction(n, tight),
        **{k: v for k, v in out.items() if k != "charges"},
        "seconds": round(seconds, 3),
    }


def reference_rows(kind: Kind, epsilon_g: int, tight: int) -> list[dict[str, Any]]:
    """The three reference rows of one (ε_g, kind) (see the module docstring)."""
    out: list[dict[str, Any]] = []
    grid = np.array(ALPHAS, dtype=np.float64)
    charged = np.zeros(len(ALPHAS))  # the curve rdp2 charges, as floats
    for cost in kind.noise_costs("rdp2"):
        assert isinstance(cost, RdpCurve)
        charged += np.array([float(v) for v in cost.epsilons])
    floats = kind.rdp_float(grid).tolist()
    check = max(abs(f / c - 1.0) for f, c in zip(floats, charged.tolist(), strict=True))

    start = time.perf_counter()  # rdp2's filter and features, the whole δ_g at every order
    f = get_rule("rdp2").filter(capacity=capacity(epsilon_g))
    step = summed(f, kind.noise_costs("rdp2"))
    caps = cks_capacities(capacity(epsilon_g), Fraction(1))
    n = largest_fitting(lambda m: any(u <= c for u, c in zip(scaled(m, step), caps, strict=True)))
    at = [a for a, u, c in zip(ALPHAS, scaled(n, step), caps, strict=True) if u <= c]
    found: list[tuple[str, int, float | None, float]] = [
        ("cks-whole-delta", n, at[0] if at else None, time.perf_counter() - start)
    ]
    start = time.perf_counter()
    fixed, fixed_alpha = best_order(epsilon_g, kind.rdp_float, grid)
    found.append(("best-fixed-order", fixed, fixed_alpha, time.perf_counter() - start))
    start = time.perf_counter()
    orders = real_orders()
    real, real_alpha = best_order(epsilon_g, kind.rdp_float, orders)
    i = int(np.searchsorted(orders, real_alpha))
    lo, hi = orders[max(i - 1, 0)], orders[min(i + 1, len(orders) - 1)]
    fine, fine_alpha = best_order(epsilon_g, kind.rdp_float, np.linspace(lo, hi, REFINE + 1))
    if fine > real:
        real, real_alpha = fine, fine_alpha
    found.append(("best-real-order", real, real_alpha, time.perf_counter() - start))
    for name, n, alpha, seconds in found:
        out.append(
            {
                "rule": name,
                "reference": True,
                "charges": n,
                "tight": tight,
                "fraction": fraction(n, tight),
                "alpha": alpha,
                "curve_check": check,
                "seconds": round(seconds, 3),
            }
        )
    return out


def rows(
    epsilons: Sequence[int], kinds: Sequence[Kind], slacks: Sequence[Decimal]
) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for epsilon_g in epsilons:
        for kind in kinds:
            tight = kind.tight(epsilon_g)
            base = {
                "bench": "filter_capacity",
                "epsilon_g": epsilon_g,
                "delta_g": float(DELTA_G),
                "kind": kind.name,
                **kind.params,
            }
            found = [
                {**rule_row(rule, kind, epsilon_g, tight["tight"], slacks), "reference": False}
                for rule in RULES
            ]
            found += reference_rows(kind, epsilon_g, tight["tight"])
            for part in found:
                row = {**base, **part}
                row.update({k: v for k, v in tight.items() if k != "tight"})
                out.append(row)
                print(json.dumps(row), flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="ε_g = 1, σ = 100, ε_i = 0.1, DP-SGD and mixed, slack δ_g/2 only",
    )
    args = parser.parse_args(argv)
    start = time.perf_counter()
    if args.quick:
        epsilons: Sequence[int] = (1,)
        kinds = [gaussian_kind(100), laplace_kind(Decimal("0.1")), dpsgd_kind(), mixed_kind()]
        slacks: Sequence[Decimal] = (DEFAULT_SLACK,)
    else:
        epsilons = EPSILONS_G
        kinds = [
            *(gaussian_kind(s) for s in SIGMAS),
            *(laplace_kind(e) for e in LAPLACE_EPSILONS),
            dpsgd_kind(),
            mixed_kind(),
        ]
        slacks = SLACKS
    rows(epsilons, kinds, slacks)
    print(f"total {time.perf_counter() - start:.1f} s", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
