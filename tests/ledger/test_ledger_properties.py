"""Property tests (hypothesis) over every registered rule's filter (basic, strong, RDP, GDP and
advanced composition).

A random sequence of reserve / direct charge / draw / release / expire / clock steps runs
against a real ledger (SQLite file) and against a small in-memory model of the rules. Reserves
and charges name a registered context or, now and then, an unregistered one, which must be
refused with UnknownContextError and change nothing. After
every step: the ledger's vectors equal the model's; every (block, context) fits its filter
(``filter.fits(charged + reserved)``: no overspend ever); ``reserved`` equals the sum of what
the open reservations still hold (capacity = unallocated + reserved + charged). Every step's
outcome (accepted or which refusal) must equal the model's, so the ledger neither overspends
nor refuses what fits. ``verify()`` passes at the end.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ledger_support import FakeClock

from blockbudget.accounting import (
    Accounting,
    Filter,
    Noise,
    NoisePart,
    Release,
    add_vectors,
    make_filter,
    sub_vectors,
)
from blockbudget.accounting.gdp import GaussianDp
from blockbudget.budget import Budget, Cost, RdpCurve
from blockbudget.errors import BudgetExceededError, ReservationError, UnknownContextError
from blockbudget.ledger import Ledger, ReservationState

BLOCKS = ("b0", "b1", "b2", "b3")
CONTEXTS = ("ops", "ml")
#: Named by some requests but never registered: every request naming it is refused.
UNREGISTERED = "intruder"

CASES: dict[Accounting, tuple[Budget, list[Cost]]] = {
    Accounting.BASIC: (
        Budget(epsilon=1.0, delta=1e-6),
        [
            Budget(epsilon=0.1),
            Budget(epsilon=0.25, delta=1e-7),
            Budget(epsilon=0.3),
            Budget(epsilon=0.5, delta=5e-7),
            Budget(epsilon=0.05),
        ],
    ),
    Accounting.STRONG: (
        Budget(epsilon=1.0, delta=1e-5),
        [
            Budget(epsilon=0.02),
            Budget(epsilon=0.05, delta=1e-7),
            Budget(epsilon=0.1),
            Budget(epsilon=0.2),
            Budget(epsilon=0.3),
        ],
    ),
    Accounting.RDP: (
        Budget(epsilon=3.0, delta=1e-5),
        [
            RdpCurve.gaussian(sigma=2.0),
            RdpCurve.gaussian(sigma=4.0),
            RdpCurve.gaussian(sigma=8.0),
            Budget(epsilon=0.1),
            Budget(epsilon=0.3),
        ],
    ),
    Accounting("gdp"): (  # μ_g ≈ 0.2367: σ/Δ = 8 is a sixth of Σμ² ≤ μ_g², σ/Δ = 5 about 2/3
        Budget(epsilon=1.0, delta=1e-6),
        [
            GaussianDp.gaussian(sigma=8.0),
            GaussianDp.gaussian(sigma=5.0),
            GaussianDp.gaussian(sigma=16.0),
            Budget(epsilon=0.05),
            GaussianDp.gaussian(sigma=12.0),
        ],
    ),
    Accounting("whitehouse"): (  # a first pure charge fits up to ε ≈ 0.18
        Budget(epsilon=1.0, delta=1e-6),
        [
            Budget(epsilon=0.02),
            Budget(epsilon=0.05, delta=1e-7),
            Budget(epsilon=0.1),
            Budget(epsilon=0.15),
            Budget(epsilon=0.08, delta=2e-7),
        ],
    ),
}


@dataclass
class MRes:
    id: str
    context: str
    blocks: tuple[str, ...]
    remaining: dict[str, tuple[int, ...]]
    expires_at: float
    state: ReservationState = ReservationState.OPEN


@dataclass
class Model:
    f: Filter
    charged: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    reserved: dict[tuple[str, str], tuple[int, ...]] = field(default_factory=dict)
    res: list[MRes] = field(default_factory=list)

    def get(self, b: str, c: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
        z = self.f.zero()
        return self.charged.get((b, c), z), self.reserved.get((b, c), z)

    def copy(self) -> Model:
        clone = Model(self.f, dict(self.charged), dict(self.reserved))
        clone.res = [
            MRes(r.id, r.context, r.blocks, dict(r.remaining), r.expires_at, r.state)
            for r in self.res
        ]
        return clone

    def close(self, r: MRes, state: ReservationState) -> None:
        for b, v in r.remaining.items():
            _ch, rs = self.get(b, r.context)
            self.reserved[(b, r.context)] = sub_vectors(rs, v)
            r.remaining[b] = self.f.zero()
        r.state = state

    def expire_stale(self, blocks: tuple[str, ...], ctx: str, now: float) -> None:
        """What the ledger does first on every reserve / charge (see WriteTx.expire_stale)."""
        if all(not any(self.get(b, ctx)[1]) for b in blocks):
            return
        for r in self.res:
            if (
                r.state is ReservationState.OPEN
                and r.context == ctx
                and r.expires_at <= now
                and set(r.blocks) & set(blocks)
            ):
                self.close(r, ReservationState.EXPIRED)


ops = st.one_of(
    st.tuples(
        st.just("reserve"),
        st.sets(st.sampled_from(BLOCKS), min_size=1, max_size=3),
        st.integers(0, 4),
        st.sampled_from((*CONTEXTS, *CONTEXTS, UNREGISTERED)),
        st.sampled_from([5.0, 50.0]),
    ),
    st.tuples(
        st.just("charge"),
        st.sets(st.sampled_from(BLOCKS), min_size=1, max_size=3),
        st.integers(0, 4),
        st.sampled_from((*CONTEXTS, *CONTEXTS, UNREGISTERED)),
    ),
    st.tuples(st.just("draw"), st.integers(0, 20), st.integers(1, 7), st.integers(0, 4)),
    st.tuples(st.just("release"), st.integers(0, 20)),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 10.0, 60.0])),
    st.tuples(st.just("expire")),
)


def check_against_model(ledger: Ledger, model: Model) -> None:
    open_left: dict[tuple[str, str], tuple[int, ...]] = {}
    for r in ledger.reservations(state=ReservationState.OPEN):
        for b, v in r.remaining:
            key = (b, r.context)
            open_left[key] = add_vectors(open_left.get(key, model.f.zero()), v)
    for s in ledger.states():
        assert (s.charged, s.reserved) == model.get(s.block, s.context)
        assert model.f.fits(add_vectors(s.charged, s.reserved)), "overspend"
        assert s.reserved == open_left.get((s.block, s.context), model.f.zero())


def generic_case(accounting: Accounting) -> tuple[Budget, list[Cost]]:
    """Costs of any registered rule without a hand-tuned case above, priced by the rule itself:
    pure ε of 0.02 … 0.15 and Gaussians of σ/Δ 8 and 16 on a (1, 1e-6) block."""
    rule = accounting.rule
    gauss = [NoisePart(Noise.GAUSSIAN, s, 1.0) for s in (8.0, 16.0)]
    costs = [rule.pure(e) for e in ("0.02", "0.05", "0.15")]
    if rule.prices_noise:
        costs += [rule.price(Release.of(epsilon="0.1", parts=(g,))) for g in gauss]
    return Budget(epsilon=1.0, delta=1e-6), costs


def run_sequence(accounting: Accounting, steps: list[tuple[object, ...]]) -> None:
    capacity, costs = CASES.get(accounting) or generic_case(accounting)
    f = make_filter(accounting, capacity=capacity)
    model = Model(f)
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(f"sqlite:///{Path(tmp) / 'ledger.db'}", clock=clock)
        try:
            for name in CONTEXTS:
                ledger.add_context(name)
            ledger.add_blocks(list(BLOCKS), stream="s", capacity=capacity, accounting=accounting)
            for step in steps:
                apply_step(ledger, model, clock, costs, step)
                check_against_model(ledger, model)
            report = ledger.verify()
            assert report.ok, report.problems
        finally:
            ledger.dispose()


def apply_step(
    ledger: Ledger, model: Model, clock: FakeClock, costs: list[Cost], step: tuple[object, ...]
) -> None:
    kind = step[0]
    f = model.f
    if kind in ("reserve", "charge"):
        blocks = tuple(sorted(step[1]))  # type: ignore[call-overload]
        cost = costs[step[2]]  # type: ignore[index]
        ctx = str(step[3])
        feat = f.features(cost)
        if ctx == UNREGISTERED:
            n_events = len(ledger.events())
            with pytest.raises(UnknownContextError, match=UNREGISTERED):
                if kind == "reserve":
                    ledger.reserve(blocks, cost, context=ctx, ttl_seconds=float(step[4]))  # type: ignore[arg-type]
                else:
                    ledger.charge(blocks, cost, context=ctx)
            assert len(ledger.events()) == n_events  # not even a stale reservation expired
            return
        trial = model.copy()
        trial.expire_stale(blocks, ctx, clock.now)
        fits = all(f.fits(add_vectors(add_vectors(*trial.get(b, ctx)), feat)) for b in blocks)
        if not fits:
            with pytest.raises(BudgetExceededError):
                if kind == "reserve":
                    ledger.reserve(blocks, cost, context=ctx, ttl_seconds=float(step[4]))  # type: ignore[arg-type]
                else:
                    ledger.charge(blocks, cost, context=ctx)
            return  # the refusal rolled back the expiries too
        model.charged, model.reserved, model.res = trial.charged, trial.reserved, trial.res
        if kind == "reserve":
            r = ledger.reserve(blocks, cost, context=ctx, ttl_seconds=float(step[4]))  # type: ignore[arg-type]
            for b in blocks:
                ch, rs = model.get(b, ctx)
                model.reserved[(b, ctx)] = add_vectors(rs, feat)
            model.res.append(MRes(r.id, ctx, blocks, dict.fromkeys(blocks, feat), r.expires_at))
        else:
            ledger.charge(blocks, cost, context=ctx)
            for b in blocks:
                ch, rs = model.get(b, ctx)
                model.charged[(b, ctx)] = add_vectors(ch, feat)
        return
    if kind == "draw":
        if not model.res:
            return
        r = model.res[int(step[1]) % len(model.res)]  # type: ignore[call-overload]
        mask = int(step[2])  # type: ignore[call-overload]
        blocks = tuple(b for i, b in enumerate(r.blocks) if mask >> (i % 3) & 1) or r.blocks[:1]
        cost = costs[step[3]]  # type: ignore[index]
        feat = f.features(cost)
        drawable = r.state is ReservationState.OPEN and clock.now < r.expires_at
        if not drawable or any(
            any(x > y for x, y in zip(feat, r.remaining[b], strict=True)) for b in blocks
        ):
            with pytest.raises(ReservationError):
                ledger.charge(blocks, cost, reservation_id=r.id)
            return
        model.expire_stale(blocks, r.context, clock.now)
        ledger.charge(blocks, cost, reservation_id=r.id)
        for b in blocks:
            ch, rs = model.get(b, r.context)
            model.charged[(b, r.context)] = add_vectors(ch, feat)
            model.reserved[(b, r.context)] = sub_vectors(rs, feat)
            r.remaining[b] = sub_vectors(r.remaining[b], feat)
        return
    if kind == "release":
        if not model.res:
            return
        r = model.res[int(step[1]) % len(model.res)]  # type: ignore[call-overload]
        if r.state is not ReservationState.OPEN:
            with pytest.raises(ReservationError):
                ledger.release(r.id)
            return
        assert ledger.release(r.id).state is ReservationState.CLOSED
        model.close(r, ReservationState.CLOSED)
        return
    if kind == "advance":
        clock.advance(float(step[1]))  # type: ignore[arg-type]
        return
    assert kind == "expire"
    due = sorted(
        r.id for r in model.res if r.state is ReservationState.OPEN and r.expires_at <= clock.now
    )
    assert ledger.expire_reservations() == due
    for r in model.res:
        if r.id in due:
            model.close(r, ReservationState.EXPIRED)


@pytest.mark.parametrize("accounting", list(Accounting))
@settings(max_examples=70)
@given(steps=st.lists(ops, min_size=1, max_size=25))
def test_no_sequence_overspends_and_the_log_replays(
    accounting: Accounting, steps: list[tuple[object, ...]]
) -> None:
    run_sequence(accounting, steps)


def test_exactness_ten_tenths_fit_and_one_more_billionth_does_not() -> None:
    steps: list[tuple[object, ...]] = [("charge", {"b0"}, 0, "ops")] * 10
    run_sequence(Accounting.BASIC, steps)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(f"sqlite:///{Path(tmp) / 'x.db'}")
        ledger.add_context("default")
        ledger.add_blocks(
            ["d"], stream="s", capacity=Budget(epsilon=1.0, delta=1e-6), accounting=Accounting.BASIC
        )
        for _ in range(10):
            ledger.charge(["d"], Budget(epsilon=0.1, delta=1e-7))
        for extra in (Budget(epsilon=1e-9), Budget(epsilon=0, delta=1e-18)):
            with pytest.raises(BudgetExceededError):
                ledger.charge(["d"], extra)
        assert ledger.state("d").charged == (10**18, 10**12)
        assert ledger.verify().ok
        ledger.dispose()
