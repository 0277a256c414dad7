"""Unit tests of every ledger operation and every refusal (on SQLite, and on PostgreSQL when
BLOCKBUDGET_TEST_POSTGRES_URL is set). Every refusal is checked to change nothing: blocks,
states, reservations, audit events and request rows are compared before and after."""

from __future__ import annotations

import threading
from decimal import Decimal

import pytest
from ledger_support import Backend, FakeClock, assert_unchanged, snapshot

from blockbudget.accounting import Accounting, make_filter
from blockbudget.budget import Budget, RdpCurve
from blockbudget.errors import (
    BudgetExceededError,
    InvalidBudgetError,
    InvalidRequestError,
    ReservationError,
    RetiredBlockError,
    UnknownBlockError,
    UnknownContextError,
)
from blockbudget.ledger import EventKind, Ledger, ReservationState

CAP = Budget(epsilon=1.0, delta=1e-6)
BASIC = make_filter(Accounting.BASIC, capacity=CAP)


def feats(eps: float, delta: float = 0.0) -> tuple[int, ...]:
    return BASIC.features(Budget(epsilon=eps, delta=delta))


def scaled(v: tuple[int, ...], k: int) -> tuple[int, ...]:
    return tuple(k * x for x in v)


def add_basic(ledger: Ledger, blocks: list[str], *, stream: str = "s") -> None:
    ledger.add_blocks(blocks, stream=stream, capacity=CAP, accounting=Accounting.BASIC)


# --- add_blocks ----------------------------------------------------------------------------


def test_add_blocks_registers_and_emits_one_event_per_block(ledger: Ledger) -> None:
    infos = ledger.add_blocks(
        ["d2", "d1"], stream="flights", capacity=CAP, accounting=Accounting.BASIC
    )
    assert [i.block_id for i in infos] == ["d2", "d1"]
    assert all(i.stream == "flights" and not i.retired for i in infos)
    assert [b.block_id for b in ledger.blocks()] == ["d1", "d2"]
    # default (created with the ledger), then the fixture's ml and ops, then the two blocks
    assert [e.kind for e in ledger.events()] == [EventKind.CONTEXT_ADDED] * 3 + [
        EventKind.BLOCK_ADDED
    ] * 2
    events = ledger.events(after_seq=3)
    assert {e.payload["block"] for e in events} == {"d1", "d2"}
    state = ledger.state("d1")
    assert state.charged == (0, 0) and state.reserved == (0, 0)
    assert state.remaining_fraction == 1.0 and not state.exhausted


def test_add_blocks_again_with_same_parameters_is_a_no_op(ledger: Ledger) -> None:
    add_basic(ledger, ["d1"])
    before = snapshot(ledger)
    infos = ledger.add_blocks(
        ["d1"], stream="s", capacity=Budget(epsilon="1.00", delta=1e-6), accounting=Accounting.BASIC
    )
    assert infos[0].block_id == "d1"
    assert_unchanged(ledger, before)


def test_add_blocks_with_other_parameters_is_refused(ledger: Ledger) -> None:
    add_basic(ledger, ["d1"])
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="already exists"):
        ledger.add_blocks(
            ["d1", "d9"], stream="s", capacity=Budget(epsilon=2.0), accounting=Accounting.BASIC
        )
    assert_unchanged(ledger, before)  # d9 was not added either


def test_add_blocks_validates_parameters(ledger: Ledger) -> None:
    before = snapshot(ledger)
    with pytest.raises(InvalidRequestError, match="STRONG"):
        ledger.add_blocks(
            ["x"], stream="s", capacity=CAP, accounting=Accounting.BASIC, slack_delta=1e-7
        )
    with pytest.raises(InvalidBudgetError, match="δ_g > 0"):
        ledger.add_blocks(["x"], stream="s", capacity=Budget(epsilon=1), accounting=Accounting.RDP)
    with pytest.raises(InvalidRequestError, match="stream"):
        ledger.add_blocks(["x"], stream="", capacity=CAP, accounting=Accounting.BASIC)
    with pytest.raises(InvalidRequestError, match="at least one block"):
        ledger.add_blocks([], stream="s", capacity=CAP, accounting=Accounting.BASIC)
    assert_unchanged(ledger, before)


# --- direct charges ------------------------------------------------------------------------


