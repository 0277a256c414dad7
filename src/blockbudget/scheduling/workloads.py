"""Seeded workloads for the simulator: seed 000's queries and PrivateKube's microbenchmark
(DPack's Alibaba-DP workload is in :mod:`blockbudget.scheduling.alibaba`).

* :func:`seed000_queries` — seed ``000_de3e86489c8646aa.txt`` §VII-C/D: OPEN queries over a pool
  of blocks, each with an access limit c_j and significance p_ij; *small-cost* queries demand
  1–5% of a block (Assumption 1), *mixed-cost* ones are 30% large (30–80% of a block). p_ij is a
  block quality times a query affinity, scaled so that L ≤ p_ij/ε_j ≤ U (Assumption 2, Eq. (8)).
* :func:`privatekube_micro` — PrivateKube OSDI'21 §6.2 microbenchmark: a block per time unit;
  75% mice demanding 0.01·ε_G and 25% elephants demanding 0.1·ε_G, each asking for the last
  block with probability 0.75 or the last 10 blocks with probability 0.25 (NAMED tasks).
* :func:`subsampled_gaussian_curve` — the RDP curve of DP-SGD from dp-accounting.

"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from blockbudget.accounting import Accounting, AccountingRule, Noise, NoisePart, Release
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.decimals import plain_number
from blockbudget.errors import InvalidBudgetError, InvalidRequestError
from blockbudget.scheduling.base import BlockSpec, TaskSpec

__all__ = [
    "Workload",
    "block_capacity",
    "privatekube_micro",
    "seed000_queries",
    "subsampled_gaussian_curve",
]


@dataclass(frozen=True)
class Workload:
    """Blocks and tasks of one seeded run, with the accounting rule they are meant for.

    Attributes:
        name: a short label.
        blocks: the blocks (arrival times ascending).
        tasks: the tasks (arrival times ascending).
        accounting: the accounting rule.
        upper: U of Assumption 2 where meaningful (seed 000 workloads), else None.
        lower: L of Assumption 2 where meaningful, else None.
    """

    name: str
    blocks: tuple[BlockSpec, ...]
    tasks: tuple[TaskSpec, ...]
    accounting: Accounting
    upper: float | None = None
    lower: float | None = None


def _positive(name: str, value: float) -> None:
    if not (value > 0 and math.isfinite(value)):
        raise InvalidRequestError(f"{name} must be finite and > 0, got {value!r}")


def block_capacity(rule: AccountingRule, epsilon_g: float) -> Budget:
    """(ε_g, 0) where ``rule`` can guard a block of pure DP (basic), else (ε_g, 1e-6): the rules
    that trade δ for ε (strong, RDP, μ-GDP, advanced composition) need δ_g > 0.

    Example:
        >>> from blockbudget.accounting import get_rule
        >>> [str(block_capacity(get_rule(r), 1.0)) for r in ("basic", "rdp")]
        ['(ε=1, δ=0)', '(ε=1, δ=1e-06)']
    """
    pure = Budget(epsilon=epsilon_g, delta=0)
    try:
        rule.filter(capacity=pure)
    except InvalidBudgetError:
        return Budget(epsilon=epsilon_g, delta=1e-6)
    return pure


def seed000_queries(
    *,
    n_blocks: int = 8,
    n_queries: int = 12,
    mixed: bool = False,
    epsilon_g: float = 1.0,
    upper: float = 50.0,
    lower: float = 1.0,
    max_blocks: tuple[int, int] = (1, 4),
    seed: int = 0,
    accounting: Accounting = Accounting.BASIC,
) -> Workload:
    """Seed 000's queries (see the module docstring). Blocks arrive at 0, 1, ...; queries
    arrive uniformly over the same span (each after at least one block).

    Raises:
        InvalidRequestError: non-positive sizes or bounds, or L > U.
    """
    if n_blocks < 1 or n_queries < 1:
        raise InvalidRequestError("need at least one block and one query")
    _positive("epsilon_g", epsilon_g)
    if not (0 < lower <= upper):
        raise InvalidRequestError(f"need 0 < L <= U, got L={lower}, U={upper}")
    rng = np.random.default_rng(seed)
    rule = Accounting(accounting).rule
    cap = block_capacity(rule, epsilon_g)
    blocks = tuple(BlockSpec(f"d{i}", float(i), cap) for i in range(n_blocks))
    quality = rng.uniform(0.0, 1.0, n_blocks)
    tasks = []
    for j in range(n_queries):
        large = mixed and rng.random() < 0.3
        share = rng.uniform(0.3, 0.8) if large else rng.uniform(0.01, 0.05)
        eps = round(float(share * epsilon_g), 6)
        demand = rule.pure(eps)  # an ε-DP query as the rule prices it
        affinity = rng.uniform(0.0, 1.0, n_blocks)
        # ratio p/ε in [L, U], increasing with block quality × query affinity
        ratio = lower * (upper / lower) ** (quality * affinity)
        sig = {blocks[i].block_id: float(ratio[i] * eps) for i in range(n_blocks)}
        arrival = float(rng.uniform(0, n_blocks - 1)) if n_blocks > 1 else 0.0
        limit = int(rng.integers(max_blocks[0], max_blocks[1] + 1))
        tasks.append(TaskSpec(f"q{j}", arrival, demand, max_blocks=limit, significance=sig))
    tasks.sort(key=lambda t: t.arrival)
    kind = "mixed" if mixed else "small"
    return Workload(f"seed000-{kind}", blocks, tuple(tasks), accounting, upper, lower)


def privatekube_micro(
    *,
    n_blocks: int = 50,
    tasks_per_block: int = 100,
    epsilon_g: float = 10.0,
    delta_g: float = 1e-7,
    seed: int = 0,
    accounting: Accounting = Accounting.BASIC,
    timeout: float | None = None,
    gaussian_delta: float | None = None,
) -> Workload:
    """PrivateKube's microbenchmark (see the module docstring). A mouse is a Laplace mechanism
    of pure ε = 0.01·ε_G, an elephant one of 0.1·ε_G, each priced by the rule (its ε under an
    (ε, δ) rule, its exact RDP curve under RDP, its μ under μ-GDP).

    With ``gaussian_delta`` set, each task is instead a Gaussian mechanism calibrated to
    (ε, ``gaussian_delta``) by the classical bound σ = √(2 ln(1.25/δ))/ε, as PrivateKube's
    simulator builds its RDP demands (``gaussian_dp2sigma``, δ = 1e-9): (ε, δ) under an
    (ε, δ) rule, the curve α/(2σ²) under RDP.

    Raises:
        InvalidRequestError: non-positive sizes, or ``gaussian_delta`` outside (0, 1).
    """
    if n_blocks < 1 or tasks_per_block < 1:
        raise InvalidRequestError("need at least one block and one task per block")
    if gaussian_delta is not None and not 0 < gaussian_delta < 1:
        raise InvalidRequestError(f"gaussian_delta must be in (0, 1), got {gaussian_delta!r}")
    rng = np.random.default_rng(seed)
    cap = Budget(epsilon=epsilon_g, delta=delta_g)
    blocks = tuple(BlockSpec(f"b{i}", float(i), cap) for i in range(n_blocks))
    mouse_eps, elephant_eps = 0.01 * epsilon_g, 0.1 * epsilon_g

    rule = Accounting(accounting).rule

    def cost(eps: float) -> Cost:
        if gaussian_delta is not None:
            sigma = math.sqrt(2 * math.log(1.25 / gaussian_delta)) / eps
            gauss = NoisePart(Noise.GAUSSIAN, scale=sigma, sensitivity=1.0)
            return rule.price(Release.of(epsilon=eps, delta=gaussian_delta, parts=(gauss,)))
        laplace = NoisePart(Noise.LAPLACE, scale=1.0 / eps, sensitivity=1.0)
        return rule.price(Release.of(epsilon=eps, parts=(laplace,)))

    mouse, elephant = cost(mouse_eps), cost(elephant_eps)
    n_tasks = n_blocks * tasks_per_block
    arrivals = np.sort(rng.uniform(0, n_blocks, n_tasks))
    tasks = []
    for j, t in enumerate(arrivals):
        last = int(t)
        k = 1 if rng.random() < 0.75 else 10
        names = tuple(blocks[i].block_id for i in range(max(0, last - k + 1), last + 1))
        demand = mouse if rng.random() < 0.75 else elephant
        tasks.append(TaskSpec(f"t{j}", float(t), demand, blocks=names, timeout=timeout))
    return Workload("privatekube-micro", blocks, tuple(tasks), accounting)


def subsampled_gaussian_curve(*, sample_rate: float, sigma: float, steps: int) -> RdpCurve:
    """RDP curve of DP-SGD: ``steps`` Poisson-subsampled Gaussian steps (Mironov, Talwar &
    Zhang 2019), from dp-accounting's RDP accountant (no torch import)."""
    from dp_accounting import dp_event
    from dp_accounting.rdp import RdpAccountant

    sample_rate, sigma, steps = plain_number(sample_rate), plain_number(sigma), plain_number(steps)

    def at(alpha: float) -> float:
        accountant = RdpAccountant(orders=[alpha])
        event = dp_event.PoissonSampledDpEvent(sample_rate, dp_event.GaussianDpEvent(sigma))
        accountant.compose(event, steps)
        return float(accountant._rdp[0])

    return RdpCurve.from_function(at)
