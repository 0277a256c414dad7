"""The pool gives a block its last budget, exactly as the ledger would, and never more.

Float fast path conservative; near capacity the filter's integer test decides on the exact
sums (charged + reserved). Hand computations: budgets in the ledger's units of 1e-18.
"""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget, RdpCurve, from_units
from blockbudget.scheduling import BlockSpec, Pool, TaskSpec, TaskStatus
from blockbudget.scheduling.base import Scheduler
from blockbudget.scheduling.baselines import Fcfs, RoundRobin
from blockbudget.scheduling.dpack import DPack
from blockbudget.scheduling.dpf import DpfN
from blockbudget.scheduling.simulator import simulate
from blockbudget.scheduling.unlocking import UnlockMode

ONE = Budget(epsilon=1.0)


def _pool(accounting: Accounting = Accounting.BASIC, capacity: Budget = ONE) -> Pool:
    pool = Pool(accounting)
    pool.add_block(BlockSpec("b", 0.0, capacity))
    return pool


def _named(task_id: str, demand: Budget | RdpCurve, at: float = 0.0) -> TaskSpec:
    return TaskSpec(task_id, at, demand, blocks=("b",))


def test_two_halves_fill_a_block_and_one_unit_more_is_refused() -> None:
    pool = _pool()
    for t in ("h1", "h2", "over"):
        pool.submit(_named(t, Budget(epsilon="1e-18") if t == "over" else Budget(epsilon=0.5)))
    assert pool.grant("h1") and pool.grant("h2")
    assert pool.exact_used("b") == (10**18, 0)
    assert not pool.grant("over") and pool.is_pending("over")


def test_the_whole_block_fits_once_and_ten_tenths_fit_exactly() -> None:
    pool = _pool()
    pool.submit(_named("all", ONE))
    assert pool.fits("all", "b", ONE) and pool.grant("all")
    tenths = _pool()
    for k in range(11):
        tenths.submit(_named(f"t{k}", Budget(epsilon="0.1")))
    assert [tenths.grant(f"t{k}") for k in range(11)] == [True] * 10 + [False]


def test_reservations_count_exactly_and_a_hold_is_available_to_its_task() -> None:
    pool = _pool()
    pool.submit(TaskSpec("a", 0.0, Budget(epsilon=0.5), max_blocks=1))
    pool.submit(TaskSpec("c", 0.0, Budget(epsilon=0.5), max_blocks=1))
    for _ in range(5):
        assert pool.reserve("a", "b", Budget(epsilon="0.1"))
    assert pool.exact_used("b") == (5 * 10**17, 0)
    assert pool.reserve("c", "b", Budget(epsilon="0.5"))  # the other half, exactly
    assert not pool.reserve("c", "b", Budget(epsilon="1e-18"))
    assert pool.fits("a", "b", Budget(epsilon="0.5"))  # its own 5 × 0.1 counts as available
    assert pool.charge("a", {"b": Budget(epsilon="0.5")})
    pool.release("c")
    pool.credit("b", Budget(epsilon="0.2"), task_id="driver")
    assert pool.exact_used("b") == (3 * 10**17, 0)
    assert pool.charge_overhead("c", "b", Budget(epsilon="0.7"), note="ε0")  # back to exactly full
    assert not pool.charge_overhead("c", "b", Budget(epsilon="1e-18"), note="ε0")


def test_rdp_a_curve_exactly_at_the_capacity_of_its_best_order_fits() -> None:
    cap = Budget(epsilon=10.0, delta=1e-6)
    pool = _pool(Accounting.RDP, cap)
    order_cap = make_filter(Accounting.RDP, capacity=cap).order_capacity  # type: ignore[attr-defined]
    best = max(range(len(order_cap)), key=lambda i: order_cap[i])
    # exactly the capacity at the best order, twice it elsewhere: only that order keeps it valid
    curve = [
        from_units(c) if i == best else Decimal(2) * abs(from_units(c)) + 1
        for i, c in enumerate(order_cap)
    ]
    pool.submit(_named("exact", RdpCurve(curve)))
    pool.submit(_named("unit", RdpCurve([Decimal("1e-18")] * len(order_cap))))
    assert pool.grant("exact")
    assert pool.exact_used("b")[best] == order_cap[best]
    assert not pool.grant("unit")


def _strong_limit(capacity: Budget) -> int:
    """The largest ε (in units) of one charge the STRONG filter admits on an empty block."""
    filt = make_filter(Accounting.STRONG, capacity=capacity)
    lo, hi = 0, 10**18
    while hi - lo > 1:
        mid = (lo + hi) // 2
        fits = filt.fits(filt.features(Budget(epsilon=from_units(mid))))
        lo, hi = (mid, hi) if fits else (lo, mid)
    return lo


def test_strong_the_filter_s_exact_limit_fits_and_one_unit_more_does_not() -> None:
    cap = Budget(epsilon=1.0, delta=1e-6)
    limit = _strong_limit(cap)
    pool = _pool(Accounting.STRONG, cap)
    pool.submit(_named("edge", Budget(epsilon=from_units(limit))))
    pool.submit(_named("beyond", Budget(epsilon=from_units(limit + 1))))
    assert not pool.fits("beyond", "b", Budget(epsilon=from_units(limit + 1)))
    assert pool.grant("edge")
    assert pool.exact_used("b")[0] == limit