def test_ten_charges_of_a_tenth_fit_and_an_eleventh_of_1e9_does_not(ledger: Ledger) -> None:
    ledger.add_blocks(["d"], stream="s", capacity=Budget(epsilon=1.0), accounting=Accounting.BASIC)
    for i in range(10):
        ledger.charge(["d"], Budget(epsilon=0.1), request_id=f"q{i}")
    state = ledger.state("d")
    assert state.charged == (10**18, 0)
    assert state.exhausted and state.remaining_fraction == 0.0
    before = snapshot(ledger)
    with pytest.raises(BudgetExceededError):
        ledger.charge(["d"], Budget(epsilon=1e-9), request_id="q10")
    assert_unchanged(ledger, before)


def test_charge_updates_the_state_and_the_log(ledger: Ledger) -> None:
    add_basic(ledger, ["a", "b"])
    receipt = ledger.charge(["b", "a"], Budget(epsilon=0.25, delta=1e-7), request_id="r1")
    assert receipt.blocks == ("a", "b") and receipt.context == "default"
    assert receipt.reservation_id is None and receipt.request_id == "r1"
    for block in ("a", "b"):
        s = ledger.state(block)
        assert s.charged == feats(0.25, 1e-7) and s.reserved == (0, 0)
        assert s.remaining == BASIC.describe_remaining(feats(0.25, 1e-7))
        assert s.remaining.startswith("(ε=0.75")
    last = ledger.events()[-1]
    assert last.kind is EventKind.CHARGED and last.seq == receipt.seq
    assert last.request_id == "r1" and last.context == "default"
    assert last.payload == {
        "blocks": ["a", "b"],
        "cost": {"epsilon": "0.25", "delta": "1E-7"},
        "reservation_id": None,
    }


def test_refusal_names_blocks_values_and_rule_and_is_atomic(ledger: Ledger) -> None:
    add_basic(ledger, ["a", "b", "c"])
    ledger.charge(["b"], Budget(epsilon=0.9))
    before = snapshot(ledger)
    with pytest.raises(BudgetExceededError) as info:
        ledger.charge(["a", "b", "c"], Budget(epsilon=0.2), context="default")
    err = info.value
    assert err.blocks == ("b",)
    assert err.context == "default"
    assert "basic" in err.rule
    assert err.requested == str(Budget(epsilon=0.2))
    assert err.remaining == (BASIC.describe_remaining(feats(0.9)),)
    assert err.remaining[0].startswith("(ε=0.1, ")
    assert err.difference == ("(ε=0.1, δ=0)",)
    assert "Nothing was charged" in str(err)
    assert_unchanged(ledger, before)  # a and c were not charged


def test_contexts_each_have_the_full_budget(ledger: Ledger) -> None:
    add_basic(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon=1.0), context="ops")
    ledger.charge(["a"], Budget(epsilon=1.0), context="ml")
    with pytest.raises(BudgetExceededError) as info:
        ledger.charge(["a"], Budget(epsilon=0.01), context="ml")
    assert info.value.context == "ml"
    assert ledger.contexts() == ["default", "ml", "ops"]
    assert ledger.state("a", "default").charged == (0, 0)  # untouched context: zeros
    assert {s.context for s in ledger.states()} == {"default", "ml", "ops"}


def test_rdp_blocks_account_curves_and_pure_budgets(ledger: Ledger) -> None:
    cap = Budget(epsilon=5.0, delta=1e-6)
    ledger.add_blocks(["r"], stream="s", capacity=cap, accounting=Accounting.RDP)
    f = make_filter(Accounting.RDP, capacity=cap)
    curve = RdpCurve.gaussian(sigma=4.0)
    ledger.charge(["r"], curve)
    ledger.charge(["r"], Budget(epsilon=0.1))
    want = tuple(
        x + y for x, y in zip(f.features(curve), f.features(Budget(epsilon=0.1)), strict=True)
    )
    assert ledger.state("r").charged == want


