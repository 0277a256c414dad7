"""Power of the SLAed validators: the smallest margin at which ACCEPT has probability ≥ 0.9.

For each validator, inequality and n, T seeded trials draw n i.i.d. rows, release the test
statistics with Laplace noise (ε = 1 for the validation, η = 0.05) and find the smallest margin
Δ at which the trial ACCEPTs:

* ``loss`` — ``LossValidator`` on losses in [0, 1]; the target is τ = μ + Δ. Two loss laws:
  ``beta`` (Beta(24.9, 58.1): μ = 0.3, sd = 0.05, a small variance) and ``bernoulli`` (0/1 with
  μ = 0.1: variance μ(1 − μ), close to B·μ, the seed's Bernstein case). Per trial the noise is
  drawn once and Δ found by bisection (the SEED bound does not depend on τ; the empirical
  Bernstein one moves only through its centre c = τ).
* ``sum`` — ``SumStatisticValidator`` on one group of speeds 600·Beta(13.3125, 4.4375) mph
  (μ = 450, sd = 60) released by ``dp_group_by_mean`` at ε = 1 with the range [0, 600]; the
  margin is the accept bound itself (it does not depend on τ_err). ``legacy`` is the bound before
  this change (counts released again); ``seed`` reuses the release's counts; ``empirical_bernstein``
  also releases the second moment. ``real_err_q90`` is the 0.9-quantile of the DP mean's actual
  error, for comparison.

``margin_q90`` is the 0.9-quantile of the per-trial smallest margins: the smallest Δ with an
empirical ACCEPT rate ≥ 0.9 over T trials (its resolution is that of a 0.9-quantile of T draws).

Usage: ``python benchmarks/validator_power.py [--quick] [--trials T] [--sizes 1000,10000]``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from decimal import Decimal

import numpy as np

from blockbudget.mechanisms import SeededNoise, dp_group_by_mean
from blockbudget.training import (
    Inequality,
    LossEvidence,
    LossValidator,
    MeteredSource,
    SumStatisticEvidence,
    SumStatisticValidator,
)
from blockbudget.training.validation import Outcome, Released

EPS, ETA = 1.0, 0.05
LAWS: dict[str, tuple[float, Callable[[np.random.Generator, int], np.ndarray]]] = {
    "beta": (0.3, lambda rng, n: rng.beta(24.9, 58.1, n)),
    "bernoulli": (0.1, lambda rng, n: (rng.random(n) < 0.1).astype(float)),
}
SPEED_MU, SPEED_B = 450.0, 600.0


def _loss_accepts(
    losses: np.ndarray, z: np.ndarray, tau: float, inequality: Inequality
) -> tuple[bool, float]:
    v = LossValidator(target=tau, inequality=inequality)
    jobs = v.jobs(LossEvidence(losses), epsilon=Decimal(EPS))
    values = tuple(vals + part.scale * z[i] for i, (part, vals) in enumerate(jobs))
    released = Released(values, tuple(part.scale for part, _ in jobs), noisy=True)
    outcome, acc, _ = v.decide(released, LossEvidence(losses), epsilon=EPS, eta=ETA)
    return outcome is Outcome.ACCEPT, acc


def loss_margin(rng: np.random.Generator, law: str, n: int, inequality: Inequality) -> float:
    """The smallest Δ at which one seeded trial ACCEPTs (bisection to 1e-5)."""
    mu, draw = LAWS[law]
    losses = draw(rng, n)
    z = rng.laplace(0.0, 1.0, 3)
    _, acc = _loss_accepts(losses, z, mu, inequality)
    if inequality is Inequality.SEED:
        return max(acc - mu, 0.0)  # the bound does not depend on τ
    lo, hi = 0.0, 1.0 - mu
    if not _loss_accepts(losses, z, mu + hi, inequality)[0]:
        return math.inf
    while hi - lo > 1e-5:
        mid = (lo + hi) / 2.0
        if _loss_accepts(losses, z, mu + mid, inequality)[0]:
            hi = mid
        else:
            lo = mid
    return hi


def sum_margin(seed: int, n: int, variant: str) -> tuple[float, float]:
    """(accept bound, actual error of the DP mean) for one seeded trial."""
    rng = np.random.default_rng(seed)
    values = SPEED_B * rng.beta(13.3125, 4.4375, n)
    keys = np.zeros(n, dtype=np.int64)
    src = MeteredSource()
    release = dp_group_by_mean(
        src, keys, values, epsilon=EPS, value_range=SPEED_B, nkeys=1, noise=SeededNoise(seed)
    )
    error = abs(release.value.means[0] - SPEED_MU)
    evidence = SumStatisticEvidence.from_release(release, keys, values)
    if variant == "legacy":
        scales = {p.name: p.scale for p in release.perturbations}
        evidence = SumStatisticEvidence(
            [n], SPEED_B, sum_scale=scales["sums"], count_scale=scales["counts"]
        )
    inequality = (
        Inequality.SEED if variant != "empirical_bernstein" else Inequality.EMPIRICAL_BERNSTEIN
    )
    result = SumStatisticValidator(target=1.0, inequality=inequality).validate(
        src, evidence, epsilon=EPS, eta=ETA, noise=SeededNoise(seed + 1)
    )
    return result.accept_bound, error


def q90(xs: list[float]) -> float:
    """The smallest x with at least 90 % of the draws ≤ x (an order statistic, no interpolation)."""
    ordered = sorted(xs)
    return ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="few trials, n = 1,000 only")
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--sizes", default="1000,10000,100000")
    args = parser.parse_args(argv)
    trials = 10 if args.quick else args.trials
    sizes = [1000] if args.quick else [int(x) for x in args.sizes.split(",")]
    started = time.perf_counter()
    for n in sizes:
        for law in LAWS:
            for inequality in Inequality:
                t0 = time.perf_counter()
                rng = np.random.default_rng([n, len(law), len(inequality.value)])
                margins = [loss_margin(rng, law, n, inequality) for _ in range(trials)]
                row = {"bench": "validator_power", "validator": "loss", "law": law, "n": n}
                row |= {"inequality": inequality.value, "trials": trials}
                row |= {"margin_q90": q90(margins), "seconds": round(time.perf_counter() - t0, 2)}
                print(json.dumps(row), flush=True)
        for variant in ("legacy", "seed", "empirical_bernstein"):
            t0 = time.perf_counter()
            pairs = [sum_margin(1000 * i + 7, n, variant) for i in range(trials)]
            row = {"bench": "validator_power", "validator": "sum", "law": "speed", "n": n}
            row |= {"inequality": variant, "trials": trials}
            row |= {"margin_q90": q90([b for b, _ in pairs])}
            row |= {"real_err_q90": q90([e for _, e in pairs])}
            row |= {"seconds": round(time.perf_counter() - t0, 2)}
            print(json.dumps(row), flush=True)
    summary = {"bench": "summary", "quick": args.quick, "trials": trials, "eps": EPS, "eta": ETA}
    summary |= {
        "seconds": round(time.perf_counter() - started, 1),
        "python": platform.python_version(),
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