def _scheduler(name: str, n: int) -> Scheduler:
    """A fresh scheduler; unlocking ones unlock 1/n of the block per arriving task."""
    if name == "dpf-n":
        return DpfN(n=n)
    if name == "dpack":
        return DPack(n=n, unlock=UnlockMode.N)
    return Fcfs() if name == "fcfs" else RoundRobin()


def _run(name: str, demands: list[str], *, n: int) -> list[bool]:
    """Whether each task (one per demand, arriving in order on one block of ε_g = 1) was
    granted by the end of a simulation. The last arrives after the first passes (DPack would
    rightly rank a tiny last task first)."""
    blocks = [BlockSpec("b", 0.0, ONE)]
    times = [0.1 * (k + 1) for k in range(len(demands) - 1)] + [2.5]
    tasks = [_named(f"t{k}", Budget(epsilon=d), at=times[k]) for k, d in enumerate(demands)]
    result = simulate(_scheduler(name, n), blocks, tasks, accounting=Accounting.BASIC, horizon=5)
    return [result.pool.status[t.task_id] is TaskStatus.GRANTED for t in tasks]


NAMES = ["dpack", "dpf-n", "fcfs", "round-robin"]


@pytest.mark.parametrize("name", NAMES)
def test_schedulers_give_the_whole_block_to_a_task_that_demands_it(name: str) -> None:
    assert _run(name, ["1", "1e-18"], n=1) == [True, False]


@pytest.mark.parametrize("name", NAMES)
def test_schedulers_give_both_halves(name: str) -> None:
    assert _run(name, ["0.5", "0.5", "1e-18"], n=2) == [True, True, False]


@pytest.mark.parametrize("name", NAMES)
def test_ten_tenths_fit_exactly_under_every_scheduler(name: str) -> None:
    assert _run(name, ["0.1"] * 10 + ["1e-18"], n=10) == [True] * 10 + [False]


# --- property: the pool never admits what the exact filter refuses ----------------------------

AMOUNTS = st.sampled_from(["0.1", "0.2", "0.25", "0.3", "0.5", "0.7", "1", "1e-18", "0.3333"])
OPS = st.lists(
    st.tuples(
        st.sampled_from(["reserve", "charge", "overhead", "release", "credit"]),
        st.integers(0, 2),
        AMOUNTS,
    ),
    min_size=1,
    max_size=40,
)


class _Model:
    """The ledger's view, kept independently: integer features per hold and charged."""

    def __init__(self, pool: Pool) -> None:
        self.filt = pool.filters[0]
        self.charged = [0] * pool.dims
        self.holds: dict[str, list[int]] = {}

    def used(self, hold_of: str | None = None) -> list[int]:
        out = list(self.charged)
        for tid, h in self.holds.items():
            if tid != hold_of:
                out = [a + b for a, b in zip(out, h, strict=True)]
        return out

    def admits(self, units: tuple[int, ...], hold_of: str | None = None) -> bool:
        return self.filt.fits([u + c for u, c in zip(self.used(hold_of), units, strict=True)])


def _step(pool: Pool, model: _Model, op: str, tid: str, cost: Budget) -> None:
    units = tuple(model.filt.features(cost))
    if op == "reserve":
        expect = model.admits(units)
        assert pool.reserve(tid, "b", cost) is expect
        if expect:
            held = model.holds.setdefault(tid, [0] * pool.dims)
            model.holds[tid] = [a + b for a, b in zip(held, units, strict=True)]
    elif op in ("charge", "overhead"):
        own = tid if op == "charge" else None
        expect = model.admits(units, own)
        done = (
            pool.charge(tid, {"b": cost}) if own else pool.charge_overhead(tid, "b", cost, note="")
        )
        assert done is expect
        if expect:
            if own:
                model.holds.pop(tid, None)
            model.charged = [a + b for a, b in zip(model.charged, units, strict=True)]
    elif op == "release":
        pool.release(tid, "b")
        model.holds.pop(tid, None)
    else:
        pool.credit("b", cost, task_id="driver")
        model.charged = [max(0, a - b) for a, b in zip(model.charged, units, strict=True)]


@settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)
@given(ops=OPS)
def test_property_pool_decisions_equal_the_exact_filter_near_capacity(
    ops: list[tuple[str, int, str]],
) -> None:
    pool = _pool()
    for k in range(3):
        pool.submit(TaskSpec(f"t{k}", 0.0, ONE, max_blocks=1))
    model = _Model(pool)
    for op, who, amount in ops:
        _step(pool, model, op, f"t{who}", Budget(epsilon=amount))
        assert list(pool.exact_used("b")) == model.used()
        assert model.filt.fits(pool.exact_used("b"))
        assert (pool.charged[0] >= [c / 1e18 for c in model.charged]).all()  # floats ≥ truth