def test_strong_blocks_work_end_to_end(ledger: Ledger) -> None:
    cap = Budget(epsilon=1.0, delta=1e-5)
    ledger.add_blocks(
        ["g"], stream="s", capacity=cap, accounting=Accounting.STRONG, slack_delta=4e-6
    )
    info = ledger.blocks()[0]
    assert info.accounting is Accounting.STRONG and info.slack_delta == 4e-6
    f = make_filter(Accounting.STRONG, capacity=cap, slack_delta=4e-6)
    one = f.features(Budget(epsilon=0.05))
    expected = 0  # how many charges the pure filter admits
    while f.fits(scaled(one, expected + 1)):
        expected += 1
    assert expected >= 1
    accepted = 0
    with pytest.raises(BudgetExceededError) as err:
        for _ in range(expected + 5):
            ledger.charge(["g"], Budget(epsilon=0.05))
            accepted += 1
    assert accepted == expected
    assert "strong" in err.value.rule
    assert ledger.state("g").charged == scaled(one, expected)
    assert ledger.verify().ok


# --- reservations --------------------------------------------------------------------------


def test_reserve_counts_as_spent_until_released(ledger: Ledger) -> None:
    add_basic(ledger, ["a", "b"])
    res = ledger.reserve(["a", "b"], Budget(epsilon=0.6), context="ml", holder="job-1")
    assert res.state is ReservationState.OPEN and res.blocks == ("a", "b")
    assert res.remaining_of("a") == feats(0.6)
    assert ledger.state("a", "ml").reserved == feats(0.6)
    with pytest.raises(BudgetExceededError):
        ledger.charge(["a"], Budget(epsilon=0.5), context="ml")
    ledger.charge(["a"], Budget(epsilon=0.4), context="ml")
    closed = ledger.release(res.id)
    assert closed.state is ReservationState.CLOSED
    assert ledger.reservation(res.id).state is ReservationState.CLOSED
    assert ledger.state("a", "ml").reserved == (0, 0)
    assert ledger.state("a", "ml").charged == feats(0.4)
    ledger.charge(["b"], Budget(epsilon=1.0), context="ml")  # fully available again
    assert ledger.verify().ok


def test_draws_move_reserved_to_charged_and_cannot_exceed_the_reservation(
    ledger: Ledger,
) -> None:
    add_basic(ledger, ["a", "b"])
    res = ledger.reserve(["a", "b"], Budget(epsilon=0.5), context="ml")
    ledger.charge(["a", "b"], Budget(epsilon=0.2), reservation_id=res.id, request_id="d1")
    ledger.charge(["a"], Budget(epsilon=0.3), reservation_id=res.id, request_id="d2")
    a, b = ledger.state("a", "ml"), ledger.state("b", "ml")
    assert a.charged == feats(0.5) and a.reserved == (0, 0)
    assert b.charged == feats(0.2) and b.reserved == feats(0.3)
    assert dict(ledger.reservation(res.id).remaining) == {"a": (0, 0), "b": feats(0.3)}
    before = snapshot(ledger)
    with pytest.raises(ReservationError, match="cannot exceed"):
        ledger.charge(["a", "b"], Budget(epsilon=0.1), reservation_id=res.id)
    with pytest.raises(ReservationError, match="subset"):
        ledger.charge(["b", "zz"], Budget(epsilon=0.1), reservation_id=res.id)
    with pytest.raises(InvalidRequestError, match="context"):
        ledger.charge(["b"], Budget(epsilon=0.1), reservation_id=res.id, context="ops")
    with pytest.raises(UnknownBlockError, match="reservation"):
        ledger.charge(["b"], Budget(epsilon=0.1), reservation_id="res-nope")
    assert_unchanged(ledger, before)
    ledger.release(res.id)
    assert ledger.state("b", "ml").reserved == (0, 0)
    before = snapshot(ledger)
    with pytest.raises(ReservationError, match="closed"):
        ledger.charge(["b"], Budget(epsilon=0.1), reservation_id=res.id)
    with pytest.raises(ReservationError, match="already closed"):
        ledger.release(res.id)
    assert_unchanged(ledger, before)
    assert ledger.verify().ok


def test_reservation_is_all_or_nothing(ledger: Ledger) -> None:
    add_basic(ledger, ["a", "b"])
    ledger.charge(["b"], Budget(epsilon=0.8))
    before = snapshot(ledger)
    with pytest.raises(BudgetExceededError) as info:
        ledger.reserve(["a", "b"], Budget(epsilon=0.3))
    assert info.value.blocks == ("b",)
    assert_unchanged(ledger, before)


# --- expiry --------------------------------------------------------------------------------


def test_expire_releases_past_ttl_and_never_charges(ledger: Ledger, clock: FakeClock) -> None:
    add_basic(ledger, ["a"])
    short = ledger.reserve(["a"], Budget(epsilon=0.3), ttl_seconds=10)
    long = ledger.reserve(["a"], Budget(epsilon=0.2), ttl_seconds=100)
    ledger.charge(["a"], Budget(epsilon=0.1), reservation_id=short.id)
    assert ledger.expire_reservations() == []
    clock.advance(10)
    assert ledger.expire_reservations() == [short.id]
    assert ledger.reservation(short.id).state is ReservationState.EXPIRED
    assert ledger.reservation(long.id).state is ReservationState.OPEN
    s = ledger.state("a")
    assert s.charged == feats(0.1) and s.reserved == feats(0.2)
    expired = [e for e in ledger.events() if e.kind is EventKind.EXPIRED]
    assert len(expired) == 1 and expired[0].request_id is None
    assert expired[0].payload["returned"] == {"a": [str(v) for v in feats(0.2)]}
    with pytest.raises(ReservationError, match="expired"):
        ledger.charge(["a"], Budget(epsilon=0.1), reservation_id=short.id)
    assert ledger.expire_reservations(now=clock.now + 1000) == [long.id]
    assert ledger.state("a").reserved == (0, 0)
    assert ledger.verify().ok


def test_a_draw_after_the_ttl_is_refused_even_before_expiry_runs(
    ledger: Ledger, clock: FakeClock
) -> None:
    add_basic(ledger, ["a"])
    res = ledger.reserve(["a"], Budget(epsilon=0.5), ttl_seconds=5)
    clock.advance(5)
    before = snapshot(ledger)
    with pytest.raises(ReservationError, match="expired"):
        ledger.charge(["a"], Budget(epsilon=0.1), reservation_id=res.id)
    assert_unchanged(ledger, before)


def test_requests_expire_stale_reservations_on_the_blocks_they_touch(
    ledger: Ledger, clock: FakeClock
) -> None:
    add_basic(ledger, ["a", "b"])
    stale = ledger.reserve(["a", "b"], Budget(epsilon=0.9), context="ml", ttl_seconds=30)
    with pytest.raises(BudgetExceededError):
        ledger.reserve(["a"], Budget(epsilon=0.5), context="ml")
    clock.advance(31)
    fresh = ledger.reserve(["a"], Budget(epsilon=0.5), context="ml")  # expires `stale` first
    assert ledger.reservation(stale.id).state is ReservationState.EXPIRED
    assert ledger.state("b", "ml").reserved == (0, 0)  # released on every block
    assert ledger.state("a", "ml").reserved == feats(0.5)
    assert ledger.reservation(fresh.id).is_open
    assert ledger.verify().ok


# --- retire --------------------------------------------------------------------------------


def test_retired_blocks_never_serve_again(ledger: Ledger) -> None:
    add_basic(ledger, ["a", "b"])
    res = ledger.reserve(["a"], Budget(epsilon=0.2))
    infos = ledger.retire(["a"], request_id="ret-1", reason="owner closed it")
    assert infos[0].retired and infos[0].retired_reason == "owner closed it"
    assert ledger.state("a").retired
    before = snapshot(ledger)
    for call in (
        lambda: ledger.charge(["a", "b"], Budget(epsilon=0.1)),
        lambda: ledger.reserve(["b", "a"], Budget(epsilon=0.1)),
        lambda: ledger.charge(["a"], Budget(epsilon=0.1), reservation_id=res.id),
    ):
        with pytest.raises(RetiredBlockError) as info:
            call()
        assert info.value.blocks == ("a",)
    assert_unchanged(ledger, before)
    ledger.release(res.id)  # releasing budget on a retired block is allowed
    n_events = len(ledger.events())
    ledger.retire(["a"])  # already retired: nothing happens
    assert len(ledger.events()) == n_events + 0
    assert ledger.verify().ok


def test_retire_unknown_block_is_refused(ledger: Ledger) -> None:
    add_basic(ledger, ["a"])
    before = snapshot(ledger)
    with pytest.raises(UnknownBlockError, match="'nope'"):
        ledger.retire(["a", "nope"])
    assert_unchanged(ledger, before)


# --- bad input changes nothing -------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda L: L.charge([], Budget(epsilon=0.1)), InvalidRequestError, "at least one"),
        (lambda L: L.charge(["a", "a"], Budget(epsilon=0.1)), InvalidRequestError, "'a'"),
        (lambda L: L.charge("a", Budget(epsilon=0.1)), InvalidRequestError, "one string"),
        (lambda L: L.charge(["a", "ghost"], Budget(epsilon=0.1)), UnknownBlockError, "ghost"),
        (lambda L: L.charge(["a"], 0.1), InvalidBudgetError, "Budget or an RdpCurve"),
        (
            lambda L: L.charge(["a"], RdpCurve.gaussian(sigma=1.0)),
            InvalidBudgetError,
            "basic composition",
        ),
        (
            lambda L: L.charge(["r"], Budget(epsilon=0.1, delta=1e-9)),
            InvalidBudgetError,
            "RDP stream",
        ),
        (
            lambda L: L.charge(["a"], Budget(epsilon=0.1), context=""),
            InvalidRequestError,
            "context",
        ),
        (
            lambda L: L.reserve(["a"], Budget(epsilon=0.1), context="  "),
            InvalidRequestError,
            "context",
        ),
        (
            lambda L: L.reserve(["a"], Budget(epsilon=0.1), context="team/ml"),
            InvalidRequestError,
            "context name",
        ),
        (
            lambda L: L.reserve(["a"], Budget(epsilon=0.1), context="ghost"),
            UnknownContextError,
            "'ghost'.*add_context",
        ),
        (
            lambda L: L.charge(["a"], Budget(epsilon=0.1), context="ghost"),
            UnknownContextError,
            "'ghost'",
        ),
        (
            lambda L: L.charge(["a", "ghost"], Budget(epsilon=0.1), context="ghost"),
            UnknownBlockError,
            "ghost",
        ),
        (
            lambda L: L.reserve(["a"], Budget(epsilon=0.1), ttl_seconds=0),
            InvalidRequestError,
            "ttl",
        ),
        (
            lambda L: L.reserve(["a"], Budget(epsilon=0.1), ttl_seconds=float("nan")),
            InvalidRequestError,
            "ttl",
        ),
        (
            lambda L: L.reserve(["a"], Budget(epsilon=0.1), ttl_seconds=-5),
            InvalidRequestError,
            "ttl",
        ),
        (lambda L: L.reserve([], Budget(epsilon=0.1)), InvalidRequestError, "at least one"),
        (lambda L: L.reserve(["ghost"], Budget(epsilon=0.1)), UnknownBlockError, "ghost"),
        (lambda L: L.release("res-nope"), UnknownBlockError, "res-nope"),
        (lambda L: L.release(""), InvalidRequestError, "reservation_id"),
        (
            lambda L: L.charge(["a"], Budget(epsilon=0.1), request_id=""),
            InvalidRequestError,
            "request_id",
        ),
        (lambda L: L.retire([]), InvalidRequestError, "at least one"),
    ],
)
def test_bad_input_is_refused_and_changes_nothing(
    ledger: Ledger, call: object, error: type[Exception], match: str
) -> None:
    add_basic(ledger, ["a"])
    ledger.add_blocks(
        ["r"], stream="s", capacity=Budget(epsilon=5, delta=1e-6), accounting=Accounting.RDP
    )
    ledger.charge(["a"], Budget(epsilon=0.1), request_id="seed")
    before = snapshot(ledger)
    with pytest.raises(error, match=match):
        call(ledger)  # type: ignore[operator]
    assert_unchanged(ledger, before)


def test_bad_input_with_a_request_id_is_not_recorded(ledger: Ledger) -> None:
    add_basic(ledger, ["a"])
    with pytest.raises(UnknownBlockError):
        ledger.charge(["a", "ghost"], Budget(epsilon=0.1), request_id="q")
    assert ledger.request("q") is None
    receipt = ledger.charge(["a"], Budget(epsilon=0.1), request_id="q")  # the id is still free
    assert ledger.request("q") is not None and receipt.request_id == "q"


# --- reads ---------------------------------------------------------------------------------


def test_reads(ledger: Ledger, clock: FakeClock) -> None:
    add_basic(ledger, ["s1/a", "s1/b"], stream="s1")
    add_basic(ledger, ["s2/a"], stream="s2")
    ledger.add_context("x")
    ledger.add_context("y")
    ledger.charge(["s1/a"], Budget(epsilon=0.5), context="x", request_id="q1")
    res = ledger.reserve(["s1/b"], Budget(epsilon=0.25), context="y", holder="h")
    assert [b.block_id for b in ledger.blocks(stream="s1")] == ["s1/a", "s1/b"]
    assert ledger.contexts() == ["default", "ml", "ops", "x", "y"]
    assert [(s.block, s.context) for s in ledger.states(stream="s1")] == [
        (block, ctx) for block in ("s1/a", "s1/b") for ctx in ("default", "ml", "ops", "x", "y")
    ]
    only_x = ledger.states(context="x")
    assert [s.block for s in only_x] == ["s1/a", "s1/b", "s2/a"]
    assert only_x[0].remaining_fraction == 0.5 and only_x[1].remaining_fraction == 1.0
    got = ledger.reservation(res.id)
    assert got.holder == "h" and got.context == "y" and got.created_at == clock.now
    assert got.expires_at == clock.now + 600.0
    assert [r.id for r in ledger.reservations(state=ReservationState.OPEN)] == [res.id]
    assert ledger.reservations(context="x") == []
    for read in (
        lambda: ledger.state("s1/a", "ghost"),
        lambda: ledger.states(context="ghost"),
        lambda: ledger.reservations(context="ghost"),
    ):
        with pytest.raises(UnknownContextError, match="'ghost'"):
            read()
    with pytest.raises(InvalidRequestError, match="context name"):
        ledger.states(context="")
    record = ledger.request("q1")
    assert record is not None and record.operation.value == "charge"
    assert ledger.request("missing") is None
    events = ledger.events()
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.seq for e in ledger.events(after_seq=2, limit=2)] == [3, 4]
    with pytest.raises(UnknownBlockError):
        ledger.state("nope")
    with pytest.raises(UnknownBlockError):
        ledger.reservation("nope")


def test_state_uses_exact_decimals(ledger: Ledger) -> None:
    add_basic(ledger, ["a"])
    ledger.charge(["a"], Budget(epsilon="0.3333333333333333333"))
    s = ledger.state("a")
    assert s.charged[0] == 333333333333333334  # rounded up to 1e-18
    assert s.capacity.epsilon == Decimal("1.0")


def test_threads_share_one_ledger_without_losing_charges(ledger: Ledger) -> None:
    add_basic(ledger, ["a", "b", "c"])
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(15):
                ledger.charge(
                    ["a", "b"] if i % 2 else ["b", "c"],
                    Budget(epsilon=0.01),
                    request_id=f"t{t}-{i}",
                )
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert errors == []
    assert ledger.state("b").charged == scaled(feats(0.01), 60)
    assert ledger.state("a").charged == scaled(feats(0.01), 28)
    assert ledger.state("c").charged == scaled(feats(0.01), 32)
    assert ledger.verify().ok


def test_ledger_accepts_an_engine_and_reopens(backend: Backend, clock: FakeClock) -> None:
    first = backend.open(clock=clock)
    first.add_context("default")
    add_basic(first, ["a"])
    first.charge(["a"], Budget(epsilon=0.5), request_id="q")
    first.dispose()
    again = Ledger(backend.engine(), clock=clock)
    assert again.state("a").charged == feats(0.5)
    assert again.verify().ok
    again.dispose()


def test_unsupported_targets_are_refused() -> None:
    with pytest.raises(InvalidRequestError):
        Ledger("")
    with pytest.raises(InvalidRequestError):
        Ledger(42)  # type: ignore[arg-type]


def test_requests_over_many_blocks_are_batched(ledger: Ledger) -> None:
    ids = [f"big/{i:04d}" for i in range(1203)]  # more than two IN-list batches of 500
    add_basic(ledger, ids)
    res = ledger.reserve(ids, Budget(epsilon=0.5), context="ml")
    ledger.charge(ids[::2], Budget(epsilon=0.25), reservation_id=res.id)
    ledger.charge(ids, Budget(epsilon=0.25), context="ml")
    states = ledger.states(context="ml")
    assert len(states) == len(ids)
    assert {s.charged for s in states[::2]} == {feats(0.5)}
    assert {s.reserved for s in states[1::2]} == {feats(0.5)}
    ledger.release(res.id)
    infos = ledger.retire(ids, reason="bulk")
    assert all(i.retired for i in infos)
    with pytest.raises(RetiredBlockError):
        ledger.charge(ids[-1:], Budget(epsilon=0.1))
    assert ledger.verify().ok
